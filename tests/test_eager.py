"""Eager mode (``chronos_trio.testing.eager``): every enqueue of the app
runs its job at once in the caller, on a private MemoryStore, with the
retry semantics docs/testing.md states; and the app is itself again after."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from chronos_trio import (
    App,
    Job,
    JobContext,
    JobFailed,
    JobNotFound,
    JobState,
    MemoryStore,
    PayloadError,
    SkipRetry,
    UnknownTask,
    chain,
    group,
)
from chronos_trio.store import SettleKind
from chronos_trio.testing import eager

RETRY, SUCCEEDED, DEAD = SettleKind.RETRY, SettleKind.SUCCEEDED, SettleKind.DEAD


def _app() -> App:
    return App(MemoryStore())


async def test_enqueue_runs_the_job_before_it_returns_and_keeps_its_result() -> None:
    app = _app()
    ran: list[tuple[str, float]] = []

    @app.task("add")
    async def add(pair: tuple[int, int], job: JobContext) -> int:
        ran.append((job.id, trio.current_time()))
        return pair[0] + pair[1]

    with eager(app) as mode:
        start = trio.current_time()
        handle = await add.enqueue((2, 3), delay=3600)  # the delay is ignored
        assert [job_id for job_id, _ in ran] == [handle.job_id]
        assert ran[0][1] - start < 60
        assert await handle.result(timeout=0) == 5
        status = await handle.status()
        assert (status.state, status.attempts) == (JobState.SUCCEEDED, 1)
        assert [(r.job_id, r.attempt, r.outcome) for r in mode.runs] == [
            (handle.job_id, 1, SUCCEEDED)
        ]


async def test_every_enqueue_path_of_the_app_runs_eagerly() -> None:
    app = _app()
    threads: list[int] = []

    @app.task("double")
    def double(n: int) -> int:  # a plain handler: in a thread, as in a worker
        threads.append(threading.get_ident())
        return n * 2

    with eager(app) as mode:
        many = await double.enqueue_many([1, 2, 3])
        by_kind = await app.enqueue("double", 10)
        assert [await h.result(timeout=0) for h in [*many, by_kind]] == [2, 4, 6, 20]
        assert len(mode.runs) == 4
    assert threading.get_ident() not in threads


async def test_a_failed_attempt_is_retried_at_once_up_to_max_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = _app()
    attempts: list[int] = []

    @app.task("flaky", max_retries=2)
    async def flaky(n: int, job: JobContext) -> str:
        attempts.append(job.attempt)
        if job.attempt < 3:
            raise ConnectionError(f"down on attempt {job.attempt}")
        return "ok"

    with eager(app) as mode:
        start = trio.current_time()
        handle = await flaky.enqueue(1)
        assert trio.current_time() == start  # no backoff slept
        assert attempts == [1, 2, 3]
        assert await handle.result(timeout=0) == "ok"
        assert [(r.attempt, r.outcome) for r in mode.runs] == [
            (1, RETRY),
            (2, RETRY),
            (3, SUCCEEDED),
        ]
        assert mode.runs[0].error == "ConnectionError: down on attempt 1"


async def test_a_dead_job_raises_its_last_error_out_of_enqueue() -> None:
    app = _app()

    @app.task("always", max_retries=1)
    async def always(n: int, job: JobContext) -> None:
        raise ValueError(f"bad {job.attempt}")

    with eager(app) as mode:
        with pytest.raises(ValueError, match="bad 2"):
            await always.enqueue(1, job_id="j")
        outcome = await app.job("j").status()
        assert outcome.state is JobState.DEAD
        assert outcome.last_error == "retries exhausted after 2 attempt(s): ValueError: bad 2"
        assert [r.outcome for r in mode.runs] == [RETRY, DEAD]


async def test_without_propagate_the_failure_is_kept_for_the_handle() -> None:
    app = _app()

    @app.task("always", max_retries=0)
    async def always(n: int) -> None:
        raise ValueError("nope")

    with eager(app, propagate=False):
        handle = await always.enqueue(1)
        with pytest.raises(JobFailed, match="ValueError: nope") as failed:
            await handle.result(timeout=0)
        assert failed.value.attempts == 1


async def test_skip_retry_never_retry_and_bad_results_end_the_job_at_once() -> None:
    app = _app()

    @app.task("skip", max_retries=5)
    async def skip(n: int) -> None:
        raise SkipRetry("card declined")

    @app.task("never", max_retries=5, never_retry=(KeyError,))
    async def never(n: int) -> None:
        raise KeyError("gone")

    @app.task("badresult", max_retries=5)
    async def badresult(n: int) -> int:
        return "text"  # type: ignore[return-value]

    with eager(app) as mode:
        with pytest.raises(SkipRetry):
            await skip.enqueue(1)
        with pytest.raises(KeyError):
            await never.enqueue(1)
        with pytest.raises(PayloadError, match="result"):
            await badresult.enqueue(1)
        assert [(r.kind, r.attempt, r.outcome) for r in mode.runs] == [
            ("skip", 1, DEAD),
            ("never", 1, DEAD),
            ("badresult", 1, DEAD),
        ]


async def test_a_job_a_handler_enqueues_runs_before_the_handler_goes_on() -> None:
    app = _app()
    order: list[str] = []

    @app.task("child")
    async def child(n: int) -> None:
        order.append(f"child {n}")

    @app.task("parent")
    async def parent(n: int, job: JobContext) -> None:
        order.append("parent starts")
        await job.app.enqueue("child", n)
        order.append("parent ends")

    with eager(app):
        await parent.enqueue(7)
    assert order == ["parent starts", "child 7", "parent ends"]


async def test_a_job_id_or_unique_key_already_taken_is_not_run_again() -> None:
    app = _app()
    runs: list[int] = []

    @app.task("once")
    async def once(n: int) -> None:
        runs.append(n)

    with eager(app):
        first = await once.enqueue(1, job_id="same")
        again = await once.enqueue(2, job_id="same")
        # a transactional enqueue runs as if its transaction committed
        await once.enqueue(3, connection=object())
    assert (first.created, again.created, runs) == (True, False, [1, 3])


async def test_an_unknown_kind_is_refused_before_anything_is_stored() -> None:
    app = _app()

    with eager(app) as mode:
        with pytest.raises(UnknownTask, match="'elsewhere'"):
            await app.enqueue("elsewhere", 1)
        assert sum(s.total for s in await mode.store.stats()) == 0
        assert mode.runs == []


async def test_a_workflow_runs_step_by_step_inside_its_enqueue() -> None:
    app = _app()
    order: list[str] = []

    @app.task("fetch")
    async def fetch(order_id: int) -> int:
        order.append(f"fetch {order_id}")
        return order_id * 100

    @app.task("half")
    async def half(cents: int) -> int:
        order.append(f"half {cents}")
        return cents // 2

    @app.task("total", queue="sums")
    async def total(parts: list[int]) -> int:
        order.append(f"total {sorted(parts)}")
        return sum(parts)

    with eager(app) as mode:
        flow = await app.enqueue_workflow(
            chain(fetch.s(7), group(half.s(), half.s()), total.s()), workflow_id="w"
        )
        assert order == ["fetch 7", "half 700", "half 700", "total [350, 350]"]
        assert await flow.result(timeout=1) == 700  # already finished
        assert [r.kind for r in mode.runs] == ["fetch", "half", "half", "total"]
        # its record was saved as on a real store (what cancel and the views read)
        record = await mode.store.workflow_record("w")
        assert record is not None and record.first_kind == "fetch"


async def test_after_the_block_the_app_is_itself_again() -> None:
    store = MemoryStore()
    app = App(store)

    @app.task("work")
    async def work(n: int) -> None: ...

    with eager(app) as mode:
        assert app.store is mode.store
        await work.enqueue(1)
        with pytest.raises(RuntimeError, match="already eager"):
            with eager(app):
                pass
    assert app.store is store
    assert "enqueue_jobs" not in vars(app)
    handle = await work.enqueue(2)  # stored, not run: no worker runs
    assert (await handle.status()).state is JobState.READY
    assert len(mode.runs) == 1

    unopened = App("redis://127.0.0.1:1/0")
    with eager(unopened):
        pass
    assert unopened.store_url == "redis://127.0.0.1:1/0"
    assert unopened._store is None  # still unopened: nothing connected


async def test_the_dead_letter_hooks_see_the_dead_job_before_enqueue_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app()
    seen: list[tuple[str, JobState, str]] = []

    @app.on_dead_letter
    async def record(job: Job) -> None:
        seen.append((job.id, job.state, job.last_error.splitlines()[0]))

    @app.on_dead_letter
    async def broken(job: Job) -> None:
        raise RuntimeError("hook bug")

    @app.task("doomed", max_retries=0)
    async def doomed(n: int) -> None:
        raise SkipRetry("no")

    with eager(app):
        with pytest.raises(SkipRetry):
            await doomed.enqueue(1, job_id="d")
    assert seen == [("d", JobState.DEAD, "SkipRetry: no")]
    assert "dead-letter hook" in caplog.text and "hook bug" in caplog.text


def test_eager_refuses_what_is_not_an_app_or_a_bool() -> None:
    with pytest.raises(TypeError, match="eager takes an App"):
        with eager("myproject.jobs:app"):  # type: ignore[arg-type]
            pass
    app = _app()
    with pytest.raises(TypeError, match="propagate must be a bool"):
        with eager(app, propagate="no"):  # type: ignore[arg-type]
            pass
    assert "enqueue_jobs" not in vars(app)


async def test_a_discard_dead_task_s_failure_is_deleted_and_still_reported() -> None:
    app = _app()
    seen: list[tuple[str, JobState, str]] = []

    @app.on_dead_letter
    async def record(job: Job) -> None:
        seen.append((job.id, job.state, job.last_error))

    @app.task("drop", max_retries=0, discard_dead=True)
    async def drop(n: int) -> None:
        raise ValueError("bad row")

    with eager(app, propagate=False) as mode:
        handle = await drop.enqueue(1, job_id="x")
        with pytest.raises(JobNotFound):
            await handle.status()
        assert [r.outcome for r in mode.runs] == [SettleKind.DISCARD]
    assert seen == [
        ("x", JobState.DEAD, "retries exhausted after 1 attempt(s): ValueError: bad row")
    ]


async def test_only_the_eager_app_is_eager() -> None:
    eager_app, other = _app(), _app()
    ran: list[str] = []

    for app in (eager_app, other):

        @app.task("note")
        async def note(text: str) -> None:
            ran.append(text)

    with eager(eager_app):
        await eager_app.tasks["note"].enqueue("eager")
        waiting = await other.tasks["note"].enqueue("stored")
        assert ran == ["eager"]
        assert (await waiting.status()).state is JobState.READY
