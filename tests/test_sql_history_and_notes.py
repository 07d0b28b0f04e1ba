"""Attempt history and notes (progress, log lines) end to end on the SQL
stores: a real worker on a SQLite file (and on PostgreSQL when a server
can be started) keeps every attempt of a job that fails twice and then
succeeds, and the progress and log lines its handler reported; notes
columns that do not read read as none."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobRef
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.store import Store
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.store.sqlite import SqliteStore
from tests.test_attempt_history import failed_twice_then_succeeded


async def _run_flaky(store: Store, url: str) -> str:
    app = App(store)

    @app.task("flaky", max_retries=5, retain_succeeded=3600)
    async def flaky(args: bytes, job: JobContext) -> None:
        await job.progress(job.attempt / 3, f"attempt {job.attempt}")
        job.log(f"line of attempt {job.attempt}")
        if job.attempt < 3:
            raise ValueError(f"flaky {job.attempt}")

    policy = chronos_trio.RetryPolicy(base=0.05)
    # notes_interval bounds an outcome's wait for its job's final notes
    # write: long enough for a loaded machine's database
    async with app.open_worker(retry=policy, notes_interval=1.0, poll_interval=0.05) as worker:
        handle = await flaky.enqueue(b"")
        with trio.fail_after(30):
            await handle.result(timeout=20)
            await worker.wait_idle()
        worker_id = worker.statistics().worker_id
    job = await store.get_job(handle.job_id)
    assert job is not None
    got = failed_twice_then_succeeded(job, worker_id)
    assert got[0].error.startswith("ValueError: flaky 1")
    notes = await store.job_notes(JobRef(handle.job_id, "default"))
    assert notes is not None and notes.progress is not None
    assert (notes.progress.fraction, notes.progress.message) == (1.0, "attempt 3")
    assert [(line.attempt, line.text) for line in notes.lines] == [
        (n, f"line of attempt {n}") for n in (1, 2, 3)
    ]
    # a producer outside Trio reads them too, on its own connections
    job_id = handle.job_id

    def read_sync() -> tuple[object, object]:
        with SyncProducer(url) as producer:
            h = producer.job(job_id, queue="default")
            return h.progress(), h.notes()

    progress, sync_notes = await trio.to_thread.run_sync(read_sync)
    assert progress == notes.progress and sync_notes == notes

    def read_asyncio() -> object:
        async def read() -> object:
            async with AsyncioProducer(url) as producer:
                return await producer.job(job_id, queue="default").notes()

        return asyncio.run(read())

    assert await trio.to_thread.run_sync(read_asyncio) == notes
    return job_id


@pytest.mark.sqlite
async def test_a_worker_on_sqlite_keeps_attempts_and_notes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = SqliteStore.from_url(f"sqlite:///{path}")
    try:
        job_id = await _run_flaky(store, f"sqlite:///{path}")
    finally:
        await store.aclose()
    # columns edited by hand into text that does not read: notes read as none
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE jobs SET notes_progress = 'x', notes_lines = 'y' || char(10) || '[1]'"
            " WHERE id = ?",
            (job_id,),
        )
    store = SqliteStore.from_url(f"sqlite:///{path}")
    try:
        notes = await store.job_notes(JobRef(job_id, None))
        assert notes is not None and notes.progress is None and notes.lines == ()
        job = await store.get_job(job_id)
        assert job is not None and job.damage == "", "notes are never damage"
    finally:
        await store.aclose()


@pytest.mark.postgres
async def test_a_worker_on_postgres_keeps_attempts_and_notes(postgres_url: str) -> None:
    store = PostgresStore.from_url(postgres_url)
    try:
        await _run_flaky(store, postgres_url)
    finally:
        await store.aclose()
