"""Transactional enqueue on a private PostgreSQL: a job written on the
caller's own connection exists iff the caller's transaction commits.

For each kind of connection (psycopg sync and async, SQLAlchemy sync and
async, Django), from Trio code, SyncProducer and AsyncioProducer: the
business row and the job commit together (a worker runs the job), a
rollback leaves neither, and a producer killed (SIGKILL) between the
enqueue and the commit leaves no job. Refusals store nothing.

asyncio and the synchronous producers run in threads (``trio.to_thread``),
Django in producer processes (its settings are per process); every wait is
bounded by ``trio.fail_after``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from chronos_trio import App, JobNotFound, StoreError, WorkflowState, chain
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.store import AbortResult, MissingCapability
from tests.transactional_app import Record, make_app

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parent.parent


# -- helpers -------------------------------------------------------------------------
def prepare(url: str) -> None:
    """The business table, and the store's schema (as a worker's first use makes it)."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
    subprocess.run(
        [sys.executable, "-m", "chronos_trio", "migrate", url],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )


def seen(url: str, order: int) -> tuple[int, int]:
    """(business rows, job rows) of ``order``, read by another connection."""
    payload = f'{{"order":{order}}}'.encode()
    with psycopg.connect(url) as conn:
        orders = conn.execute("SELECT count(*) FROM orders WHERE id = %s", (order,)).fetchone()
        jobs = conn.execute(
            "SELECT count(*) FROM chronos.jobs WHERE payload = %s", (payload,)
        ).fetchone()
    assert orders is not None and jobs is not None
    return int(orders[0]), int(jobs[0])


def total_jobs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM chronos.jobs").fetchone()
    assert row is not None
    return int(row[0])


