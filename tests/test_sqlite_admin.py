"""The SQLite store's admin, topology, registry and leadership parts, where
SQLite differs from the other stores: several stores (standing for
processes) on one file, fencing by the file's write lock, the store's
clock judged inside each transaction, reads that never write, and the
wake-ups of this process's waiters after an admin change.

The conformance suite (tests/test_sqlite_conformance.py) checks the
roles' answers; these check what only a shared file can get wrong."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from chronos_trio.records._jobs import JobState, NewJob
from chronos_trio.records._unique import Unique
from chronos_trio.records._workers import WorkerInfo
from chronos_trio.store import TopologyError, TriggerResult
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.store.sqlite._registry import PURGE_PER_BEAT

pytestmark = pytest.mark.sqlite

T0 = 1_700_000_000.0


class Clock:
    """A clock the test moves (epoch seconds)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def pair(sqlite_url: str, clock: Clock) -> AsyncIterator[tuple[SqliteStore, SqliteStore]]:
    """Two stores on one file: two processes sharing it."""
    one = SqliteStore.from_url(sqlite_url, clock=clock)
    two = SqliteStore.from_url(sqlite_url, clock=clock)
    try:
        yield one, two
    finally:
        await one.aclose()
        await two.aclose()


def job(job_id: str, queue: str = "q", **kw: object) -> NewJob:
    return NewJob(job_id, queue, "k", b"{}", **kw)  # type: ignore[arg-type]


def worker(worker_id: str) -> WorkerInfo:
    return WorkerInfo(worker_id, "host", 1, ("q",), 1, T0, 0.0, 0, ())


# -- leadership ------------------------------------------------------------------------


async def test_leadership_is_one_row_whose_epoch_only_grows_across_stores(
    pair: tuple[SqliteStore, SqliteStore], clock: Clock
) -> None:
    a, b = pair
    with trio.fail_after(10):
        first = await a.acquire_leadership("lead", "A", 10)
        assert first is not None and first.epoch == 1
        assert await b.acquire_leadership("lead", "B", 10) is None  # A holds it
        again = await a.acquire_leadership("lead", "A", 10)  # its holder: same epoch
        assert again is not None and again.epoch == 1

        clock.now += 11  # A lapses
        assert await b.current_leader("lead") is None
        second = await b.acquire_leadership("lead", "B", 10)
        assert second is not None and second.epoch == 2
        assert not await a.renew_leadership("lead", "A", 1, 10)  # deposed: fenced
        assert not await a.resign_leadership("lead", "A", 1)
        assert await a.current_leader("lead") == second

        assert await b.resign_leadership("lead", "B", 2)
        assert await a.current_leader("lead") is None
        third = await a.acquire_leadership("lead", "A", 10)  # the row stayed: epoch + 1
        assert third is not None and third.epoch == 3


async def test_a_deposed_leader_s_trigger_is_refused_and_a_fire_time_enqueued_once(
    pair: tuple[SqliteStore, SqliteStore], clock: Clock
) -> None:
    a, b = pair
    with trio.fail_after(10):
        old = await a.acquire_leadership("lead", "A", 10)
        assert old is not None
        assert await a.enqueue_trigger("lead", old.epoch, "s", T0, job("s@1")) == (
            TriggerResult.ENQUEUED
        )
        clock.now += 11
        new = await b.acquire_leadership("lead", "B", 10)
        assert new is not None and new.epoch == old.epoch + 1

        fire = T0 + 60
        assert await a.enqueue_trigger("lead", old.epoch, "s", fire, job("s@2a")) == (
            TriggerResult.STALE_EPOCH
        )
        assert await b.enqueue_trigger("lead", new.epoch, "s", fire, job("s@2")) == (
            TriggerResult.ENQUEUED
        )
        # the same fire time (or an earlier one) again, from either store: fired
        for store, at in ((b, fire), (a, fire), (b, T0)):
            result = await store.enqueue_trigger("lead", new.epoch, "s", at, job("s@x"))
            assert result is TriggerResult.ALREADY_FIRED
        assert await a.schedule_last_fired("lead") == {"s": fire}
        assert await a.get_job("s@2a") is None and await a.get_job("s@x") is None
        assert [j.id for j in await b.list_jobs("q", JobState.READY)] == ["s@1", "s@2"]


