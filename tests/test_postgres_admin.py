"""The PostgreSQL store's admin, leadership and checker parts, on what only
PostgreSQL can show: epochs fencing a deposed leader's trigger, two stores
racing one trigger, trim's statement count over many rows, and the
checker's findings on rows no operation writes."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from chronos_trio.records._jobs import JobState, NewJob
from chronos_trio.store import Problem, Repair, TriggerResult
from chronos_trio.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

_schemas = itertools.count()


@pytest.fixture
async def url(postgres_url: str) -> str:
    return f"{postgres_url}?schema=admin_{next(_schemas)}"


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    made = PostgresStore.from_url(url)
    try:
        yield made
    finally:
        await made.aclose()


def _job(job_id: str, queue: str = "cron") -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b"{}")


async def _sql(store: PostgresStore, query: str, params: Any = None) -> list[Any]:
    def work(conn: psycopg.Connection[Any]) -> list[Any]:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    return await store._db.run(work, what="test")


async def test_a_deposed_leader_s_trigger_is_fenced(store: PostgresStore) -> None:
    with trio.fail_after(10):
        old = await store.acquire_leadership("cron", "A", 0.2)
        assert old is not None
        await trio.sleep(0.3)
        new = await store.acquire_leadership("cron", "B", 5)
        assert new is not None and new.epoch == old.epoch + 1
        # A wakes up from a pause and fires with its old epoch: nothing happens
        fired = await store.enqueue_trigger("cron", old.epoch, "s", 10.0, _job("s:10a"))
        assert fired is TriggerResult.STALE_EPOCH
        assert await store.get_job("s:10a") is None
        assert await store.schedule_last_fired("cron") == {}
        fired = await store.enqueue_trigger("cron", new.epoch, "s", 10.0, _job("s:10b"))
        assert fired is TriggerResult.ENQUEUED
        assert await store.get_job("s:10b") is not None
        # B resigns: its epoch is fenced too, and the next holder's is higher
        assert await store.resign_leadership("cron", "B", new.epoch)
        fired = await store.enqueue_trigger("cron", new.epoch, "s", 20.0, _job("s:20"))
        assert fired is TriggerResult.STALE_EPOCH
        after = await store.acquire_leadership("cron", "A", 5)
        assert after is not None and after.epoch == new.epoch + 1


async def test_two_stores_racing_one_trigger_enqueue_one_job(url: str) -> None:
    stores = [PostgresStore.from_url(url) for _ in range(4)]
    try:
        with trio.fail_after(20):
            lead = await stores[0].acquire_leadership("cron", "A", 30)
            assert lead is not None
            for fire_at in (100.0, 200.0, 300.0):
                results: list[TriggerResult] = []

                async def fire(
                    s: PostgresStore,
                    n: int,
                    at: float = fire_at,
                    out: list[TriggerResult] = results,
                ) -> None:
                    job = _job(f"s:{at}:{n}")
                    assert lead is not None
                    out.append(await s.enqueue_trigger("cron", lead.epoch, "s", at, job))

                async with trio.open_nursery() as nursery:
                    for n, s in enumerate(stores):
                        nursery.start_soon(fire, s, n)
                assert sorted(results) == sorted(
                    [TriggerResult.ENQUEUED] + [TriggerResult.ALREADY_FIRED] * 3
                ), results
            [stats] = await stores[0].stats(["cron"])
            assert stats.total == 3, "one job per fire time"
            assert (await stores[0].schedule_last_fired("cron")) == {"s": 300.0}
    finally:
        for s in stores:
            await s.aclose()


class _Counting:
    """A connection that counts the statements sent through it."""

    def __init__(self, conn: psycopg.Connection[Any], count: list[int]) -> None:
        self._conn = conn
        self._count = count

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._count[0] += 1
        return self._conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _counting(store: PostgresStore) -> list[int]:
    count = [0]
    run_blocking: Callable[..., Any] = store._db.run_blocking

    def counted(work: Callable[[Any], Any], what: str, transaction: bool = True) -> Any:
        return run_blocking(lambda conn: work(_Counting(conn, count)), what, transaction)

    store._db.run_blocking = counted  # type: ignore[method-assign]
    return count


_FINISHED = """
INSERT INTO jobs (id, queue, kind, payload, run_at, state, max_retries, timeout,
                  created_at, finished_at, retain_until, retained)