def workflow_records(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM chronos.workflows").fetchone()
    assert row is not None
    return int(row[0])


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


# -- psycopg, from Trio --------------------------------------------------------------
async def test_psycopg_commit_runs_the_job_and_rollback_leaves_nothing(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)
    task = app.tasks["tx.record"]
    with trio.fail_after(60):
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO orders (id) VALUES (1)")
            handle = await task.enqueue(Record(1), connection=conn)
            assert handle.created
            assert seen(url, 1) == (0, 0)  # nothing visible before the commit
            conn.commit()
            assert seen(url, 1) == (1, 1)  # the business row and the job, together

            conn.execute("INSERT INTO orders (id) VALUES (2)")
            many = await task.enqueue_many([Record(2), Record(3)], connection=conn)
            assert len(many) == 2
            conn.rollback()
            assert seen(url, 2) == (0, 0) and seen(url, 3) == (0, 0)
        await runs(app, ran, {1}, never={2, 3})
        assert ran.count(1) == 1
        await app.aclose()


def marks(url: str) -> list[str]:
    """The IDs of the jobs stored marked as waited on (keep_outcome)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT job_id FROM chronos.result_waiters WHERE waiter = 'keep_outcome'"
            " ORDER BY job_id"
        ).fetchall()
    return [row[0] for row in rows]


async def test_keep_outcome_is_marked_in_the_callers_transaction(postgres_url: str) -> None:
    """A job enqueued with keep_outcome on the caller's connection is marked
    iff the transaction commits (the mark is part of the one enqueue
    statement); its no-result outcome is then read after it ended, and the
    mark is forgotten with its finish."""
    prepare(postgres_url)
    ran: list[int] = []
    app = make_app(postgres_url, ran)
    task = app.tasks["tx.record"]
    with trio.fail_after(60), psycopg.connect(postgres_url) as conn:
        kept = await task.enqueue(Record(7), connection=conn, keep_outcome=True)
        plain = await task.enqueue(Record(8), connection=conn)
        conn.commit()
        await task.enqueue(Record(9), connection=conn, keep_outcome=True)
        conn.rollback()
        assert marks(postgres_url) == [kept.job_id]
        await runs(app, ran, {7, 8})
        assert await kept.result(timeout=5) is None
        with pytest.raises(JobNotFound):
            await plain.result(timeout=0)
        assert marks(postgres_url) == []
        # an abort while it waits, a delete and a purge forget the mark too
        later = [await task.enqueue(Record(n), delay=60, keep_outcome=True) for n in (10, 11, 12)]
        assert marks(postgres_url) == sorted(h.job_id for h in later)
        assert await later[0].abort() is AbortResult.ABORTED
        assert await app.store.delete_job(later[1].job_id)
        assert marks(postgres_url) == [later[2].job_id]
        await app.store.purge_queue("default", limit=10)
        assert marks(postgres_url) == []
    await app.aclose()


async def test_a_workflow_starts_in_the_callers_transaction(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    app = make_app(url)
    record = app.tasks["tx.record"]
    with trio.fail_after(60):
        with psycopg.connect(url) as conn:
            await app.enqueue_workflow(
                chain(record.s(Record(7)), record.s(Record(8))), connection=conn
            )
            conn.rollback()
            assert total_jobs(url) == 0 and workflow_records(url) == 0  # the record too
            total = app.tasks["tx.total"]
            flow = await app.enqueue_workflow(
                chain(record.s(Record(7)), total.s(Record(9))), connection=conn
            )
            assert total_jobs(url) == 0 and workflow_records(url) == 0  # not before the commit
            conn.commit()
        assert seen(url, 7) == (0, 1)
        # its record committed with its jobs: the flow can be viewed and cancelled
        view = await app.workflow(flow.id).status()
        assert view.state is WorkflowState.RUNNING
        assert [s.id for s in view.steps()] == [f"{flow.id}.0", f"{flow.id}.1"]
        with psycopg.connect(url) as conn:
            doomed = await app.enqueue_workflow(
                chain(record.s(Record(10)), record.s(Record(11))),
                workflow_id="tx-doomed",
                connection=conn,
            )
            conn.commit()
        done = await app.workflow(doomed.id).abort(reason="changed my mind")
        assert done.found and done.dropped == ("tx-doomed.0",)
        assert done.not_created == ("tx-doomed.1",)
        async with app.open_worker(concurrency=2, poll_interval=0.2):
            assert await flow.result(timeout=30) == 900
        await app.aclose()


# -- SQLAlchemy, from Trio and from SyncProducer -------------------------------------
async def test_sqlalchemy_session_and_connection(postgres_url: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session, scoped_session, sessionmaker

    url = postgres_url
    prepare(url)
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    ran: list[int] = []
    app = make_app(url, ran)
    task = app.tasks["tx.record"]
    insert = sqlalchemy.text("INSERT INTO orders (id) VALUES (:id)")
    with trio.fail_after(60):
        with Session(engine) as session:  # from Trio
            session.execute(insert, {"id": 11})
            await task.enqueue(Record(11), connection=session)
            assert seen(url, 11) == (0, 0)
            session.commit()
        with engine.connect() as connection:
            connection.execute(insert, {"id": 12})
            await task.enqueue(Record(12), connection=connection)
            connection.rollback()

        def from_threads() -> None:
            producer = SyncProducer(app=app)  # the app's store (on PostgreSQL)
            scoped = scoped_session(sessionmaker(engine))  # Flask-SQLAlchemy's db.session
            scoped.execute(insert, {"id": 13})
            producer.enqueue("tx.record", Record(13), connection=scoped)
            scoped.commit()
            with engine.begin() as connection:
                connection.execute(insert, {"id": 14})
                producer.enqueue_many("tx.record", [Record(14)], connection=connection)
            with Session(engine) as session:
                session.execute(insert, {"id": 15})
                producer.enqueue("tx.record", Record(15), connection=session)
                session.rollback()
            scoped.remove()

        await in_thread(from_threads)
        assert [seen(url, n) for n in (11, 12, 13, 14, 15)] == [
            (1, 1),
            (0, 0),
            (1, 1),
            (1, 1),
            (0, 0),
        ]
        await runs(app, ran, {11, 13, 14}, never={12, 15})
        await app.aclose()
    engine.dispose()


# -- asyncio: psycopg AsyncConnection and SQLAlchemy AsyncSession ---------------------
async def test_asyncio_producer_on_async_connections(postgres_url: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    url = postgres_url
    prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)

    async def program() -> None:
        producer = AsyncioProducer(url)
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await conn.execute("INSERT INTO orders (id) VALUES (21)")
            await producer.enqueue("tx.record", Record(21), connection=conn)
            assert seen(url, 21) == (0, 0)
            await conn.commit()
            await conn.execute("INSERT INTO orders (id) VALUES (22)")
            await producer.enqueue("tx.record", Record(22), connection=conn)
            await conn.rollback()
        engine = create_async_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        insert = sqlalchemy.text("INSERT INTO orders (id) VALUES (:id)")
        async with AsyncSession(engine) as session:
            await session.execute(insert, {"id": 23})
            await producer.enqueue("tx.record", Record(23), connection=session)
            await session.commit()
        async with engine.connect() as connection:
            await connection.execute(insert, {"id": 24})
            await producer.enqueue_many("tx.record", [Record(24)], connection=connection)
            await connection.rollback()
        # a synchronous connection from asyncio: used in a thread
        with psycopg.connect(url) as sync_conn:
            sync_conn.execute("INSERT INTO orders (id) VALUES (25)")
            await producer.enqueue("tx.record", Record(25), connection=sync_conn)
        # no connection: the producer's own, committed at once
        await producer.enqueue("tx.record", Record(26))
        await producer.aclose()
        await engine.dispose()

    with trio.fail_after(60):
        await in_thread(lambda: asyncio.run(program()))
        assert [seen(url, n)[1] for n in (21, 22, 23, 24, 25, 26)] == [1, 0, 1, 0, 1, 1]
        assert seen(url, 22) == (0, 0) and seen(url, 24) == (0, 0)
        await runs(app, ran, {21, 23, 25, 26}, never={22, 24})
        await app.aclose()


# -- Django and a crash, in producer processes ----------------------------------------
def child(mode: str, url: str, order: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests._transactional_child", mode, url, str(order)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def finished(proc: subprocess.Popen[str]) -> str:
    out, err = await in_thread(lambda: proc.communicate(timeout=60))
    assert proc.returncode == 0 and "done" in out, err
    return str(out)


async def test_django_connection_inside_atomic(postgres_url: str) -> None:
    pytest.importorskip("django")
    url = postgres_url
    prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)
    with trio.fail_after(90):
        await finished(child("django-commit", url, 31))
        await finished(child("django-rollback", url, 32))
        await finished(child("django-trio", url, 33))
        assert [seen(url, n) for n in (31, 32, 33)] == [(1, 1), (0, 0), (1, 1)]
        await runs(app, ran, {31, 33}, never={32})
        await app.aclose()


async def test_a_producer_killed_before_its_commit_leaves_no_job(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    ran: list[int] = []
    app = make_app(url, ran)
    with trio.fail_after(90):
        proc = child("crash", url, 41)
        line = await in_thread(proc.stdout.readline)  # type: ignore[union-attr]
        assert line.strip() == "enqueued", proc.stderr.read()  # type: ignore[union-attr]
        with psycopg.connect(url) as conn:  # the insert is in, uncommitted
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'jobs' AND l.mode = 'RowExclusiveLock'"
            ).fetchone()
            assert row is not None and row[0] >= 1
        proc.send_signal(signal.SIGKILL)
        await in_thread(proc.wait)
        # the server ends the dead producer's session, rolling its transaction back
        while True:
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
                ).fetchone()
            if row is not None and row[0] == 0:
                break
            await trio.sleep(0.05)
        assert seen(url, 41) == (0, 0)
        assert total_jobs(url) == 0
        await runs(app, ran, set(), never={41})
        await app.aclose()


# -- refusals: each stores nothing ----------------------------------------------------
async def test_refusals_store_nothing(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    app = make_app(url)
    task = app.tasks["tx.record"]
    with trio.fail_after(60):
        with psycopg.connect(url) as conn:
            memory = App()

            @memory.task("tx.record")
            async def record(args: Record) -> None: ...

            with pytest.raises(MissingCapability, match="MemoryStore"):
                await record.enqueue(Record(1), connection=conn)
            with pytest.raises(MissingCapability, match="RedisStore"):
                await in_thread(
                    lambda: SyncProducer("redis://127.0.0.1:1/0").enqueue(
                        "tx.record", Record(1), connection=conn
                    )
                )
            with pytest.raises(TypeError, match="connection must be"):
                await task.enqueue(Record(1), connection=object())
            async_conn = await in_thread(
                lambda: asyncio.run(psycopg.AsyncConnection.connect(url))  # type: ignore[arg-type]
            )
            with pytest.raises(TypeError, match="asyncio connection"):
                await task.enqueue(Record(1), connection=async_conn)
            await in_thread(lambda: asyncio.run(async_conn.close()))
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1/0")
            with pytest.raises(ValueError, match="roll it back"):
                await task.enqueue(Record(1), connection=conn)
            conn.rollback()
        closed = psycopg.connect(url)
        closed.close()
        with pytest.raises(ValueError, match="closed"):
            await task.enqueue(Record(1), connection=closed)
        assert total_jobs(url) == 0
        await app.aclose()


async def test_a_schema_not_current_is_refused_with_migrate_off(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    app = make_app(f"{url}?schema=elsewhere&migrate=off")
    with trio.fail_after(60):
        with psycopg.connect(url) as conn:
            with pytest.raises(StoreError, match=r"no chronos_trio schema 'elsewhere'.*migrate"):
                await app.tasks["tx.record"].enqueue(Record(51), connection=conn)
            # only reads ran: the caller's transaction goes on
            conn.execute("INSERT INTO orders (id) VALUES (51)")
            conn.commit()
        assert seen(url, 51) == (1, 0)
        # migrate=auto: the store migrates its schema (on its own connection) first
        auto = make_app(f"{url}?schema=elsewhere")
        with psycopg.connect(url) as conn:
            await auto.tasks["tx.record"].enqueue(Record(52), connection=conn)
            conn.commit()
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM elsewhere.jobs").fetchone()
        assert row is not None and row[0] == 1
        await app.aclose()
        await auto.aclose()


# -- a producer's handles read outcomes on PostgreSQL ---------------------------------
async def test_producer_handles_read_results_on_postgresql(postgres_url: str) -> None:
    url = postgres_url
    prepare(url)
    app = make_app(url)
    producer = SyncProducer(app=app)
    with trio.fail_after(60):
        with psycopg.connect(url) as conn:
            handle = await in_thread(
                lambda: producer.enqueue("tx.total", Record(61), connection=conn)
            )
            # the producer reads on its own connection: not before the commit
            with pytest.raises(JobNotFound):
                await in_thread(handle.status)
            conn.rollback()
        with pytest.raises(JobNotFound):  # nor after a rollback
            await in_thread(handle.status)

        async def asyncio_side(job_id: str) -> Any:
            aproducer = AsyncioProducer(url)
            try:
                return await aproducer.job(job_id).result(timeout=30)
            finally:
                await aproducer.aclose()

        with psycopg.connect(url) as conn:
            handle = await in_thread(
                lambda: producer.enqueue("tx.total", Record(62), connection=conn)
            )
            conn.commit()
        assert (await in_thread(handle.status)).state.value == "ready"
        async with app.open_worker(concurrency=2, poll_interval=0.2):
            assert await in_thread(lambda: handle.result(timeout=30)) == 6200
            assert await in_thread(lambda: asyncio.run(asyncio_side(handle.job_id))) == 6200
        producer.close()
        await app.aclose()
