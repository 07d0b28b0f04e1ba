"""The fault soak: real worker processes and a real server, mixed jobs, and
faults drawn from a seed (see ``tests/_soak.py`` for the set-up and the
faults, ``tests/_soak_check.py`` for the invariants). The figures are
printed at the end (``pytest -s``). Each soak runs against Redis (a
redis-server with an append-only file), against PostgreSQL (a private
cluster; the server's faults become its kill -9 and
``pg_terminate_backend``) and against SQLite (one file every worker process
opens; the faults are kill -9 of those processes, and the soak also checks
that no job ran twice at once, that the store's ``check`` and ``PRAGMA
integrity_check`` find nothing, and that no worker logged a store error):
``[redis]``, ``[postgres]`` and ``[sqlite]`` in the test IDs.

* ``test_soak_short``: 40 s of faults, in the normal suite
  (deselect it with ``-m "not soak_short"``).
* ``test_soak_long``: ten minutes of faults and 13,000-16,000 jobs (by load), only with
  ``CHRONOS_SOAK=1``.

``CHRONOS_SOAK_SEED`` replaces the fixed seed (the seed used is printed);
``CHRONOS_SOAK_MINUTES`` the long form's length. A soak leaves its records
in its temporary directory (printed): ``runs/`` (the handlers' run files),
``logs/`` (every worker process's JSON log), ``redis/`` (the AOF) or
``postgres.log`` (the server's log),
``expected.jsonl`` (every EnqueueResult) and ``faults.jsonl`` (the faults,
with their times and the pids they hit).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio import leadership_name
from chronos_trio.testing.postgres_server import PostgresUnavailable, postgres_bindir
from chronos_trio.testing.redis_server import in_ci
from tests import soak_app
from tests._soak import Plan, Soak
from tests._soak_check import Report, Run, check, read_runs, read_worker_logs
from tests._soak_servers import SoakSqlite
from tests._sqlite_procs import integrity, overlapping, trouble

#: The servers, each with its marker (the fixtures' rules: without the
#: binaries a test skips, or fails under CI=true).
SERVERS = [
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
    pytest.param("postgres", marks=pytest.mark.postgres, id="postgres"),
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
]

#: Early runs are judged against the store's due times with this tolerance.
#: The server's clock (Redis's TIME, PostgreSQL's clock_timestamp()) and the
#: handlers' time.time() read the same host clock, and the store lets a job
#: run only once that clock has reached its due time, so the tolerance
#: covers float rounding of the stored times, nothing more.
EARLY_TOLERANCE = 0.01

SHORT_SEED = 20261101
LONG_SEED = 1103


def seed(default: int) -> int:
    return int(os.environ.get("CHRONOS_SOAK_SEED", default))


def require(server: str) -> None:
    """Skip (fail under CI=true) when PostgreSQL's binaries are missing;
    redis-server's absence is the RedisServer's own error."""
    if server != "postgres":
        return
    try:
        postgres_bindir()
    except PostgresUnavailable as exc:
        if in_ci():
            pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
        pytest.skip(str(exc))


async def run_soak(plan: Plan, directory: Path, server: str) -> None:
    require(server)
    began = time.monotonic()
    print(f"\nsoak on {server}, seed={plan.seed} (CHRONOS_SOAK_SEED={plan.seed} repeats the plan)")
    print(f"plan: {plan}")
    print(f"records and logs: {directory}")
    soak = Soak(plan, directory, server)
    producer = None
    try:
        with trio.fail_after(plan.bound):
            async with trio.open_nursery() as nursery:
                await soak.start(nursery)
                # made once the server runs: its port is known then
                producer = soak_app.make_app(soak.url(soak.server.port), schedules=False)
                store = producer.store
                started = time.monotonic()
                async with trio.open_nursery() as faults:
                    faults.start_soon(soak.produce, producer)
                    faults.start_soon(soak.inject_faults, store)
                soak.timings["fault phase seconds"] = time.monotonic() - started
                await soak.drain(store)
                final = await soak.snapshot(store)
                leader = await store.current_leader(leadership_name(soak_app.app.name))
                checked = await store.check() if server == "sqlite" else None
                nursery.cancel_scope.cancel()
    finally:
        if producer is not None:
            await producer.aclose()
        soak.close()
        soak.save()  # what the producer was told and the fault timeline, for a post-mortem
    runs, bad = read_runs(soak.runs_dir)
    logs = read_worker_logs(soak.worker_logs())
    report = check(
        expected=soak.expected,
        final=final,
        runs=runs,
        logs=logs,
        timeouts=soak_app.TIMEOUTS,
        faults=soak.faults,
        lease_duration=plan.lease,
        tolerance=EARLY_TOLERANCE,
        bad_lines=bad,
    )
    for item in soak.stuck_at_drain:
        report.problem("stuck", item)
    for item in soak.unclean_stops:
        report.problem("unclean stops", item)
    if server == "sqlite":
        file_checks(report, soak, runs, checked)
    soak.timings["total seconds"] = time.monotonic() - began
    print(f"jobs enqueued: {len(soak.expected)} (enqueue calls retried: {soak.enqueue_failures})")
    print("faults injected by kind:")
    for kind in soak.fault_kinds:
        print(f"  {kind:<20} {soak.fault_counts[kind]}")
    for note, n in sorted(soak.fault_notes.items()):
        print(f"  ({note}: {n})")
    for line in report.lines():
        print(line)
    print("timings: " + ", ".join(f"{k} {v:.1f}" for k, v in soak.timings.items()))
    print(f"leader at the end: {leader.holder if leader else None}")
    violations = report.violations()
    assert all(soak.fault_counts[k] for k in soak.fault_kinds), soak.fault_counts
    assert not violations, (
        "\n".join(
            f"{name} ({len(items)}): " + "\n    ".join(items[:20])
            for name, items in violations.items()
        )
        + f"\nseed {plan.seed}; records in {directory}"
    )


def file_checks(report: Report, soak: Soak, runs: dict[str, list[Run]], checked: Any) -> None:
    """What the SQLite soak adds (its only faults are kill -9 of worker
    processes, so no process is ever paused past its lease): no two runs of
    a job at once (a run cut short ends with its process's kill); the
    store's checker finds nothing; the file passes ``PRAGMA
    integrity_check``; no worker logged a store error ("database is
    locked" and the like: a kill -9 mid-transaction lets go of the lock)."""
    killed = {pid: f.start for f in soak.faults if f.pids for pid in f.pids}
    at_once = overlapping(runs, killed)
    for item in at_once:
        report.problem("ran twice at once", item)
    if checked is None or not checked.ok or checked.findings:
        report.problem("check found problems", repr(checked))
    assert isinstance(soak.server, SoakSqlite)
    verdict = integrity(soak.server.path)
    if verdict != "ok":
        report.problem("integrity_check", verdict)
    logs = [(p.name, p.read_text(errors="replace")) for p in soak.worker_logs()]
    errors = [line for line in trouble(logs) if "locked" in line or "StoreError" in line]
    for line in errors:
        report.problem("store errors in worker logs", line)
    findings = "not run" if checked is None else len(checked.findings)
    print(
        f"sqlite: runs of one job at once {len(at_once)}; check findings {findings} "
        f"({checked.records if checked else 0} records walked); integrity_check {verdict}; "
        f"store errors in worker logs {len(errors)}"
    )


@pytest.mark.soak_short
@pytest.mark.parametrize("server", SERVERS)
async def test_soak_short(tmp_path: Path, server: str) -> None:
    plan = Plan(
        seed=seed(SHORT_SEED),
        fault_seconds=40,
        produce_seconds=30,
        jobs_per_second=20,
        fault_interval=2.0,
        drain_timeout=60,
    )
    await run_soak(plan, tmp_path, server)


@pytest.mark.soak  # skipped unless CHRONOS_SOAK=1 (tests/conftest.py)
@pytest.mark.parametrize("server", SERVERS)
async def test_soak_long(tmp_path: Path, server: str) -> None:
    minutes = float(os.environ.get("CHRONOS_SOAK_MINUTES", "10"))
    plan = Plan(
        seed=seed(LONG_SEED),
        fault_seconds=60 * minutes,
        produce_seconds=60 * minutes - 30,
        jobs_per_second=30,
        fault_interval=3.0,
        drain_timeout=120,
    )
    await run_soak(plan, tmp_path, server)
