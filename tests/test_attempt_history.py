"""Attempt history (issue 28, item 3) beyond the store conformance checks
(``testing/_conformance_history.py``): a worker keeps every attempt with its
worker and start, the CLI and the dashboard show them, a stored history
that does not read is skipped (never damage), a record written before the
field reads with none, and a SQLite file of schema version 1 is migrated."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import redis
import trio

import chronos_trio
from chronos_trio import App, Job, JobState, MemoryStore
from chronos_trio.cli._output import job_details, job_json
from chronos_trio.dashboard import dashboard_app
from chronos_trio.records._attempts import (
    ERROR_BYTES,
    HISTORY_LIMIT,
    Attempt,
    AttemptOutcome,
    append_history,
    decode_history,
    encode_attempt,
)
from chronos_trio.records._history import attempt_history
from chronos_trio.store import QueueWeight, ScheduleEdit, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.store.sqlite._connections import SCHEMA_VERSION
from tests._backends import Backend
from tests._support import Recorder, Work

Out = AttemptOutcome


def failed_twice_then_succeeded(job: Job, worker_id: str) -> tuple[Attempt, ...]:
    """The attempts of ``job``, which failed twice on worker ``worker_id``
    and then succeeded: two RETRIED, with their worker and start, then the
    SUCCEEDED one its record describes."""
    assert job.state is JobState.SUCCEEDED, job
    got = attempt_history(job)
    assert [(a.number, a.outcome) for a in got] == [
        (1, Out.RETRIED),
        (2, Out.RETRIED),
        (3, Out.SUCCEEDED),
    ], got
    for failed in got[:2]:
        assert failed.worker == worker_id, failed
        assert failed.started is not None and failed.ended is not None, failed
        assert failed.started <= failed.ended, failed
    return got


async def test_a_worker_keeps_every_attempt(backend: Backend, clock: object) -> None:
    """Fail twice, then succeed: three attempts, the failures with their
    worker, start (the completer sends the lease's) and error, the success
    derived from the record; shown by the CLI's job view, text and JSON."""
    rec = Recorder(backend.store(), max_retries=5, retain_succeeded=3600)
    retry = backend.pick(memory={}, redis={"retry": chronos_trio.RetryPolicy(base=0.1)})
    async with rec.app.open_worker(**retry, **backend.timing(poll_interval=0.5)) as worker:
        res = await rec.work.enqueue(Work(1, fail_times=2))
        with trio.fail_after(60):
            await worker.wait_idle()
        worker_id = worker.statistics().worker_id
    job = await rec.store.get_job(res.job_id)
    assert job is not None
    first, second, last = failed_twice_then_succeeded(job, worker_id)
    assert first.error.startswith("ValueError: planned failure 1\n"), first
    assert second.error.startswith("ValueError: planned failure 2\n"), second
    assert first.ended is not None and second.started is not None
    assert first.ended <= second.started, "the retry started after the first attempt ended"
    assert last.ended == job.finished_at and last.error == ""

    now = await rec.store.now()
    text = job_details(job, now)
    lines = text[text.index("\nhistory") + 1 :].splitlines()
    assert len(lines) == 3, text
    assert lines[0].startswith("history") and "#1  retried" in lines[0], lines
    assert worker_id in lines[0] and "planned failure 1" in lines[0] and "took " in lines[0]
    assert "#3  succeeded" in lines[2], lines
    data = json.loads(json.dumps(job_json(job)))
    assert [a["outcome"] for a in data["attempts_history"]] == ["retried", "retried", "succeeded"]
    assert data["attempts_history"][0]["worker"] == worker_id
    assert data["attempts_history"][0]["started"].endswith("Z")


async def test_a_job_without_attempts_shows_none(autojump_clock: object) -> None:
    store = MemoryStore()
    app = App(store)

    @app.task("t")
    async def t(args: bytes, job: chronos_trio.JobContext) -> None: ...

    res = await t.enqueue(b"x")
    job = await store.get_job(res.job_id)
    assert job is not None and attempt_history(job) == ()
    assert job_details(job, await store.now()).splitlines()[-1].split() == ["history", "-"]
    assert "history" in job_details(job, await store.now())
    assert job_json(job)["attempts_history"] == []


async def test_the_dashboard_job_page_lists_the_attempts(autojump_clock: object) -> None:
    store = MemoryStore()
    app = App(store)

    @app.task("t")
    async def t(args: bytes, job: chronos_trio.JobContext) -> None: ...

    res = await t.enqueue(b"x")
    [leased] = (
        await store.lease([QueueWeight("default")], 1, worker_id="host:1:0", lease_duration=60.0)
    ).jobs
    retry = Settlement(
        leased.ref, SettleKind.RETRY, "ValueError: <b>no</b>", 3600.0, started=leased.leased_at
    )
    assert (await store.settle([retry])).settled == (True,)
    transport = httpx.ASGITransport(app=dashboard_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
        page = (await web.get("/job", params={"id": res.job_id})).text
    table = page[page.index('<table id="attempts">') :]
    assert 'class="attempt-retried"' in table and "host:1:0" in table
    assert "ValueError: &lt;b&gt;no&lt;/b&gt;" in table, "escaped"
    assert f"The last {HISTORY_LIMIT} attempts" in table


def test_an_error_is_kept_cut_at_a_character() -> None:
    long = "é" * ERROR_BYTES  # two bytes each
    [kept] = decode_history(append_history(None, Attempt(1, Out.DEAD, error=long)))
    assert kept.error == "é" * (ERROR_BYTES // 2)
    odd = "x" + long
    [kept] = decode_history(append_history(None, Attempt(1, Out.DEAD, error=odd)))
    assert kept.error == "x" + "é" * (ERROR_BYTES // 2 - 1), "no half character"


def test_a_stored_history_that_does_not_read_is_skipped_line_by_line() -> None:
    good = Attempt(2, Out.DEAD, "w", 1.5, 2.5, "boom\nline two")
    stored = "\n".join(
        [
            "not json",
            '[1, "no-such-outcome", "w", "", "1", ""]',
            '[-1, "retried", "w", "", "1", ""]',
            '["1", "retried", "w", "", "1", ""]',
            '[1, "retried"]',
            encode_attempt(good),
            '[3, "expired", 7, "nan", "x", null]',
        ]
    )
    assert decode_history(stored) == (good, Attempt(3, Out.EXPIRED))
    assert decode_history(stored.encode() + b"\n\xff\xfe") == (good, Attempt(3, Out.EXPIRED))
    assert decode_history(None) == decode_history("") == decode_history(b"") == ()
    # the bound: the oldest go first
    text = None
    for n in range(HISTORY_LIMIT + 5):
        text = append_history(text, Attempt(n, Out.RELEASED))
    assert [a.number for a in decode_history(text)] == list(range(5, HISTORY_LIMIT + 5))


@pytest.mark.redis
async def test_redis_reads_records_without_or_with_a_damaged_history(redis_url: str) -> None:
    """A job hash written before the field (no ``ah``) reads with no
    history; one whose ``ah`` is garbage reads, is no damage, and the next
    failed attempt is added after the lines that read."""
    store = RedisStore.from_url(redis_url)
    try:
        await store.enqueue_many(
            [chronos_trio.NewJob(id=i, queue="q", kind="k", payload=b"p") for i in ("a", "b")]
        )
        found = await store.get_job("a")
        assert found is not None and found.history == () and found.damage == ""
        client = redis.Redis.from_url(redis_url)
        key = KeySpace(store.namespace).partition("q", 1, 0).job("b")
        client.hset(key, "ah", b'\xff garbage\n[1, "retried", "w0", "", "5", "old"]')
        damaged = await store.get_job("b")
        assert damaged is not None and damaged.damage == ""
        assert damaged.history == (Attempt(1, Out.RETRIED, "w0", None, 5.0, "old"),)
        leased = {
            lj.job.id: lj
            for lj in (
                await store.lease([QueueWeight("q")], 10, worker_id="w1", lease_duration=60.0)
            ).jobs
        }
        dead = Settlement(leased["b"].ref, SettleKind.DEAD, "now", started=leased["b"].leased_at)
        assert (await store.settle([dead])).settled == (True,)
        after = await store.get_job("b")
        assert after is not None and after.state is JobState.DEAD
        assert [(a.outcome, a.worker, a.error) for a in after.history] == [
            (Out.RETRIED, "w0", "old"),
            (Out.DEAD, "w1", "now"),
        ]
        assert after.history[-1].started == leased["b"].leased_at
        report = await store.check(repair=False)
        assert report.ok, report.findings
        client.close()
    finally:
        await store.aclose()


@pytest.mark.sqlite
async def test_a_sqlite_file_of_schema_1_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    store = SqliteStore.from_url(url)
    await store.enqueue_many([chronos_trio.NewJob(id="old", queue="q", kind="k", payload=b"p")])
    await store.aclose()
    # the file as version 1 left it: none of the columns versions 2 and 3
    # added, nor the tables of versions 4 to 7
    with sqlite3.connect(path) as conn:
        for column in ("attempt_history", "notes_progress", "notes_lines", "notes_dropped"):
            conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        conn.execute("DROP TABLE schedules")
        conn.execute("DROP TABLE schedule_versions")
        conn.execute("DROP TABLE workflows")
        conn.execute("DROP TABLE aggregates")  # version 6's
        conn.execute("DROP TABLE flow_kept")  # version 7's
        conn.execute("PRAGMA user_version = 1")
    store = SqliteStore.from_url(url)
    try:
        old = await store.get_job("old")
        assert old is not None and old.history == () and old.damage == ""
        [leased] = (
            await store.lease([QueueWeight("q")], 1, worker_id="w1", lease_duration=60.0)
        ).jobs
        retry = Settlement(leased.ref, SettleKind.RETRY, "boom", 60.0, started=leased.leased_at)
        assert (await store.settle([retry])).settled == (True,)
        got = await store.get_job("old")
        assert got is not None
        assert [(a.outcome, a.worker, a.error) for a in got.history] == [
            (Out.RETRIED, "w1", "boom")
        ]
        # version 4's stored schedules work on the migrated file
        assert await store.edit_schedule("a:leader", ScheduleEdit.ADD, "s", "{}") == 1
        # version 5's workflow records work on the migrated file
        assert await store.save_workflow("w", "{}", "k", 60.0) is True
        assert await store.cancelled(["w"]) == set()
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
