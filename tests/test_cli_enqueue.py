"""``python -m chronos_trio enqueue KIND PAYLOAD`` as a subprocess against
a private Redis (and a SQLite file), with a worker running in the test:
``--wait`` prints the job's result (exit 0) or its error (exit 12);
``--app`` structures the payload to the task's type before anything is
enqueued (exit 2 naming the field); without ``--app`` the JSON goes as it
is and the worker judges it; ``--delay`` and ``--run-at`` schedule it;
``--timeout`` gives up (exit 13). Usage errors that need no store run
in-process."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio import App, JobState, Worker
from chronos_trio.cli import (
    EXIT_BAD_URL,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    _enqueue_command,
    main,
)
from chronos_trio.testing import run_until_idle
from tests.tests_app import make_app

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.tests_app:app"


async def enqueue(url: str, *args: str, stdin: bytes = b"") -> tuple[int, list[str], str]:
    """Run the command; its exit code, stdout lines and stderr."""
    argv = [sys.executable, "-m", "chronos_trio", "enqueue", *args]
    env = {**os.environ, "CHRONOS_URL": url}
    with trio.fail_after(120):  # a loaded machine: python starts slowly
        done = await trio.run_process(
            argv,
            cwd=ROOT,
            env=env,
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, done.stdout.decode().splitlines(), done.stderr.decode()


async def counts(app: App) -> dict[JobState, int]:
    return dict((await app.inspector().queue("default")).counts)


@pytest.fixture
async def app(redis_url: str) -> AsyncIterator[App]:
    """The test app on the private Redis (a producer, and a worker's app)."""
    app = make_app(redis_url)
    try:
        yield app
    finally:
        await app.aclose()


@pytest.fixture
async def working(app: App) -> AsyncIterator[Worker]:
    """A worker of the test app running for the test."""
    async with app.open_worker(poll_interval=0.2, queues="default,critical") as worker:
        yield worker


@pytest.mark.redis
async def test_wait_prints_the_result_with_and_without_the_app(
    redis_url: str, working: Worker
) -> None:
    code, out, err = await enqueue(
        redis_url, "tests.add", '{"a": 2, "b": 3}', "--app", APP, "--wait"
    )
    assert code == EXIT_OK, err
    job_id, result = out
    assert json.loads(result) == {"sum": 5}
    # no app: the JSON goes as it is; the worker structures it
    code, out, err = await enqueue(redis_url, "tests.add", '{"a": 4, "b": 5}', "--wait")
    assert code == EXIT_OK, err
    assert json.loads(out[1]) == {"sum": 9} and out[0] != job_id
    # a task that keeps no result prints null
    code, out, err = await enqueue(
        redis_url, "tests.note", "-", "--app", APP, "--wait", stdin=b'{"text": "hi"}'
    )
    assert (code, out[1:]) == (EXIT_OK, ["null"]), err
    # --json: one object
    code, out, err = await enqueue(
        redis_url, "tests.add", '{"a": 1, "b": 1}', "--app", APP, "--wait", "--json"
    )
    assert code == EXIT_OK, err
    [line] = out
    fields = json.loads(line)
    assert fields.pop("run_at") > 0 and len(fields.pop("job_id")) == 32
    assert fields == {
        "kind": "tests.add",
        "queue": "default",
        "created": True,
        "result": {"sum": 2},
    }


@pytest.mark.redis
def test_wait_reads_a_job_that_ended_before_the_wait_began(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The race CI met: a worker finishes a task that keeps no result after
    the command enqueued it and before its wait begins (forced here: the
    wait starts once a worker ran until idle). ``--wait`` enqueues it
    marked as waited on, so it still prints null, not "no job" (exit 6)."""
    real_wait = _enqueue_command._wait

    async def run_it() -> None:
        app = make_app(redis_url)
        try:
            await run_until_idle(app, queues="default,critical", poll_interval=0.2)
        finally:
            await app.aclose()

    def ended_first(handle: Any, timeout: float | None) -> bytes | None:
        trio.run(run_it)  # (on main before the fix: exit 6, "no job ... in queue")
        return real_wait(handle, timeout)

    monkeypatch.setattr(_enqueue_command, "_wait", ended_first)
    monkeypatch.setenv("CHRONOS_URL", redis_url)
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"text": "hi"}'))
    code = main(["enqueue", "tests.note", "-", "--app", APP, "--wait"])
    out = capsys.readouterr().out.splitlines()
    assert (code, out[1:]) == (EXIT_OK, ["null"])


async def test_wait_prints_the_result_on_sqlite(tmp_path: Path) -> None:
    """The same command on a SQLite store (the producer's SQL path; the
    waiter polls): a worker in this process, the command in another."""
    await _wait_prints_the_result_on_sql(f"sqlite:///{tmp_path / 'jobs.db'}")


@pytest.mark.postgres
async def test_wait_prints_the_result_on_postgres(postgres_url: str) -> None:
    """And on PostgreSQL (the producer's own connections)."""
    await _wait_prints_the_result_on_sql(postgres_url)


async def _wait_prints_the_result_on_sql(url: str) -> None:
    app = make_app(url)
    try:
        async with app.open_worker(poll_interval=0.2):
            code, out, err = await enqueue(
                url, "tests.add", '{"a": 2, "b": 5}', "--app", APP, "--wait"
            )
            assert code == EXIT_OK, err
            assert json.loads(out[1]) == {"sum": 7}
            code, out, err = await enqueue(url, "tests.add", '{"a": -2, "b": 5}', "--wait")
            assert code == EXIT_JOB_FAILED and "SkipRetry: negative a: -2" in err
    finally:
        await app.aclose()


@pytest.mark.redis
async def test_a_job_that_fails_exits_12_with_its_error(redis_url: str, working: Worker) -> None:
    code, out, err = await enqueue(
        redis_url, "tests.add", '{"a": -1, "b": 3}', "--app", APP, "--wait"
    )
    assert code == EXIT_JOB_FAILED
    assert f"job {out[0]} failed after 1 attempt(s): SkipRetry: negative a: -1" in err
    assert len(out) == 1  # the id, no result
    # without the app a payload that does not structure reaches the
    # worker, which dead-letters it with the reason
    code, out, err = await enqueue(redis_url, "tests.add", '{"a": 1}', "--wait")
    assert code == EXIT_JOB_FAILED
    assert "payload does not structure as Add" in err and "'b'" in err
    # under --json the error is a JSON object on stdout too
    code, out, err = await enqueue(redis_url, "tests.add", '{"a": -3, "b": 1}', "--wait", "--json")
    assert code == EXIT_JOB_FAILED
    error = json.loads(out[-1])["error"]
    assert (error["exit_code"], error["reason"]) == (EXIT_JOB_FAILED, "job_failed")
    assert "negative a: -3" in error["message"]


@pytest.mark.redis
@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("tests.add", '{"a": "x", "b": 1}', "payload does not structure as Add"),
        ("tests.add", '{"a": 1}', "'b'"),
        ("tests.add", "{not json", "payload is not valid JSON"),
        ("tests.nope", "{}", "the app has no task 'tests.nope' (its tasks: tests.add,"),
    ],
)
async def test_a_payload_the_task_refuses_enqueues_nothing(
    redis_url: str, app: App, kind: str, payload: str, message: str
) -> None:
    code, out, err = await enqueue(redis_url, kind, payload, "--app", APP)
    assert code == EXIT_USAGE and out == []
    assert message in err, err
    assert "Traceback" not in err
    assert sum((await counts(app)).values()) == 0


@pytest.mark.redis
async def test_delay_and_run_at_schedule_the_job(redis_url: str, app: App) -> None:
    inspector = app.inspector()
    before = await app.store.now()
    code, out, err = await enqueue(
        redis_url, "tests.add", '{"a": 1, "b": 1}', "--app", APP, "--delay", "30"
    )
    assert code == EXIT_OK, err
    job = await inspector.job(out[0])
    assert job is not None and job.state is JobState.SCHEDULED
    assert before + 30 <= job.run_at <= before + 35
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    code, out, err = await enqueue(
        redis_url, "tests.add", '{"a": 1, "b": 1}', "--run-at", at.isoformat(), "--queue", "q2"
    )
    assert code == EXIT_OK, err
    job = await inspector.job(out[0])
    assert job is not None and job.state is JobState.SCHEDULED and job.queue == "q2"
    assert job.run_at == pytest.approx(at.timestamp(), abs=0.01)
    # nothing runs it: --timeout gives up waiting, the job goes on
    code, out, err = await enqueue(
        redis_url,
        "tests.add",
        '{"a": 1, "b": 1}',
        "--delay",
        "60",
        "--wait",
        "--timeout",
        "0.5",
    )
    assert code == EXIT_TIMEOUT and "did not finish within 0.5s" in err
    assert (await counts(app))[JobState.SCHEDULED] == 2


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["k", "{}", "--url", "memory://"], EXIT_BAD_URL, "memory"),
        (["k", "{}"], EXIT_USAGE, "no store given: pass --app or --url"),
        (
            ["k", "{}", "--url", "redis://x", "--timeout", "3"],
            EXIT_USAGE,
            "--timeout is for --wait",
        ),
        (["k", "{}", "--delay", "-1"], EXIT_USAGE, "argument --delay: expected seconds >= 0"),
        (["k", "{}", "--run-at", "2026-12-03T10:00:00"], EXIT_USAGE, "with a timezone"),
        (
            ["k", "{}", "--delay", "1", "--run-at", "2026-12-03T10:00:00Z"],
            EXIT_USAGE,
            "not allowed",
        ),
    ],
)
def test_usage_errors(
    args: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    assert main(["enqueue", *args]) == code
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
