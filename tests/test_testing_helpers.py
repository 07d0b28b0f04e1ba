"""``chronos_trio.testing.run_inline`` and the fake job context: a handler
called directly in a test, its payload through the real codec, its context
controllable, its result checked as a worker stores it."""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from chronos_trio import App, JobCancelled, JobContext, MemoryStore, PayloadError
from chronos_trio.testing import (
    FakeJobContext,
    RecordedCall,
    job_context,
    run_inline,
    run_until_idle,
)


@attrs.frozen
class Resize:
    path: str
    sizes: list[int]


def _app(**options: Any) -> App:
    return App(MemoryStore(), **options)


async def test_an_async_handler_gets_its_payload_through_the_codec_and_returns() -> None:
    app = _app()
    seen: list[Resize] = []

    @app.task("img.resize")
    async def resize(args: Resize, job: JobContext) -> int:
        seen.append(args)
        await trio.lowlevel.checkpoint()
        return sum(args.sizes)

    given = Resize("a.png", (10, 20))  # type: ignore[arg-type]  # cattrs makes it a list
    assert await run_inline(resize, given) == 30
    # decoded from the encoded bytes, as a worker decodes it: a new object
    assert seen == [Resize("a.png", [10, 20])]
    assert seen[0] is not given


async def test_a_plain_handler_runs_in_a_worker_thread() -> None:
    app = _app()
    threads: list[int] = []

    @app.task("sync.double")
    def double(n: int, job: JobContext) -> int:
        threads.append(threading.get_ident())
        return n * 2

    assert await run_inline(double, 21) == 42
    assert threads and threads[0] != threading.get_ident()


async def test_every_handler_shape_is_called_as_a_worker_calls_it() -> None:
    app = _app()

    @app.task("shape.payload")
    async def payload_only(n: int) -> int:
        return n + 1

    @app.task("shape.context_first")
    async def context_first(job: JobContext, n: int) -> str:
        return f"{job.kind}:{n}"

    assert await run_inline(payload_only, 1) == 2
    assert await run_inline(context_first, 5) == "shape.context_first:5"


async def test_a_payload_that_would_not_enqueue_fails_before_the_handler_runs() -> None:
    app = _app(max_payload_bytes=64)
    ran: list[object] = []

    @app.task("img.resize")
    async def resize(args: Resize) -> None:
        ran.append(args)

    with pytest.raises(PayloadError, match="expected a Resize payload, got str"):
        await run_inline(resize, "a.png")  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="64"):
        await run_inline(resize, Resize("x" * 100, []))
    with pytest.raises(TypeError, match="delya"):
        await run_inline(resize, Resize("a", []), delya=3)  # type: ignore[call-arg]
    assert ran == []


async def test_a_result_that_a_worker_could_not_store_fails() -> None:
    app = _app()

    @app.task("bad.result")
    async def bad(n: int) -> int:
        return "not a number"  # type: ignore[return-value]

    @app.task("no.result")
    async def untyped(n: int) -> None:
        return "kept nowhere, so never encoded"  # type: ignore[return-value]

    with pytest.raises(PayloadError, match="expected a int result, got str"):
        await run_inline(bad, 1)
    assert await run_inline(untyped, 1) == "kept nowhere, so never encoded"


async def test_what_the_handler_raises_propagates() -> None:
    app = _app()

    @app.task("boom")
    async def boom(n: int) -> None:
        raise ConnectionError(f"smtp down {n}")

    with pytest.raises(ConnectionError, match="smtp down 7"):
        await run_inline(boom, 7)


async def test_the_fake_context_shows_the_job_as_its_options_shape_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = _app()
    app.producer_hook(lambda kind, headers: headers.update(trace=f"t-{kind}"))
    contexts: list[JobContext] = []

    @app.task("mail.send", queue="mail", max_retries=5, timeout=15)
    async def send(to: str, job: JobContext) -> None:
        contexts.append(job)

    now = trio.current_time()
    lifespan = object()
    await run_inline(
        send,
        "a@example.com",
        attempt=3,
        job_id="j-1",
        headers={"tenant": "acme"},
        lifespan=lifespan,
    )
    [job] = contexts
    assert isinstance(job, FakeJobContext)
    assert (job.id, job.attempt, job.queue, job.kind) == ("j-1", 3, "mail", "mail.send")
    assert job.headers == {"tenant": "acme", "trace": "t-mail.send"}
    assert job.job.max_retries == 5
    assert job.deadline == now + 15
    assert job.lifespan is lifespan
    assert job.app is app
    assert not (job.lease_lost or job.abort_requested or job.cancelled)
    # enqueue's options override the task's
    await run_inline(send, "b@example.com", queue="urgent", timeout=2)
    assert (contexts[1].queue, contexts[1].job.timeout, contexts[1].attempt) == ("urgent", 2, 1)


