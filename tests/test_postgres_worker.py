"""The PostgreSQL store's worker path where the conformance suite cannot
see: how many notifications a transaction sends, claims racing from two
stores, poll-only waits, and the enqueue plan on a caller's own connection.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import psycopg
import pytest
import trio
from psycopg import sql

from chronos_trio.records._jobs import NewJob
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.store.postgres._enqueue import enqueue_params, enqueue_query, enqueue_results

pytestmark = pytest.mark.postgres

_schemas = itertools.count()


def _job(job_id: str, queue: str = "q", **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b"{}", **kw)


def _store(url: str, schema: str, **options: str) -> PostgresStore:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return PostgresStore.from_url(f"{url}?{query}")


def _notifications(conn: psycopg.Connection[Any], seconds: float) -> list[str]:
    """The payloads ``conn`` (listening) receives within ``seconds``."""
    got = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for n in conn.notifies(timeout=left, stop_after=1):
            got.append(n.payload)
    return got


async def test_one_notification_per_queue_per_transaction(postgres_url: str) -> None:
    schema = f"w{next(_schemas)}"
    store = _store(postgres_url, schema)
    try:
        await store.enqueue_many([_job("warm")])  # the schema exists
        listener = await trio.to_thread.run_sync(
            lambda: psycopg.connect(postgres_url, autocommit=True)
        )
        try:
            channel = listener.execute(
                sql.SQL("SELECT {}.chronos_channel()").format(sql.Identifier(schema))
            ).fetchone()
            assert channel is not None
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel[0])))
            with trio.fail_after(30):
                # 60 jobs of two queues in one call: one notification per queue
                await store.enqueue_many(
                    [_job(f"a{i}", "qa") for i in range(30)]
                    + [_job(f"b{i}", "qb") for i in range(30)]
                )
                got = await trio.to_thread.run_sync(_notifications, listener, 0.5)
                assert sorted(got) == ["rqa", "rqb"], got
                # a settle releasing 30 jobs of one queue: one notification
                leased = await store.lease(
                    [QueueWeight("qa")], 30, worker_id="w", lease_duration=30
                )
                assert len(leased.jobs) == 30
                await store.settle([Settlement(j.ref, SettleKind.RELEASE) for j in leased.jobs])
                got = await trio.to_thread.run_sync(_notifications, listener, 0.5)
                assert got == ["rqa"], got
                # a lease sends none
                await store.lease([QueueWeight("qb")], 30, worker_id="w", lease_duration=30)
                assert await trio.to_thread.run_sync(_notifications, listener, 0.3) == []
        finally:
            await trio.to_thread.run_sync(listener.close)
    finally:
        await store.aclose()


async def test_two_stores_racing_never_lease_one_job_twice(postgres_url: str) -> None:
    schema = f"w{next(_schemas)}"
    stores = [_store(postgres_url, schema) for _ in range(2)]
    total = 600
    try:
        await stores[0].enqueue_many([_job(f"j{i:04d}") for i in range(total)])
        taken: list[list[str]] = [[], []]

        async def drain(n: int) -> None:
            while True:
                got = await stores[n].lease(
                    [QueueWeight("q")], 7, worker_id=f"w{n}", lease_duration=60
                )
                if not got.jobs:
                    return
                taken[n].extend(j.job.id for j in got.jobs)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for n in range(2):
                    for _ in range(3):  # three claims in flight per store
                        nursery.start_soon(drain, n)
        both = taken[0] + taken[1]
        assert len(both) == total and len(set(both)) == total
        assert taken[0] and taken[1], "both stores took part"
    finally:
        for store in stores:
            await store.aclose()


async def test_poll_only_wakes_within_the_poll_interval(postgres_url: str) -> None:
    schema = f"w{next(_schemas)}"
    waiting = _store(postgres_url, schema, poll_only="true", poll_interval="0.2")
    producer = _store(postgres_url, schema)
    try:
        await producer.enqueue_many([_job("warm")])
        await producer.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=60)
        assert waiting._listener() is None, "poll-only mode never listens"
        woke: list[float] = []

        async def wait() -> None:
            await waiting.wait_ready(["q"], timeout=30)
            woke.append(trio.current_time())

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(0.05)
                sent = trio.current_time()
                await producer.enqueue_many([_job("one")])
        assert woke and woke[0] - sent < 0.2 + 0.5, woke[0] - sent
    finally:
        await waiting.aclose()
        await producer.aclose()


async def test_wait_ready_returns_by_the_next_due_time(postgres_url: str) -> None:
    """No promoter: an idle waiter returns when a scheduled job falls due,
    though nothing notifies then."""
    store = _store(postgres_url, f"w{next(_schemas)}")
    try:
        await store.enqueue_many([_job("later", delay=0.4)])
        with trio.fail_after(10):
            started = trio.current_time()
            await store.wait_ready(["q"], timeout=30)
            assert 0.3 < trio.current_time() - started < 2.0
        got = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=60)
        assert [j.job.id for j in got.jobs] == ["later"]
    finally:
        await store.aclose()


def test_enqueue_plan_on_a_caller_s_connection(postgres_url: str) -> None:
    """The plan transactional enqueue runs: visible after commit, gone on
    rollback, on a connection whose search_path is not the store's."""

    async def make_schema() -> str:
        schema = f"w{next(_schemas)}"
        store = _store(postgres_url, schema)
        await store.enqueue_many([_job("warm")])
        await store.aclose()
        return schema

    schema = trio.run(make_schema)
    with psycopg.connect(postgres_url) as conn:
        jobs = [_job("t1"), _job("t2", delay=60)]
        with conn.transaction():
            rows = conn.execute(enqueue_query(schema), enqueue_params(jobs)).fetchall()
            results = enqueue_results(rows, jobs)
        assert [(r.job_id, r.created) for r in results] == [("t1", True), ("t2", True)]
        try:
            with conn.transaction():
                conn.execute(enqueue_query(schema), enqueue_params([_job("gone")]))
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        found = conn.execute(
            sql.SQL("SELECT id, state FROM {}.jobs ORDER BY id").format(sql.Identifier(schema))
        ).fetchall()
    assert found == [("t1", "ready"), ("t2", "scheduled"), ("warm", "ready")]