async def test_racing_triggers_of_one_fire_time_enqueue_one_job(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    a, b = pair
    lead = await a.acquire_leadership("lead", "A", 30)
    assert lead is not None
    results: list[TriggerResult] = []

    async def fire(store: SqliteStore, n: int) -> None:
        results.append(await store.enqueue_trigger("lead", lead.epoch, "s", T0, job(f"j{n}")))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(fire, (a, b)[n % 2], n)
    assert sorted(results) == sorted([TriggerResult.ENQUEUED] + [TriggerResult.ALREADY_FIRED] * 7)
    (stats,) = await a.stats(["q"])
    assert stats.counts[JobState.READY] == 1


async def test_a_trigger_whose_enqueue_fails_records_nothing(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    a, _ = pair
    with trio.fail_after(10):
        lead = await a.acquire_leadership("lead", "A", 10)
        assert lead is not None
        unresolved = job("bad", unique=Unique(key=None))
        with pytest.raises(ValueError):
            await a.enqueue_trigger("lead", lead.epoch, "s", T0, unresolved)
        assert await a.schedule_last_fired("lead") == {}  # rolled back with the job
        assert await a.enqueue_trigger("lead", lead.epoch, "s", T0, job("good")) == (
            TriggerResult.ENQUEUED
        )


# -- reads ---------------------------------------------------------------------------


async def test_admin_reads_show_a_due_delayed_job_ready_without_a_promoter(
    pair: tuple[SqliteStore, SqliteStore], clock: Clock
) -> None:
    a, b = pair
    with trio.fail_after(10):
        await a.enqueue_many([job("later", delay=30)])
        (before,) = await b.stats(["q"])
        assert before.counts[JobState.SCHEDULED] == 1 and before.counts[JobState.READY] == 0
        clock.now += 30
        (after,) = await b.stats(["q"])
        assert after.counts[JobState.SCHEDULED] == 0 and after.counts[JobState.READY] == 1
        got = await b.get_job("later")
        assert got is not None and got.state is JobState.READY
        assert [j.id for j in await b.list_jobs("q", JobState.READY)] == ["later"]
        assert await b.list_jobs("q", JobState.SCHEDULED) == []
        assert not await b.run_now("later")  # due already: shown ready, nothing to do


async def test_reads_never_register_a_queue_and_topology_registers_once(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    a, b = pair
    with trio.fail_after(10):
        (stats,) = await a.stats(["nowhere"])
        assert sum(stats.counts.values()) == 0
        assert await a.list_jobs("nowhere", JobState.READY) == []
        assert await a.limit_usage("nowhere") == []
        assert await b.queues() == []
        await a.topology("t")
        assert await b.queues() == ["t"]
        # a refused change changes nothing, not even the registration
        with pytest.raises(TopologyError):
            await a.promote_queue_version("u", 2, 0)
        with pytest.raises(TopologyError):
            await a.complete_draining_version("v", 1)
        assert await b.queues() == ["t"]


# -- topology ------------------------------------------------------------------------


async def test_another_store_routes_new_jobs_to_a_promoted_version(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    a, b = pair
    with trio.fail_after(10):
        (old,) = await b.enqueue_many([job("old")])
        assert b.locate(old.placement) == (1, 0)
        await a.promote_queue_version("q", 2, 4)
        (new,) = await b.enqueue_many([job("new")])
        located = b.locate(new.placement)
        assert located is not None and located[0] == 2 and 0 <= located[1] < 4
        with pytest.raises(TopologyError, match="still holds 1 job"):
            await b.complete_draining_version("q", 1)
        assert await a.delete_job("old")
        top = await b.complete_draining_version("q", 1)
        assert [v.version for v in top.versions] == [2]
        (stats,) = await a.stats(["q"])
        assert set(stats.by_partition) == {located}


# -- registry ------------------------------------------------------------------------


async def test_a_beat_purges_a_bounded_number_of_lapsed_entries(
    pair: tuple[SqliteStore, SqliteStore], clock: Clock
) -> None:
    a, b = pair
    with trio.fail_after(20):
        lapsed = PURGE_PER_BEAT + 5
        for n in range(lapsed):
            await a.beat_worker(worker(f"old{n}"), 1.0)
        clock.now += 2
        assert await b.workers() == []  # lapsed: never listed, removed or not
        await b.beat_worker(worker("live"), 10.0)

        def stored(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT count(*) FROM workers").fetchone()[0])

        assert await b._db.read(stored, what="test") == lapsed - PURGE_PER_BEAT + 1
        assert [w.worker_id for w in await a.workers()] == ["live"]
        await a.unregister_worker("live")
        assert await b.workers() == []


# -- wake-ups ------------------------------------------------------------------------


async def _woken_by(store: SqliteStore, change: Callable[[], Awaitable[object]]) -> None:
    """An idle waiter of ``store`` (idle_poll 5 s by default) returns well
    within a second of ``change``."""

    async def wait() -> None:
        await store.wait_ready(["q"], 30)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.2)  # the waiter is waiting
            await change()


async def test_resume_and_run_now_wake_this_process_s_idle_workers(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    a, _ = pair
    await a.set_paused("q", True)
    await a.enqueue_many([job("ready")])
    await _woken_by(a, lambda: a.set_paused("q", False))

    assert await a.delete_job("ready")
    await a.enqueue_many([job("later", delay=3600)])
    await _woken_by(a, lambda: a.run_now("later"))


# -- retention -----------------------------------------------------------------------


def _counting(store: SqliteStore) -> list[int]:
    """Counts the statements the store's operations run (BEGIN and COMMIT
    left out)."""
    count = [0]
    write_blocking = store._db.write_blocking

    def counted(work: Callable[[sqlite3.Connection], object], what: str) -> object:
        def traced(conn: sqlite3.Connection) -> object:
            conn.set_trace_callback(lambda _sql: count.__setitem__(0, count[0] + 1))
            try:
                return work(conn)
            finally:
                conn.set_trace_callback(None)

        return write_blocking(traced, what)

    store._db.write_blocking = counted  # type: ignore[method-assign,assignment]
    return count


async def _finished(
    store: SqliteStore,
    prefix: str,
    state: str,
    n: int,
    *,
    queue: str = "q",
    until: float = 0.0,
    retained: bool = False,
) -> None:
    """``n`` finished rows written directly (no operation makes so many fast)."""
    await store.set_paused(queue, False)  # registers it

    def insert(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO jobs (id, queue, kind, payload, run_at, state, max_retries, timeout,"
            " created_at, finished_at, retain_until, retained)"
            " VALUES (?, ?, 'k', x'7b7d', 0, ?, 0, 30, ?, ?, ?, ?)",
            [
                (
                    f"{prefix}{i}",
                    queue,
                    state,
                    i,
                    T0 - 1000 + i * 0.001,
                    until + i * 0.001,
                    retained,
                )
                for i in range(1, n + 1)
            ],
        )

    await store._db.write(insert, what="test")


async def test_trim_of_many_rows_is_three_statements(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    store, other = pair
    await _finished(store, "d", "dead", 3000)
    await _finished(store, "a", "aborted", 500, queue="o")
    await _finished(store, "ok", "succeeded", 2000, until=T0 + 3600, retained=True)
    await _finished(store, "old", "succeeded", 1000, until=T0 - 3600, retained=True)
    await _finished(store, "res", "succeeded", 700, until=T0 - 3600)  # uncounted
    count = _counting(store)
    with trio.fail_after(10):
        trimmed = await store.trim(
            ["q", "o"], dead_max_age=None, dead_max_count=100, keep_succeeded=50
        )
    assert count[0] <= 3, f"{count[0]} statements for one trim"
    # 1000 lapsed retained successes, 2900 + 400 dead and aborted beyond 100
    # per queue, 1950 retained successes beyond 50
    assert trimmed.count == 1000 + 2900 + 400 + 1950
    q, o = await other.stats(["q", "o"])
    assert q.counts[JobState.DEAD] == 100 and q.counts[JobState.SUCCEEDED] == 50
    assert o.counts[JobState.ABORTED] == 100
    kept = await other.list_jobs("q", JobState.DEAD, limit=1)
    assert [j.id for j in kept] == ["d2901"], "the newest dead jobs are kept"
    assert await other.get_job("res1") is None
    # requeue takes the oldest dead first
    requeued = await store.requeue_dead("q", limit=10)
    assert requeued.count == 10
    ready = await other.list_jobs("q", JobState.READY, limit=100)
    assert sorted(j.id for j in ready) == sorted(f"d{i}" for i in range(2901, 2911))
