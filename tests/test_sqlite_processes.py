"""Many processes on one SQLite file (issue 26, "Many processes"): real
worker processes (``python -m chronos_trio worker tests.soak_app:app
--processes 4``) and producer processes of every kind (SyncProducer,
AsyncioProducer, a Trio App) on one file at once; and wake-ups between
processes without a server.

The handlers record each run in append-only files of their own process
(``tests/soak_app.py``), so what ran is known independently of the store.
Every wait is bounded.
"""

from __future__ import annotations

import collections
import statistics
import time
from pathlib import Path

import pytest
import trio

from chronos_trio.cli import EXIT_OK
from chronos_trio.store.sqlite import SqliteStore
from tests import soak_app
from tests._sqlite_procs import (
    Child,
    check_cli,
    child_env,
    finished_ok,
    integrity,
    overlapping,
    runs_of,
    sqlite_file_url,
    trouble,
    wait_drained,
    wait_until,
    worker_process,
)

pytestmark = pytest.mark.sqlite

#: Jobs each producer process enqueues.
PRODUCERS = {"sync": 700, "asyncio": 700, "trio": 600}
PROCESSES = 4


async def test_four_worker_processes_and_three_producer_processes_share_one_file(
    tmp_path: Path,
) -> None:
    """``worker --processes 4`` drains while a SyncProducer, an
    AsyncioProducer and a Trio producer, each in a process of its own,
    enqueue 2,000 jobs into the same file (batches and single enqueues
    interleaved). Every acknowledged job runs exactly once, no other job
    runs, no two runs of a job overlap; no process's output holds a store
    error ("database is locked" or any StoreError, retried or not); the
    file passes ``PRAGMA integrity_check`` and ``check`` finds nothing."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    runs_dir, logs = tmp_path / "runs", tmp_path / "logs"
    manager = worker_process(
        url, runs_dir, logs / "manager.log", "--concurrency", "16", processes=PROCESSES
    )
    producers: dict[str, Child] = {}
    store = SqliteStore.from_url(url)
    total = sum(PRODUCERS.values())
    try:
        with trio.fail_after(240):
            manager.start()
            await manager.wait_ready(PROCESSES)
            began = time.monotonic()
            for kind, n in PRODUCERS.items():
                producers[kind] = Child(
                    "produce", kind, url, str(tmp_path / f"{kind}.ids"), str(n),
                    env=child_env(url, runs_dir), out=logs / f"producer-{kind}.log",
                )  # fmt: skip
            codes = {kind: await child.wait() for kind, child in producers.items()}
            enqueued_in = time.monotonic() - began
            assert codes == dict.fromkeys(PRODUCERS, 0), {
                k: c.output()[-2000:] for k, c in producers.items()
            }
            acknowledged: dict[str, set[str]] = {
                kind: set((tmp_path / f"{kind}.ids").read_text().split()) for kind in PRODUCERS
            }
            expected = set().union(*acknowledged.values())
            await wait_until(lambda: expected <= finished_ok(runs_of(runs_dir)), 120, poll=0.2)
            drained_in = time.monotonic() - began
            await wait_drained(store, 15)
            code = await manager.terminate(30)
    finally:
        for child in producers.values():
            child.kill()
        manager.close()
        await store.aclose()
    runs = runs_of(runs_dir)
    by_pid = collections.Counter(r.pid for rs in runs.values() for r in rs)
    print(
        f"\n{total} jobs from 3 producer processes in {enqueued_in:.1f}s, all run by "
        f"{PROCESSES} worker processes {drained_in:.1f}s after the first enqueue "
        f"({total / drained_in:.0f} jobs/s); runs per process {sorted(by_pid.values())}"
    )
    assert {k: len(v) for k, v in acknowledged.items()} == PRODUCERS
    assert len(expected) == total
    assert set(runs) == expected, "no job nobody enqueued ran"
    more = {job: len(rs) for job, rs in runs.items() if len(rs) != 1}
    assert not more, f"jobs that did not run exactly once: {sorted(more.items())[:10]}"
    assert all(rs[0].outcome == "ok" for rs in runs.values())
    assert not overlapping(runs)
    assert len(by_pid) == PROCESSES, f"every worker process ran jobs: {by_pid}"
    outputs = [("manager", manager.log_path.read_text(errors="replace"))]
    outputs += [(f"producer {k}", c.output()) for k, c in producers.items()]
    assert not trouble(outputs), "\n".join(trouble(outputs)[:20])
    assert code == EXIT_OK
    assert integrity(db) == "ok"
    exit_code, report, text = await check_cli(url)
    assert exit_code == EXIT_OK, text
    assert not report.get("findings"), text


#: The bound on a pickup by an idle worker process (the default
#: wake_interval, 0.02 s, is the poll of ``PRAGMA data_version``; its idle
#: poll of the table, 5 s, and the worker's --poll-interval, 30 s, are far).
PICKUP_BOUND = 0.5


async def test_an_idle_worker_process_picks_up_another_process_s_job_promptly(
    tmp_path: Path,
) -> None:
    """A worker process waits idle (poll interval 30 s); this process
    enqueues one job at a time, each after a pause: each handler starts
    within :data:`PICKUP_BOUND` of the enqueue call, measured on the host's
    clock from the call to the handler's own record of its start."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    runs_dir = tmp_path / "runs"
    worker = worker_process(url, runs_dir, tmp_path / "worker.log", "--poll-interval", "30")
    app = soak_app.make_app(url, schedules=False)
    work = app.tasks["soak.work"]
    pickups: list[float] = []
    try:
        with trio.fail_after(60):
            worker.start()
            await worker.wait_ready()
            await work.enqueue(soak_app.Spec())  # the first (the file made, the worker warm)
            await wait_until(lambda: len(runs_of(runs_dir)) == 1, 10, poll=0.01)
            for _ in range(12):
                await trio.sleep(0.3)  # idle: the worker waits
                called = time.time()
                job_id = (await work.enqueue(soak_app.Spec())).job_id
                await wait_until(lambda: job_id in runs_of(runs_dir), 10, poll=0.005)  # noqa: B023
                pickups.append(runs_of(runs_dir)[job_id][0].start - called)
            code = await worker.terminate(30)
    finally:
        worker.close()
        await app.aclose()
    ms = sorted(round(p * 1000) for p in pickups)
    print(
        f"\npickup by an idle worker process (ms): median {statistics.median(ms)}, "
        f"max {ms[-1]}, all {ms}"
    )
    assert max(pickups) < PICKUP_BOUND, ms
    assert code == EXIT_OK
    assert not trouble([("worker", worker.log_path.read_text(errors="replace"))])
