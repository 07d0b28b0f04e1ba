"""Producers and transactional enqueue on a SQLite file, with a real Trio
worker running the jobs.

A job written on the caller's own ``sqlite3.Connection`` exists iff the
caller's transaction commits: in a transaction the caller opened, in the
one a legacy-mode connection opens before a write (the enqueue opens it
when it is first), and in one of its own on an autocommit connection. A
producer killed (SIGKILL) before its commit leaves neither its business
row nor its job, and the file's write lock is free again. SyncProducer and
AsyncioProducer (given the URL or the App) enqueue and read results while
the worker runs; refusals store nothing.

The synchronous and asyncio programs run in threads (``trio.to_thread``),
a crashing producer in a process of its own; every wait is bounded by
``trio.fail_after``."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio import App, JobFailed, JobNotFound, StoreError, WorkflowState, chain
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.store.sqlite import SqliteProducerStore, SqliteStore, _enqueue
from tests.transactional_app import Record, make_app

pytestmark = pytest.mark.sqlite

ROOT = Path(__file__).resolve().parent.parent


# -- helpers -------------------------------------------------------------------------
def path_of(url: str) -> str:
    return url.removeprefix("sqlite:///")


async def prepare(url: str) -> None:
    """The store's schema (as a worker's first use makes it), and the
    business table beside it in the same file."""
    store = SqliteStore.from_url(url)
    await store.check()
    await store.aclose()
    with sqlite3.connect(path_of(url)) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.close()


def seen(url: str, order: int) -> tuple[int, int]:
    """(business rows, job rows) of ``order``, read by another connection."""
    payload = f'{{"order":{order}}}'.encode()
    conn = sqlite3.connect(path_of(url))
    try:
        [(orders,)] = conn.execute("SELECT count(*) FROM orders WHERE id = ?", (order,))
        [(jobs,)] = conn.execute("SELECT count(*) FROM jobs WHERE payload = ?", (payload,))
    finally:
        conn.close()
    return int(orders), int(jobs)


def total_jobs(url: str) -> int:
    conn = sqlite3.connect(path_of(url))
    try:
        [(count,)] = conn.execute("SELECT count(*) FROM jobs")
    finally:
        conn.close()
    return int(count)


async def in_thread(fn: Callable[[], Any]) -> Any:
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


async def runs(
    app: App, ran: list[int], expected: set[int], *, never: frozenset[int] | set[int] = frozenset()
) -> None:
    """Run a worker until every order of ``expected`` ran (and then a
    sentinel job committed last, so a job of ``never`` would have run too)."""
    sentinel = 10**6 + len(expected)
    async with app.open_worker(concurrency=4, poll_interval=0.2) as worker:
        await app.tasks["tx.record"].enqueue(Record(sentinel))
        while not (expected | {sentinel}) <= set(ran):
            await trio.sleep(0.02)
        await worker.wait_idle()
    assert not set(ran) & never, ran


# -- the caller's sqlite3 connection, from Trio --------------------------------------
async def test_the_callers_transaction_decides_in_every_mode(sqlite_url: str) -> None:
    url = sqlite_url
    await prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)
    task = app.tasks["tx.record"]
    with trio.fail_after(60):
        # Python's default (legacy) mode, bound to this thread: its insert
        # opened the transaction, the jobs join it
        conn = sqlite3.connect(path_of(url))
        conn.execute("INSERT INTO orders (id) VALUES (1)")
        handle = await task.enqueue(Record(1), connection=conn)
        assert handle.created
        assert seen(url, 1) == (0, 0)  # nothing visible before the commit
        conn.commit()
        assert seen(url, 1) == (1, 1)  # the business row and the job, together
        conn.execute("INSERT INTO orders (id) VALUES (2)")
        assert len(await task.enqueue_many([Record(2), Record(3)], connection=conn)) == 2
        conn.rollback()
        assert seen(url, 2) == (0, 0) and seen(url, 3) == (0, 0)
        # legacy mode, the enqueue first: it opens the transaction, as a write does
        with conn:  # commits at the end
            await task.enqueue(Record(4), connection=conn)
            conn.execute("INSERT INTO orders (id) VALUES (4)")
        assert seen(url, 4) == (1, 1)
        await task.enqueue(Record(5), connection=conn)
        conn.execute("INSERT INTO orders (id) VALUES (5)")
        assert conn.in_transaction
        conn.rollback()
        assert seen(url, 5) == (0, 0)
        conn.close()

        # autocommit, usable from any thread: no transaction, its own; or the caller's
        auto = sqlite3.connect(path_of(url), isolation_level=None, check_same_thread=False)
        await task.enqueue(Record(6), connection=auto)
        assert seen(url, 6) == (0, 1) and not auto.in_transaction  # stored at once
        auto.execute("BEGIN")
        auto.execute("INSERT INTO orders (id) VALUES (7)")
        await task.enqueue(Record(7), connection=auto)
        auto.execute("ROLLBACK")
        assert seen(url, 7) == (0, 0)
        auto.execute("BEGIN IMMEDIATE")
        auto.execute("INSERT INTO orders (id) VALUES (8)")
        await app.enqueue_workflow(
            app.tasks["tx.record"].s(Record(8)), connection=auto
        )  # a workflow too
        assert seen(url, 8) == (0, 0)
        auto.execute("COMMIT")
        assert seen(url, 8) == (1, 1)
        auto.close()
        await runs(app, ran, {1, 4, 6, 8}, never={2, 3, 5, 7})
        assert ran.count(1) == 1
        await app.aclose()


async def test_a_workflow_started_in_the_callers_transaction_has_its_record(
    sqlite_url: str,
) -> None:
    """The record commits with the flow's first jobs (abort and status know
    the flow), and rolls back with them (a savepoint in an open transaction,
    and a transaction of its own on an autocommit connection, alike)."""
    url = sqlite_url
    await prepare(url)
    app = make_app(url)
    record = app.tasks["tx.record"]
    flow = chain(record.s(Record(30)), record.s(Record(31)))
    with trio.fail_after(60):
        conn = sqlite3.connect(path_of(url))
        conn.execute("INSERT INTO orders (id) VALUES (30)")
        await app.enqueue_workflow(flow, workflow_id="tx-gone", connection=conn)
        conn.rollback()
        assert (await app.workflow("tx-gone").status()).state is WorkflowState.NOT_FOUND
        await app.enqueue_workflow(flow, workflow_id="tx-kept", connection=conn)
        assert (await app.workflow("tx-kept").status()).state is WorkflowState.NOT_FOUND
        conn.commit()
        conn.close()
        view = await app.workflow("tx-kept").status()
        assert view.state is WorkflowState.RUNNING
        assert [s.id for s in view.steps()] == ["tx-kept.0", "tx-kept.1"]
        done = await app.workflow("tx-kept").abort(reason="changed my mind")
        assert done.found and done.dropped == ("tx-kept.0",)
        assert done.not_created == ("tx-kept.1",)
        auto = sqlite3.connect(path_of(url), isolation_level=None, check_same_thread=False)
        await app.enqueue_workflow(flow, workflow_id="tx-auto", connection=auto)
        auto.close()
        assert (await app.workflow("tx-auto").status()).state is WorkflowState.RUNNING
        await app.aclose()


async def test_a_failed_enqueue_leaves_the_callers_transaction_as_it_was(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_url
    await prepare(url)
    app = make_app(url)
    original = _enqueue.enqueue

    def half_then_fail(conn: sqlite3.Connection, jobs: Any, now: float) -> Any:
        original(conn, jobs[:1], now)  # one job written, then the statement fails
        raise sqlite3.IntegrityError("planted failure")

    monkeypatch.setattr(_enqueue, "enqueue", half_then_fail)
    with trio.fail_after(30):
        conn = sqlite3.connect(path_of(url), check_same_thread=False)
        conn.execute("INSERT INTO orders (id) VALUES (11)")
        with pytest.raises(StoreError, match=r"planted failure.*your transaction goes on"):
            await app.tasks["tx.record"].enqueue_many([Record(11), Record(12)], connection=conn)
        assert conn.in_transaction
        conn.commit()  # the caller's own row survives; no job of the failed enqueue does
        assert seen(url, 11) == (1, 0) and total_jobs(url) == 0
        # no transaction open: the enqueue's own is rolled back, none left open
        with pytest.raises(StoreError, match=r"planted failure.*nothing was stored"):
            await app.tasks["tx.record"].enqueue(Record(13), connection=conn)
        assert not conn.in_transaction and total_jobs(url) == 0
        conn.close()
    await app.aclose()


async def test_refusals_store_nothing(sqlite_url: str, tmp_path: Path) -> None:
    url = sqlite_url
    await prepare(url)
    app = make_app(url)
    task = app.tasks["tx.record"]
    with trio.fail_after(30):
        with pytest.raises(TypeError, match=r"must be a sqlite3\.Connection"):
            await task.enqueue(Record(1), connection=object())
        closed = sqlite3.connect(path_of(url))
        closed.close()
        with pytest.raises(ValueError, match="closed"):
            await task.enqueue(Record(1), connection=closed)
        other = sqlite3.connect(tmp_path / "other.db")
        with pytest.raises(ValueError, match="not the store's file"):
            await task.enqueue(Record(1), connection=other)
        other.close()
        memory = sqlite3.connect(":memory:")
        with pytest.raises(ValueError, match="a database in memory"):
            await task.enqueue(Record(1), connection=memory)
        memory.close()
        assert total_jobs(url) == 0
        # a file the store never opened, in the caller's transaction: no schema
        fresh = tmp_path / "fresh.db"
        conn = sqlite3.connect(fresh)
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO orders (id) VALUES (1)")
        new_app = make_app(f"sqlite:///{fresh}")
        with pytest.raises(StoreError, match="no chronos_trio schema yet"):
            await new_app.tasks["tx.record"].enqueue(Record(1), connection=conn)
        conn.commit()  # the caller's transaction went on
        # outside a transaction the store makes its schema first
        await new_app.tasks["tx.record"].enqueue(Record(2), connection=conn)
        conn.commit()
        conn.close()
        assert total_jobs(f"sqlite:///{fresh}") == 1
        await new_app.aclose()
    await app.aclose()


# -- producers, in threads, with a Trio worker running the jobs -----------------------
async def test_sync_producer_round_trips_with_a_trio_worker(sqlite_url: str) -> None:
    url = sqlite_url
    await prepare(url)
    app = make_app(url)

    def program() -> list[Any]:
        got: list[Any] = []
        with SyncProducer(url) as producer:
            handle = producer.enqueue("tx.total", Record(3))
            got.append(handle.result(timeout=30))
            many = producer.enqueue_many("tx.total", [Record(4), Record(5)])
            got.append([h.result(timeout=30) for h in many])
            assert producer.job(handle.job_id).status().state.value == "succeeded"
            with pytest.raises(JobNotFound):
                producer.job("nope", queue="default").status()
            # in the caller's transaction, on a connection this thread made
            conn = sqlite3.connect(path_of(url))
            conn.execute("INSERT INTO orders (id) VALUES (6)")
            pending = producer.enqueue("tx.total", Record(6), connection=conn)
            with pytest.raises(JobNotFound):  # the producer's reads: not before the commit
                pending.status()
            conn.commit()
            conn.close()
            got.append(pending.result(timeout=30))
        on_app = SyncProducer(app=app)  # the app's own store (and its registry)
        got.append(on_app.enqueue(app.tasks["tx.total"], Record(7)).result(timeout=30))
        on_app.close()
        return got

    with trio.fail_after(90):
        async with app.open_worker(concurrency=4, poll_interval=0.2):
            assert await in_thread(program) == [300, [400, 500], 600, 700]
    await app.aclose()


async def test_asyncio_producer_round_trips_with_a_trio_worker(sqlite_url: str) -> None:
    url = sqlite_url
    await prepare(url)
    app = make_app(url)

    @app.task("tx.fails", max_retries=0)
    async def fails(args: Record) -> int:
        raise RuntimeError(f"bad order {args.order}")

    async def program() -> list[Any]:
        got: list[Any] = []
        producer = AsyncioProducer(url)
        got.append(await (await producer.enqueue("tx.total", Record(1))).result(timeout=30))
        # a sqlite3 connection bound to the loop's thread: used on it
        conn = sqlite3.connect(path_of(url))
        conn.execute("INSERT INTO orders (id) VALUES (2)")
        handle = await producer.enqueue("tx.total", Record(2), connection=conn)
        conn.commit()
        got.append(await handle.result(timeout=30))
        conn.execute("INSERT INTO orders (id) VALUES (3)")
        await producer.enqueue_many("tx.total", [Record(3)], connection=conn)
        conn.rollback()
        conn.close()
        # one any thread may use: in a thread of asyncio.to_thread
        free = sqlite3.connect(path_of(url), isolation_level=None, check_same_thread=False)
        handle = await producer.enqueue("tx.total", Record(4), connection=free)
        free.close()
        got.append(await handle.result(timeout=30))
        with pytest.raises(JobFailed, match="bad order 5"):
            failing = await producer.enqueue("tx.fails", Record(5), max_retries=0)
            await failing.result(timeout=30)
        await producer.aclose()
        on_app = AsyncioProducer(app=app)
        got.append(await (await on_app.enqueue("tx.total", Record(6))).result(timeout=30))
        await on_app.aclose()
        return got

    with trio.fail_after(90):
        async with app.open_worker(concurrency=4, poll_interval=0.2):
            assert await in_thread(lambda: asyncio.run(program())) == [100, 200, 400, 600]
    assert seen(url, 3) == (0, 0)
    await app.aclose()


# -- a producer killed before its commit ----------------------------------------------
CRASH = textwrap.dedent(
    """
    import sqlite3, sys, time
    from chronos_trio.producers import SyncProducer
    from tests.transactional_app import Record

    url = sys.argv[1]
    producer = SyncProducer(url)
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO orders (id) VALUES (41)")
    producer.enqueue("tx.record", Record(41), connection=conn)
    print("enqueued", flush=True)
    time.sleep(600)  # killed here, before the commit
    """
)


async def test_a_producer_killed_before_its_commit_leaves_no_job(sqlite_url: str) -> None:
    url = sqlite_url
    await prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)
    with trio.fail_after(90):
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in a thread
            [sys.executable, "-c", CRASH, url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = await in_thread(proc.stdout.readline)  # type: ignore[union-attr]
        assert line.strip() == "enqueued", proc.stderr.read()  # type: ignore[union-attr]
        probe = sqlite3.connect(path_of(url), timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")  # the producer holds the write lock
        proc.send_signal(signal.SIGKILL)
        await in_thread(proc.wait)
        probe.execute("BEGIN IMMEDIATE")  # the lock died with it
        probe.execute("ROLLBACK")
        probe.close()
        assert seen(url, 41) == (0, 0) and total_jobs(url) == 0
        await runs(app, ran, set(), never={41})
        store = SqliteStore.from_url(url)
        assert (await store.check()).findings == ()
        await store.aclose()
    await app.aclose()


def test_closing_a_producer_closes_the_store_it_opened_and_not_an_apps(sqlite_url: str) -> None:
    """A producer given a URL opened its store (the Trio-free part):
    ``close`` closes its connections (a later call is a StoreError); a
    producer given an App uses the app's store, which stays open."""
    app = make_app(sqlite_url)
    task = app.tasks["tx.record"]
    own = SyncProducer(sqlite_url)
    own.enqueue(task, Record(1))
    store = own._p.sql
    assert isinstance(store, SqliteProducerStore)
    assert store._files._all  # the connections it opened
    own.close()
    assert not store._files._all
    with pytest.raises(StoreError, match="closed"):
        own.enqueue(task, Record(2))
    borrowed = SyncProducer(app=app)
    borrowed.enqueue(task, Record(3))
    borrowed.close()
    assert isinstance(app.store, SqliteStore)
    assert app.store._db._all  # the app's store is the app's to close
    SyncProducer(app=app).enqueue(task, Record(4))
