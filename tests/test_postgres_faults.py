"""PostgreSQL faults: the server killed with SIGKILL mid-drain and started
again, backends terminated under a worker and a producer, a statement
timeout, the database read-only, the disk full, and a stale settle after
recovery. Each shows that nothing acknowledged is lost, that no job runs
twice at once (fencing holds), and that where a user must act the error
says what to do.

Tests that kill or restart the server, or change its settings, use a
cluster of their own (``own_postgres``); every wait is bounded.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio

from chronos_trio import App, JobContext, JobState, NewJob, RetryPolicy
from chronos_trio.records import StoreError
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.testing.postgres_server import PostgresServer
from chronos_trio.testing.redis_server import in_ci

pytestmark = pytest.mark.postgres

_schemas = itertools.count()


@attrs.frozen
class Item:
    n: int
    sleep: float = 0.0


class Ledger:
    """Every handler run of the ``work`` task: how many ran each job, which
    started while another run of the same job was still going (fencing
    broken), and when each job first started."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.runs: collections.Counter[str] = collections.Counter()
        self.done: collections.Counter[str] = collections.Counter()
        self.overlaps: list[str] = []
        self.first_start: dict[str, float] = {}

    @contextlib.contextmanager
    def run(self, job_id: str) -> Iterator[None]:
        if job_id in self.running:
            self.overlaps.append(job_id)
        self.running.add(job_id)
        self.runs[job_id] += 1
        self.first_start.setdefault(job_id, trio.current_time())
        try:
            yield
        finally:
            self.running.discard(job_id)
        self.done[job_id] += 1


FAST_RETRY = RetryPolicy(base=0.1, factor=2.0, max_delay=1.0)


def make_app(url: str, ledger: Ledger | None = None) -> tuple[App, Any]:
    """An app on ``url`` with the ``work`` task (recorded in ``ledger``)."""
    app = App(url)

    @app.task("work", max_retries=30, retry=FAST_RETRY)
    async def work(item: Item, job: JobContext) -> None:
        assert ledger is not None, "a producer's app runs no handler"
        with ledger.run(job.id):
            if item.sleep:
                await trio.sleep(item.sleep)

    return app, work


async def enqueue_acknowledged(
    app: App, jobs: Sequence[NewJob], errors: list[str] | None = None
) -> set[str]:
    """Send ``jobs`` until the store acknowledges them (the same IDs each
    time, so a try that failed after storing them creates nothing twice);
    the IDs acknowledged. Each StoreError met is added to ``errors``."""
    while True:
        try:
            results = await app.enqueue_jobs(jobs)
        except StoreError as exc:
            if errors is not None:
                errors.append(str(exc))
            await trio.sleep(0.1)
            continue
        return {r.job_id for r in results}