async def test_a_claim_whose_caller_was_cancelled_gives_its_jobs_back(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease cancelled while its claim runs in the thread (a worker
    stopping): the claim still commits there, for nobody; the thread then
    releases those jobs, so they are ready at once with their attempt given
    back, not leased until their 60 s leases expire (CI at load 9 found a
    second worker waiting for them)."""
    from chronos_trio.store.postgres._claim import Claimer

    claim = Claimer.claim
    claimed = threading.Event()

    def slow_claim(self: Claimer, *args: Any) -> Any:
        time.sleep(0.3)  # the caller is cancelled meanwhile
        try:
            return claim(self, *args)
        finally:
            claimed.set()

    store = _store(postgres_url, f"w{next(_schemas)}")
    try:
        await store.enqueue_many([_job("a"), _job("b")])
        monkeypatch.setattr(Claimer, "claim", slow_claim)
        with trio.move_on_after(0.05) as scope:
            await store.lease([QueueWeight("q")], 5, worker_id="gone", lease_duration=60)
        assert scope.cancelled_caught
        monkeypatch.setattr(Claimer, "claim", claim)
        got: dict[str, int] = {}
        with trio.fail_after(10):
            assert await trio.to_thread.run_sync(claimed.wait, 10)
            while len(got) < 2:  # the claim commits, then its thread releases
                leased = await store.lease([QueueWeight("q")], 5, worker_id="w", lease_duration=60)
                got |= {j.job.id: j.job.attempts for j in leased.jobs}
                await trio.sleep(0.05)
        assert got == {"a": 1, "b": 1}, "released with the attempt given back"
    finally:
        await store.aclose()


def test_a_handoff_goes_to_exactly_one_side() -> None:
    """The thread's result reaches the caller or is undone, never both and
    never neither, in either order of the two."""
    from chronos_trio.store.postgres._database import _Handoff

    first: _Handoff[str] = _Handoff()
    assert first.deliver("leases")  # the thread first: the caller takes it
    assert not first.abandon()
    assert first.taken() == "leases"
    second: _Handoff[str] = _Handoff()
    assert second.abandon()  # the caller gave up first: the thread undoes
    assert not second.deliver("leases")
