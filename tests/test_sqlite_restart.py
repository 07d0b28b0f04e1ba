"""An embedded app restarted on the same SQLite file (issue 26, "Done
when"): an ``App("sqlite:///...")`` with a Trio worker leaves scheduled
jobs, a job waiting for its retry and a kept result; it stops (worker and
app closed) and a fresh App opens the file: everything is where it was
left, the retry and the scheduled job run at their times, the result reads.
Every wait is bounded.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from chronos_trio import App, JobContext, JobState, RetryPolicy
from tests._sqlite_procs import check_cli, integrity, sqlite_file_url, wait_until

pytestmark = pytest.mark.sqlite

#: Seconds from the failure to the retry, and from the enqueue to the
#: scheduled job: both come due after the restart.
RETRY_DELAY = 3.0
SOON = 3.0
#: A run may start this late after its due time (the worker's wake-up and a
#: busy machine), never earlier (float rounding aside).
LATE = 1.0
EARLY = 0.01

Log = list[tuple[str, str, int, float]]


def make_app(url: str, log: Log) -> App:
    """A fresh App on ``url``: ``later`` records its runs; ``flaky`` fails its
    first attempt and is retried RETRY_DELAY s later (its result kept); ``answer`` keeps its
    result an hour."""
    app = App(url)
    retry = RetryPolicy(base=RETRY_DELAY, factor=1.0, max_delay=RETRY_DELAY)

    @app.task("restart.later", max_retries=0)
    async def later(n: int, job: JobContext) -> None:
        log.append(("later", job.id, job.attempt, time.time()))

    @app.task("restart.flaky", max_retries=3, retry=retry)
    async def flaky(n: int, job: JobContext) -> int:
        log.append(("flaky", job.id, job.attempt, time.time()))
        if job.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return n + 100

    @app.task("restart.answer", result_ttl=3600)
    async def answer(n: int) -> int:
        return n * 2

    return app


async def test_a_restarted_embedded_app_finds_its_jobs_retries_and_results(
    tmp_path: Path,
) -> None:
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    first_log: Log = []
    first = make_app(url, first_log)
    with trio.fail_after(30):
        async with first.open_worker(concurrency=4, poll_interval=0.5):
            answer = await first.tasks["restart.answer"].enqueue(21)
            assert await answer.result(timeout=10) == 42
            flaky = await first.tasks["restart.flaky"].enqueue(1)
            with trio.fail_after(10):
                while True:
                    job = await first.store.get_job(flaky.job_id)
                    if job is not None and job.state is JobState.RETRY_WAIT:
                        break
                    await trio.sleep(0.02)
            later = first.tasks["restart.later"]
            soon = await later.enqueue(1, delay=SOON)
            far = await later.enqueue(2, delay=3600)
        ids = [answer.job_id, flaky.job_id, soon.job_id, far.job_id]
        before = {i: await first.store.get_job(i) for i in ids}
        await first.aclose()
    stopped = time.time()
    assert [(k, a) for k, _, a, _ in first_log] == [("flaky", 1)]

    # -- a fresh app on the same file ------------------------------------------------------
    log: Log = []
    second = make_app(url, log)
    with trio.fail_after(30):
        after = {i: await second.store.get_job(i) for i in ids}
        assert await second.job(answer.job_id).result(timeout=1) == 42
        waiting = after[flaky.job_id]
        assert waiting is not None and waiting.state is JobState.RETRY_WAIT
        assert waiting.attempts == 1 and "the first attempt fails" in waiting.last_error
        for job_id in (soon.job_id, far.job_id):
            job = after[job_id]
            assert job is not None and job.state is JobState.SCHEDULED
        assert after == before, "every record as it was left"
        retry_at = waiting.run_at
        soon_at = soon.run_at
        assert time.time() < min(retry_at, soon_at), "the restart came before they were due"
        async with second.open_worker(concurrency=4, poll_interval=0.5):
            await wait_until(lambda: len(log) >= 2, RETRY_DELAY + SOON + 10, poll=0.01)
            retried_result = await second.job(flaky.job_id).result(timeout=10)  # settled
            done = await second.job(flaky.job_id).status()
            result_again = await second.job(answer.job_id).result(timeout=1)
        left = await second.store.get_job(far.job_id)
        await second.aclose()
    ran = {(kind, job_id): (attempt, at) for kind, job_id, attempt, at in log}
    retried_attempt, retried = ran[("flaky", flaky.job_id)]
    soon_attempt, soon_ran = ran[("later", soon.job_id)]
    print(
        f"\nstopped {retry_at - stopped:.2f}s before the retry was due; after the restart the "
        f"retry ran {retried - retry_at:+.3f}s from its due time, the scheduled job "
        f"{soon_ran - soon_at:+.3f}s from its"
    )
    assert len(log) == 2
    assert retried_attempt == 2 and retry_at - EARLY <= retried <= retry_at + LATE
    assert soon_attempt == 1 and soon_at - EARLY <= soon_ran <= soon_at + LATE
    assert done.state is JobState.SUCCEEDED and done.attempts == 2
    assert retried_result == 101
    assert result_again == 42
    assert left == before[far.job_id], "the far one still waits, unchanged"
    assert integrity(db) == "ok"
    code, report, text = await check_cli(url)
    assert code == 0 and not report.get("findings"), text