SELECT %(prefix)s || n, %(queue)s, 'k', '\\x7b7d', 0, %(state)s, 0, 30,
       n, chronos_now() - 1000 + n * 0.001, %(until)s + n * 0.001, %(retained)s
  FROM generate_series(1, %(n)s) AS n
"""


async def _finished(
    store: PostgresStore,
    prefix: str,
    state: str,
    n: int,
    *,
    queue: str = "q",
    until: float = 0.0,
    retained: bool = False,
) -> None:
    await store.set_paused(queue, False)  # registers it
    params = {
        "prefix": prefix,
        "queue": queue,
        "state": state,
        "n": n,
        "until": until,
        "retained": retained,
    }
    await _sql(store, _FINISHED, params)


async def test_trim_of_many_rows_is_a_bounded_number_of_statements(
    store: PostgresStore,
) -> None:
    now = await store.now()
    await _finished(store, "d", "dead", 3000)
    await _finished(store, "a", "aborted", 500, queue="o")
    await _finished(store, "ok", "succeeded", 2000, until=now + 3600, retained=True)
    await _finished(store, "old", "succeeded", 1000, until=now - 3600, retained=True)
    await _finished(store, "res", "succeeded", 700, until=now - 3600)  # uncounted
    count = _counting(store)
    trimmed = await store.trim(["q", "o"], dead_max_age=None, dead_max_count=100, keep_succeeded=50)
    assert count[0] <= 4, f"{count[0]} statements for one trim"
    # 1000 lapsed retained successes, 2900 + 400 dead and aborted beyond 100
    # per queue, 1950 retained successes beyond 50
    assert trimmed.count == 1000 + 2900 + 400 + 1950
    [q, o] = await store.stats(["q", "o"])
    assert q.counts[JobState.DEAD] == 100 and q.counts[JobState.SUCCEEDED] == 50
    assert o.counts[JobState.ABORTED] == 100
    kept = await store.list_jobs("q", JobState.DEAD, limit=1)
    assert [j.id for j in kept] == ["d2901"], "the newest dead jobs are kept"
    assert await store.get_job("res1") is None


async def test_checker_finds_and_repairs_rows_no_operation_writes(
    store: PostgresStore,
) -> None:
    await store.enqueue_many([_job(n, "q") for n in ("tokenless", "slotted", "outboxed")])
    await _sql(
        store,
        "UPDATE jobs SET state = 'leased', lease_expires_at = chronos_now() + 60"
        " WHERE id = 'tokenless'",
    )
    await _sql(store, "INSERT INTO slots VALUES ('q', 'db', 'slotted'), ('q', 'db', 'gone')")
    await _sql(store, "UPDATE jobs SET continuation = true WHERE id = 'outboxed'")
    report = await store.check()
    found = {(f.job_id, f.problem) for f in report.findings}
    assert found == {
        ("tokenless", Problem.DAMAGED),
        ("slotted", Problem.WRONG_INDEX),
        ("gone", Problem.NO_RECORD),
        ("outboxed", Problem.WRONG_INDEX),
    }, report.findings
    assert not report.ok and report.records == 3
    repaired = await store.check(repair=True)
    assert {f.job_id: f.repair for f in repaired.findings} == {
        "tokenless": Repair.DEAD_LETTERED,
        "slotted": Repair.REINDEXED,
        "gone": Repair.REINDEXED,
        "outboxed": Repair.REINDEXED,
    }, repaired.findings
    assert repaired.ok
    dead = await store.get_job("tokenless")
    assert dead is not None and dead.state is JobState.DEAD
    assert dead.last_error.startswith("damaged record: leased record without a lease token")
    assert (await store.check()).findings == ()
