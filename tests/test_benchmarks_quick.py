"""Smoke test of the benchmark suite: ``python -m benchmarks --quick`` runs
every workload (small N, no peers) against its own redis-server and each one
completes. Figures are not checked: they move with the machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def test_quick_benchmark_completes_every_workload(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    # Charts need matplotlib, an optional extra: without it they are skipped.
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    workloads = doc["workloads"]
    expected = {"lifecycle", "drain", "saturation", "enqueue", "replicas", "pickup",
                "lateness", "recovery", "idle", "results", "roundtrip", "waiters", "incr", "io",
                "startup", "memory", "scale"}  # fmt: skip
    assert expected <= {name for name, rows in workloads.items() if rows}
    for name, rows in workloads.items():
        for row in rows:
            assert row.get("ok") is True, (name, row)
            assert not row.get("error"), (name, row)
    # memory: every job measured, and its stored form described
    for row in workloads["memory"]:
        assert row["enqueued"] == row["expected"] and row["bytes_per_job"] > 0, row
        assert row["job_key_encoding"] and row["key_groups"], row
    # scale: the schedule was whole after the measurements (none of it ran)
    for row in workloads["scale"]:
        assert row["scheduled_after"] == row["scheduled"], row