def schema_url(base: str, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": f"f{next(_schemas)}", **options}.items())
    return f"{base}?{query}"


async def admin_sql(url: str, query: str, params: Any = None) -> list[Any]:
    """Run one statement on a connection of its own (autocommit), in a thread."""

    def work() -> list[Any]:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(work)


async def terminate_others(url: str, schema: str | None = None) -> int:
    """pg_terminate_backend of every other backend of the database; how many."""
    rows = await admin_sql(
        url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'",
    )
    return int(rows[0][0])


async def listen_backends(url: str) -> set[int]:
    """PIDs of the backends whose last statement was a LISTEN."""
    rows = await admin_sql(
        url,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN %%'",
    )
    return {int(r[0]) for r in rows}


async def wait_until(predicate: Any, timeout: float, poll: float = 0.02) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(poll)


async def pending(store: Any, queue: str = "default") -> int:
    [stats] = await store.stats([queue])
    return sum(
        stats.counts.get(s, 0)
        for s in (JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT)
    )


# -- kill -9 of the server ---------------------------------------------------------------


async def test_kill_9_of_the_server_mid_drain(own_postgres: PostgresServer) -> None:
    """The server dies (SIGKILL of the postmaster and every backend) while a
    worker drains; enqueues fail with a StoreError while it is down and are
    retried; it comes back on the same data. Every job acknowledged before,
    during and after the outage runs to success, none twice at once, and
    the queue ends empty."""
    url = schema_url(own_postgres.url, statement_timeout=3)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    errors: list[str] = []
    with trio.fail_after(60):
        before = work.new_jobs([Item(i, sleep=0.1) for i in range(300)])
        acknowledged = await enqueue_acknowledged(producer, before)
        async with worker_app.open_worker(
            concurrency=16, lease_duration=3.0, recover_interval=0.5, poll_interval=1.0
        ):
            await wait_until(lambda: sum(ledger.done.values()) >= 40, 20)
            own_postgres.kill()
            at_kill = sum(ledger.done.values())
            down = work.new_jobs([Item(1000 + i) for i in range(20)])
            t0 = trio.current_time()
            with trio.fail_after(15):
                with pytest.raises(StoreError, match="PostgreSQL") as raised:
                    await producer.enqueue_jobs(down)
            print("DOWN ERR", trio.current_time() - t0, raised.value)
            await trio.sleep(1.0)
            await trio.to_thread.run_sync(own_postgres.restart)
            acknowledged |= await enqueue_acknowledged(producer, down, errors)
            after = work.new_jobs([Item(2000 + i) for i in range(50)])
            acknowledged |= await enqueue_acknowledged(producer, after, errors)
            t1 = trio.current_time()
            await wait_until(lambda: acknowledged <= set(ledger.done), 40, poll=0.05)
            print(
                "DRAINED AFTER RESTART", trio.current_time() - t1, errors[:3], len(errors), at_kill
            )
            await wait_until_drained(producer.store, 10)
    assert at_kill < 250, "the outage came mid-drain"
    assert len(acknowledged) == 370
    assert not ledger.overlaps, ledger.overlaps
    assert set(ledger.runs) == acknowledged  # nothing unknown ran
    await worker_app.aclose()
    await producer.aclose()


async def wait_until_drained(store: Any, timeout: float) -> None:
    with trio.fail_after(timeout):
        while await pending(store):
            await trio.sleep(0.1)


# -- pg_terminate_backend ------------------------------------------------------------------


async def pickup(app: App, work: Any, ledger: Ledger, n: int, timeout: float) -> float:
    """Seconds from one job's acknowledged enqueue to its handler's start."""
    [job] = work.new_jobs([Item(n)])
    await enqueue_acknowledged(app, [job])
    enqueued = trio.current_time()
    await wait_until(lambda: job.id in ledger.first_start, timeout, poll=0.002)
    return ledger.first_start[job.id] - enqueued


async def test_terminated_backends_under_a_worker_and_a_producer(
    own_postgres: PostgresServer,
) -> None:
    """pg_terminate_backend of every connection of a draining worker (its
    pool and its LISTEN connection) and of a producer, three times: the
    worker reconnects and finishes every job, none twice at once; the
    producer's enqueues are retried and none is lost. Then, idle, its LISTEN
    connection is terminated again: a job enqueued at once is still picked
    up by the fallback poll, a new LISTEN connection is opened, and
    wake-ups arrive promptly again (well under the 5 s poll)."""
    url = schema_url(own_postgres.url)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    errors: list[str] = []
    terminated = 0
    with trio.fail_after(60):
        acknowledged = await enqueue_acknowledged(
            producer, work.new_jobs([Item(i, sleep=0.05) for i in range(200)])
        )
        async with worker_app.open_worker(concurrency=8, lease_duration=3.0, recover_interval=0.5):
            await wait_until(lambda: sum(ledger.done.values()) >= 20, 20)
            for round_ in range(3):
                terminated += await terminate_others(own_postgres.url)
                batch = work.new_jobs([Item(1000 * (round_ + 1) + i) for i in range(30)])
                acknowledged |= await enqueue_acknowledged(producer, batch, errors)
                await trio.sleep(0.3)
            await wait_until(lambda: acknowledged <= set(ledger.done), 30, poll=0.05)
            await wait_until_drained(producer.store, 10)
            drained = sum(ledger.done.values())
            assert ledger.overlaps == []
            # idle now; the LISTEN connection is up again (or comes up at
            # the next wait): wake-ups are prompt
            await wait_until_async(lambda: listen_backends(own_postgres.url), 10)
            listening = await listen_backends(own_postgres.url)
            prompt_before = [await pickup(producer, work, ledger, 9000 + i, 5) for i in range(3)]
            # the LISTEN connection (and every other) terminated while idle
            terminated += await terminate_others(own_postgres.url)
            after_kill = await pickup(producer, work, ledger, 9100, 10)
            await wait_until_async(lambda: _new_listener(own_postgres.url, listening), 15)
            prompt_after = [await pickup(producer, work, ledger, 9200 + i, 5) for i in range(3)]
    print(
        f"\nterminated {terminated} backends; enqueue errors {len(errors)};"
        f" pickup before {fmt(prompt_before)}, right after the kill {after_kill:.3f}s,"
        f" with the new LISTEN connection {fmt(prompt_after)}"
    )
    assert terminated >= 6  # the worker's pool + LISTEN and the producer's, each time
    assert drained >= len(acknowledged)
    assert set(ledger.runs) >= acknowledged
    assert not ledger.overlaps, ledger.overlaps
    assert max(prompt_before) < 1.0 and max(prompt_after) < 1.0
    assert after_kill < 8.0  # the fallback poll (5 s) while the connection is gone
    await worker_app.aclose()
    await producer.aclose()


def fmt(seconds: Sequence[float]) -> str:
    return "/".join(f"{s * 1000:.0f}" for s in seconds) + " ms"


async def _new_listener(url: str, old: set[int]) -> bool:
    now = await listen_backends(url)
    return bool(now - old)


async def wait_until_async(predicate: Any, timeout: float, poll: float = 0.05) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(poll)


# -- statement timeout --------------------------------------------------------------------


class RowLock:
    """A transaction of the test's own holding ``FOR UPDATE`` on one job row
    (what a long report query or a stuck session does to the store)."""

    def __init__(self, url: str, schema: str, job_id: str) -> None:
        self._url = url
        self._query = f'SELECT id FROM "{schema}".jobs WHERE id = %s FOR UPDATE'
        self._job_id = job_id
        self._conn: psycopg.Connection[Any] | None = None

    async def __aenter__(self) -> RowLock:
        def take() -> psycopg.Connection[Any]:
            conn = psycopg.connect(self._url, connect_timeout=5)
            rows = conn.execute(self._query, (self._job_id,)).fetchall()
            assert rows == [(self._job_id,)], rows
            return conn

        self._conn = await trio.to_thread.run_sync(take)
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await trio.to_thread.run_sync(conn.close)  # rolls back: the lock is gone


async def test_a_statement_timeout_is_a_store_error_and_changes_nothing(
    own_postgres: PostgresServer,
) -> None:
    """A job row locked by another transaction for longer than the store's
    ``statement_timeout`` (1 s here): the settle and the renew of its lease
    fail with a StoreError that names the timeout, after about the timeout,
    and change nothing (the lease still held, its token the same). Once the
    lock is gone the same settle is applied, and a repeat of it is refused
    (fenced)."""
    url = schema_url(own_postgres.url, statement_timeout=1)
    store = PostgresStore.from_url(url)
    with trio.fail_after(20):
        await store.enqueue_many([NewJob(id="x", queue="q", kind="k", payload=b"{}")])
        [leased] = (await store.lease([QueueWeight("q")], 1, worker_id="a", lease_duration=10)).jobs
        done = Settlement(leased.ref, SettleKind.SUCCEEDED)
        async with RowLock(own_postgres.url, store.schema, "x"):
            for call in (store.settle([done]), store.renew([leased.ref], 10)):
                started = trio.current_time()
                with pytest.raises(StoreError, match="statement_timeout") as raised:
                    await call
                assert "canceling statement due to statement timeout" in str(raised.value)
                assert 0.9 < trio.current_time() - started < 5
            held = await store.get_job("x")
            assert held is not None and held.state is JobState.LEASED
            assert held.lease_owner == "a" and held.lease_token == leased.token
        assert (await store.settle([done])).settled == (True,)
        assert (await store.settle([done])).settled == (False,)  # applied once
        assert await store.get_job("x") is None  # succeeded, nothing keeps it
    await store.aclose()


async def test_a_worker_rides_out_statement_timeouts(
    own_postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker (statement_timeout=1) whose job row stays locked by another
    transaction for 3 s while its handler finishes: its settle times out,
    is logged naming the timeout and retried, and is applied once the lock
    is gone; the job ran once. Jobs enqueued meanwhile run too (their
    settles may wait behind the blocked one: the completer retries one
    batch at a time) and each succeeds once; nothing is lost."""
    caplog.set_level(logging.WARNING, logger="chronos_trio")
    url = schema_url(own_postgres.url, statement_timeout=1)
    ledger = Ledger()
    worker_app, work = make_app(url, ledger)
    release = trio.Event()
    blocked_started = trio.Event()

    @worker_app.task("blocked", max_retries=5, retry=FAST_RETRY)
    async def blocked(item: Item, job: JobContext) -> None:
        with ledger.run(job.id):
            blocked_started.set()
            await release.wait()

    schema = PostgresStore.from_url(url).schema
    with trio.fail_after(30):
        handle = await blocked.enqueue(Item(0))
        async with worker_app.open_worker(
            concurrency=8, lease_duration=10.0, recover_interval=0.5
        ) as worker:
            await blocked_started.wait()
            async with RowLock(own_postgres.url, schema, handle.job_id):
                release.set()  # the handler ends; its settle waits for the row
                others = await enqueue_acknowledged(
                    worker_app, work.new_jobs([Item(i) for i in range(50)])
                )
                await wait_until(lambda: others <= set(ledger.done), 10)
                await trio.sleep(3.0)
                # not settled while the row is locked: still leased to this worker
                held = await worker_app.store.get_job(handle.job_id)
                assert held is not None and held.state is JobState.LEASED
                assert held.lease_owner == worker.id
                assert worker.statistics().succeeded < 51
            await wait_until(lambda: worker.statistics().succeeded == 51, 10)
            await wait_until_drained(worker_app.store, 10)
    timeouts = [r for r in caplog.records if "statement_timeout" in r.getMessage()]
    assert timeouts, [r.getMessage() for r in caplog.records]
    assert "completer failed; retrying" in timeouts[0].getMessage()
    assert ledger.runs[handle.job_id] == 1 and ledger.done[handle.job_id] == 1
    assert not ledger.overlaps
    await worker_app.aclose()
