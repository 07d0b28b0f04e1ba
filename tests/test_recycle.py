"""Worker recycling in one process, on the MemoryStore under Trio's virtual
clock (``max_jobs`` also on Redis, PostgreSQL and SQLite): ``max_jobs``
leases that many jobs in all, runs them and ends the run;
``max_memory_mb`` (the reading faked) stops leasing, hands back what has
not started and lets running handlers finish past ``shutdown_grace``,
until ``stop()`` gives them that grace; bad values are refused when the
config is built, and on the command line. The process manager replaces a
recycled child at once and does not count it as a crash. Recycling across
processes on Redis: tests/test_recycle_process.py."""

from __future__ import annotations

import sys
from collections.abc import Callable

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobState, Recycled, Store, WorkerConfig
from chronos_trio.actors import recycler
from chronos_trio.cli import EXIT_USAGE, main
from chronos_trio.cli._process_manager import ProcessManager
from chronos_trio.integrations.prometheus import PrometheusMetrics
from tests._backends import Backend


@attrs.frozen
class Nap:
    seconds: float


def napping_app(store: Store | None = None) -> tuple[App, list[tuple[float, float]]]:
    """An app (on ``store``, else a MemoryStore) whose ``nap`` task sleeps;
    the (start, end) of each run."""
    app = App(store)
    runs: list[tuple[float, float]] = []

    @app.task("nap", max_retries=0, timeout=1000)
    async def nap(args: Nap, job: JobContext) -> None:
        start = trio.current_time()
        await trio.sleep(args.seconds)
        runs.append((start, trio.current_time()))

    return app, runs


async def counts(app: App) -> dict[JobState, int]:
    return dict((await app.inspector().queue("default")).counts)


async def test_max_jobs_runs_that_many_then_ends_the_run(backend: Backend, clock: object) -> None:
    """On every store: the worker leases 10 jobs in all, runs them and
    returns by itself; the other 15 stay ready, none leased or lost."""
    app, runs = napping_app(backend.store())
    nap = backend.pick(memory=1.0, redis=0.05)
    await app.tasks["nap"].enqueue_many([Nap(nap) for _ in range(25)])
    worker = app.worker(max_jobs=10, concurrency=4, batch_size=8, **backend.timing())
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)  # returns by itself
    stats = worker.statistics()
    assert worker.recycled == Recycled("max_jobs", limit=10, jobs=10)
    assert stats.recycled == worker.recycled
    assert (stats.leased, stats.succeeded, stats.released) == (10, 10, 0)
    assert len(runs) == 10  # every leased job ran (4 + 4 + 2 at a time)
    left = await counts(app)
    assert left[JobState.READY] == 15 and left[JobState.LEASED] == 0
    assert sum(left.values()) == 15 + left[JobState.SUCCEEDED]


async def test_memory_limit_hands_back_unstarted_and_finishes_running(
    autojump_clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = napping_app()
    await app.tasks["nap"].enqueue_many([Nap(30.0) for _ in range(10)])
    rss = [50.0]
    monkeypatch.setattr(recycler, "resident_mb", lambda: rss[0])
    worker = app.worker(
        max_memory_mb=100, memory_check_interval=0.5, concurrency=2, shutdown_grace=1.0
    )
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await trio.sleep(5)
            assert worker.recycled is None and worker.statistics().running == 2
            rss[0] = 150.0
            await trio.sleep(1)
            # asked: nothing more starts, the running two go on past the grace
            left = await counts(app)
            assert left[JobState.READY] == 8 and left[JobState.LEASED] == 2
        ended = trio.current_time()
    recycled = worker.recycled
    assert recycled is not None and recycled.reason == "max_memory"
    assert (recycled.limit, recycled.rss_mb) == (100, 150.0)
    assert [round(end - start, 3) for start, end in runs] == [30.0, 30.0]
    assert ended == pytest.approx(30.0, abs=0.1)
    assert worker.statistics().succeeded == 2
    assert (await counts(app))[JobState.READY] == 8
    await app.aclose()


async def test_stop_during_a_recycle_gives_running_handlers_the_grace(
    autojump_clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = napping_app()
    await app.tasks["nap"].enqueue(Nap(500.0))
    monkeypatch.setattr(recycler, "resident_mb", lambda: 1e6)
    worker = app.worker(max_memory_mb=100, memory_check_interval=1.0, shutdown_grace=2.0)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await trio.sleep(10)  # recycling since t=1, the handler runs on
            assert worker.recycled is not None and worker.statistics().running == 1
            worker.stop()
            stopped = trio.current_time()
        assert trio.current_time() - stopped == pytest.approx(2.0, abs=0.01)
    assert runs == []  # cancelled at the grace; released back to ready
    assert (await counts(app))[JobState.READY] == 1
    await app.aclose()


async def test_a_worker_stopped_is_not_recycled(autojump_clock: object) -> None:
    app, _ = napping_app()
    async with app.open_worker(max_jobs=5) as worker:
        await trio.sleep(1)
    assert worker.recycled is None and worker.statistics().recycled is None
    await app.aclose()


@pytest.mark.parametrize("field", ["max_jobs", "max_memory_mb"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
def test_bad_limits_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        WorkerConfig.build(**{field: value})


@pytest.mark.parametrize("flag", ["--max-jobs-per-child", "--max-memory-per-child"])
@pytest.mark.parametrize("value", ["0", "-3", "1.5", "x"])
def test_bad_limits_on_the_command_line(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", "tests.tests_app:app", flag, value]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"argument {flag}: expected an integer >= 1, got {value!r}" in err


def test_recycling_needs_a_shared_store(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["worker", "tests.tests_app:app", "--url", "memory://", "--max-jobs-per-child", "5"]
    )
    assert code == EXIT_USAGE
    assert "recycling: the in-memory store" in capsys.readouterr().err


# A stand-in child: ready, then exits with the code given after 0.1 s.
CHILD = r"""
import os, sys, time
fd, code = int(sys.argv[1]), int(sys.argv[2])
os.write(fd, b"ready\n")
time.sleep(0.1)
sys.exit(code)
"""


def exiting(
    code: int, *, backoff: float, on_recycle: Callable[[int], None] | None = None
) -> ProcessManager:
    """A manager of one stand-in child that exits with ``code``; at most
    one restart a minute, after ``backoff`` seconds; 11 means recycled."""
    return ProcessManager(
        lambda index, fd: [sys.executable, "-c", CHILD, str(fd), str(code)],
        processes=1,
        restart_intensity=1,
        restart_period=60,
        backoff_initial=backoff,
        recycle_exit_code=11,
        on_recycle=on_recycle,
    )


async def test_manager_replaces_a_recycled_child_at_once() -> None:
    metrics = PrometheusMetrics()
    manager = exiting(11, backoff=30.0, on_recycle=metrics.process_recycled)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            # Far more than the intensity, none after a 30 s backoff.
            while manager.statistics().recycled < 4:
                await trio.sleep(0.05)
            manager.stop()
    stats = manager.statistics()
    assert stats.restarts == 0 and stats.children[0].restarts == 0
    assert stats.children[0].recycled == stats.recycled >= 4
    # each replacement counted for Prometheus, none as a restart
    got = metrics.registry.get_sample_value
    assert got("chronos_process_recycles_total") == stats.recycled
    assert got("chronos_process_restarts_total") == 0


async def test_other_exit_codes_still_count_as_crashes() -> None:
    manager = exiting(1, backoff=0.01)
    with trio.fail_after(30), pytest.raises(Exception, match="restarted 2 times"):
        await manager.run()
    assert manager.statistics().recycled == 0
