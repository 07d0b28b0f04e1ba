"""Smoke test of the SQLite benchmark: ``python -m benchmarks --sqlite --tiny
--no-peers --systems chronos`` runs every phase of our SQLite store (files in the test's
temporary directory) and each one completes with figures in it, the
4-process drain with no job run twice. The peers are not installed here
(their venvs are made by ``--setup-peers``); their figures are not checked,
nor are ours: they move with the machine."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.sqlite

DRAINS = {"drain 1x c=16", "drain 1x c=64", "drain 4x c=16"}
PHASES = {"enqueue", *DRAINS, "pickup", "lateness", "recovery", "idle"}


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_tiny_sqlite_benchmark_runs_every_phase_of_our_store(tmp_path: Path) -> None:
    out = tmp_path / "sqlite.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--sqlite",
            "--tiny",
            "--no-peers",
            "--systems",
            "chronos",
            "--dir",
            str(tmp_path),
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
    rows = doc["results"]["chronos"]
    assert set(doc["results"]) == {"chronos"}
    assert set(rows) == PHASES
    for phase, row in rows.items():
        assert row.get("ok") is True and not row.get("error"), (phase, row)
    sizes = doc["meta"]["sizes"]
    assert _finite(rows["enqueue"]["single_per_s"]) and _finite(rows["enqueue"]["bulk_per_s"])
    for phase in DRAINS:
        assert rows[phase]["completed"] == sizes["drain"], (phase, rows[phase])
        assert rows[phase]["duplicates"] == 0, (phase, rows[phase])
        assert _finite(rows[phase]["jobs_per_s"]), phase
    # four worker processes shared the file
    four = rows["drain 4x c=16"]
    assert four["processes"] == 4 and len(four["by_process"]) == 4
    assert rows["pickup"]["samples"] >= sizes["pickup"]
    assert rows["lateness"]["samples"] >= sizes["late"]
    recovery = rows["recovery"]
    assert recovery["recovered"] == sizes["recovery"] and recovery["mechanism"] == "lease"
    assert recovery["duplicates"] == 0 and _finite(recovery["all_s"])
    assert _finite(rows["idle"]["cpu_ms_per_s"])
    # the load is recorded with the figures, and the tables and targets are printed
    machine = doc["meta"]["machine"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    assert "chronos_trio (SQLite)" in proc.stdout and "== Targets" in proc.stdout