async def test_job_redis_is_what_the_test_gives_and_says_how_otherwise() -> None:
    app = _app()
    got: list[Any] = []

    @app.task("hits")
    async def hits(n: int, job: JobContext) -> None:
        got.append(job.redis)

    with pytest.raises(TypeError, match=r"pass redis=\.\.\."):
        await run_inline(hits, 1)
    stub = object()
    await run_inline(hits, 1, redis=stub)
    assert got == [stub]


async def test_the_tests_control_abort_lease_and_call_off_while_the_handler_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = _app()
    steps: list[str] = []

    @app.task("long")
    async def long(n: int, job: JobContext) -> str:
        while not job.abort_requested:
            await trio.sleep(1)
        steps.append(f"aborted lost={job.lease_lost}")
        while not job.cancelled:
            await trio.sleep(1)
        try:
            job.check_cancelled()
        except JobCancelled:
            steps.append("cancelled")
        return "stopped"

    context = job_context(long.new_job(1), app=app, attempt=2)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:

            async def steer() -> None:
                await trio.sleep(5)
                context.lose_lease()
                context.request_abort()
                await trio.sleep(5)
                context.call_off()

            nursery.start_soon(steer)
            assert await run_inline(long, 1, context=context) == "stopped"
    assert steps == ["aborted lost=True", "cancelled"]
    assert context.attempt == 2


async def test_progress_and_log_calls_are_recorded_in_order() -> None:
    app = _app()

    @app.task("report")
    async def report(n: int, job: JobContext) -> None:
        for i in range(n):
            await job.progress((i + 1) / n, f"{i + 1} of {n}")
        job.log("done")

    context = job_context(report.new_job(2), app=app)
    await run_inline(report, 2, context=context)
    assert context.calls == [
        RecordedCall("progress", (0.5, "1 of 2")),
        RecordedCall("progress", (1.0, "2 of 2")),
        RecordedCall("log", ("done",)),
    ]
    assert [c.args[0] for c in context.calls_to("progress")] == [0.5, 1.0]
    # checked as a worker's context checks them: bad input raises, nothing recorded
    with pytest.raises(ValueError):
        await context.progress(1.5)
    with pytest.raises(TypeError):
        context.log(b"bytes")  # type: ignore[arg-type]
    assert len(context.calls) == 3
    context.record("future_call", 1)  # a hook for calls the fake does not know yet
    assert context.calls[-1] == RecordedCall("future_call", (1,))


async def test_middleware_runs_only_when_asked() -> None:
    app = _app()
    order: list[str] = []

    @app.middleware
    @asynccontextmanager
    async def around(job: JobContext) -> AsyncIterator[None]:
        order.append(f"enter {job.kind}")
        yield
        order.append("exit")

    @app.task("mw")
    async def handler(n: int) -> None:
        order.append("run")

    await run_inline(handler, 1)
    assert order == ["run"]
    await run_inline(handler, 1, middleware=True)
    assert order == ["run", "enter mw", "run", "exit"]


def test_a_context_made_outside_trio_has_no_deadline_and_attempts_start_at_one() -> None:
    app = _app()

    @app.task("k")
    async def handler(n: int) -> None: ...

    context = job_context(handler.new_job(1), app=app)
    assert context.deadline == math.inf
    assert context.attempt == 1
    with pytest.raises(ValueError, match=r"attempt must be an int >= 1 \(1 is the first run\)"):
        job_context(handler.new_job(1), app=app, attempt=0)


async def test_bad_arguments_are_refused_with_what_to_do() -> None:
    app = _app()
    ran: list[int] = []

    @app.task("k")
    async def handler(n: int) -> None:
        ran.append(n)

    context = job_context(handler.new_job(1), app=app)
    with pytest.raises(TypeError, match=r"a context and attempt, redis: give those to job_context"):
        await run_inline(handler, 1, context=context, attempt=2, redis=object())
    with pytest.raises(ValueError, match="attempt must be an int >= 1"):
        await run_inline(handler, 1, attempt=0)
    with pytest.raises(TypeError, match="middleware must be a bool"):
        await run_inline(handler, 1, middleware="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a task"):
        await run_inline(handler.fn, 1)  # type: ignore[arg-type]
    assert ran == []


async def test_run_until_idle_runs_delayed_jobs_and_retries_then_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = _app()
    done: list[tuple[int, float]] = []

    @app.task("later", max_retries=1)
    async def later(n: int, job: JobContext) -> None:
        if job.attempt == 1:
            raise ConnectionError("once")
        done.append((n, trio.current_time()))

    start = trio.current_time()
    await later.enqueue(1, delay=300)
    worker = await run_until_idle(app, timeout=600)
    assert [n for n, _ in done] == [1]
    assert done[0][1] - start >= 300
    stats = worker.statistics()
    assert (stats.succeeded, stats.retried) == (1, 1)


async def test_run_until_idle_gives_up_at_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = _app()

    @app.task("far")
    async def far(n: int) -> None: ...

    await far.enqueue(1, delay=10_000)
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await run_until_idle(app, timeout=60)
    assert 60 <= trio.current_time() - start < 120
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0"):
        await run_until_idle(app, timeout=-1)
