"""Smoke test of the PostgreSQL benchmark: ``python -m benchmarks --postgres
--tiny --no-peers`` runs every phase of our two contestants (our PostgreSQL
store and our Redis store) on a private cluster and redis-server, and each
one completes with figures in it. The peers are not installed here (their
venvs are made by ``--setup-peers``); their figures are not checked, nor are
ours: they move with the machine."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chronos_trio.testing.postgres_server import PostgresUnavailable, postgres_bindir
from chronos_trio.testing.redis_server import in_ci

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

PHASES = {
    "enqueue",
    "drain c=16 noop",
    "drain c=64 noop",
    "drain c=16 query",
    "drain c=64 query",
    "pickup",
    "lateness",
    "recovery",
    "idle",
    "xmin",
}


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_tiny_postgres_benchmark_runs_every_phase_of_our_stores(tmp_path: Path) -> None:
    try:
        postgres_bindir()
    except PostgresUnavailable as exc:
        if in_ci():
            pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
        pytest.skip(str(exc))
    out = tmp_path / "pg.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--postgres",
            "--tiny",
            "--no-peers",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    results = doc["results"]
    assert set(results) == {"pg", "redis"}
    assert set(results["pg"]) == PHASES
    assert set(results["redis"]) == PHASES - {"xmin"}  # a snapshot does not touch Redis
    for system, rows in results.items():
        for phase, row in rows.items():
            assert row.get("ok") is True and not row.get("error"), (system, phase, row)
        assert _finite(rows["enqueue"]["single_per_s"]) and _finite(rows["enqueue"]["bulk_per_s"])
        for phase in PHASES - {"enqueue", "pickup", "lateness", "recovery", "idle", "xmin"}:
            assert rows[phase]["completed"] >= rows[phase]["expected"], (system, phase)
            assert _finite(rows[phase]["jobs_per_s"]), (system, phase)
        assert rows["pickup"]["samples"] >= doc["meta"]["sizes"]["pickup"]
        assert rows["lateness"]["samples"] >= doc["meta"]["sizes"]["late"]
        assert rows["recovery"]["recovered"] >= doc["meta"]["sizes"]["recovery"]
        assert _finite(rows["idle"]["queries_per_s"])
    xmin = results["pg"]["xmin"]
    for key in ("before_per_s", "pinned_per_s", "before_pickup_p50_ms", "pinned_pickup_p99_ms"):
        assert _finite(xmin[key]), (key, xmin)
    assert xmin["held_s"] >= doc["meta"]["sizes"]["xmin_hold"]
    # the load is recorded with the figures, and the tables are printed
    machine = doc["meta"]["machine"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    assert "Pinned xmin" in proc.stdout and "chronos_trio (PostgreSQL)" in proc.stdout
