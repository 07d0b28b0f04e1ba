"""OpenTelemetry (chronos_trio.integrations.otel): the producer's trace
context travels in a job's headers, through the store, to a CONSUMER span per
run linked to it, with the run's outcome; tracing failures never lose a job;
and nothing but the integration imports opentelemetry."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

import chronos_trio
from chronos_trio import App, JobContext, JobState, MemoryStore, RateLimited, SkipRetry, chain
from chronos_trio.integrations import otel
from chronos_trio.producers import SyncProducer

ROOT = Path(__file__).resolve().parent.parent
FAST = {"poll_interval": 0.5, "lease_duration": 5.0, "heartbeat_interval": 1.0}
REDIS_TIMING = {"poll_interval": 0.2, "lease_duration": 1.5, "recover_interval": 0.2}


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


def runs_of(exporter: InMemorySpanExporter, job_id: str) -> list[ReadableSpan]:
    """The run spans of one job, by attempt."""
    found = [
        s
        for s in spans(exporter, SpanKind.CONSUMER)
        if s.attributes is not None and s.attributes[otel.MESSAGING_MESSAGE_ID] == job_id
    ]
    return sorted(found, key=lambda s: s.attributes[otel.JOB_ATTEMPT])  # type: ignore[index]


def context_of(span: ReadableSpan) -> SpanContext:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx


def linked(run: ReadableSpan) -> SpanContext:
    """The one context a run span links to."""
    assert len(run.links) == 1, run.links
    return run.links[0].context


def ids_of(ctx: SpanContext) -> tuple[int, int]:
    """A span context's trace and span id (SpanContext is not hashable)."""
    return ctx.trace_id, ctx.span_id


def traceparent_of(ctx: SpanContext) -> str:
    """The version, trace id and span id of a W3C traceparent (the flags vary)."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}"


async def test_a_job_enqueued_in_a_span_runs_in_a_span_linked_to_it(
    autojump_clock: object,
) -> None:
    provider, exporter = tracing()
    tracer = provider.get_tracer("test")
    app = App(MemoryStore())
    inst = otel.instrument(app, tracer_provider=provider)
    seen: dict[str, dict[str, str]] = {}

    @app.task("greet", queue="mail")
    async def greet(args: bytes, job: JobContext) -> bytes:
        seen[job.id] = job.headers
        with tracer.start_as_current_span("inside"):  # the run span is current
            pass
        return args

    @app.task("shout", queue="mail")
    async def shout(args: bytes, job: JobContext) -> None:
        seen[job.id] = job.headers

    with tracer.start_as_current_span("request") as request:
        one = await greet.enqueue(b"x")
        many = await greet.enqueue_many([b"a", b"b"])  # the batch path
        flow = await app.enqueue_workflow(chain(greet.s(b"w"), shout.s()), workflow_id="wf")
    async with app.open_worker(concurrency=2, queues=["mail"], **FAST) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()

    req = context_of(request)
    producers = spans(exporter, SpanKind.PRODUCER)
    # one enqueue span per job built, and one per workflow (its hooks run once)
    assert sorted(s.name for s in producers) == ["enqueue greet"] * 4
    for span in producers:
        assert span.parent is not None and span.parent.span_id == req.span_id
        assert context_of(span).trace_id == req.trace_id
        assert span.attributes is not None and span.attributes[otel.JOB_KIND] == "greet"
    by_span = {context_of(s).span_id: s for s in producers}

    ids = [one.job_id, *(h.job_id for h in many)]
    for job_id in ids:
        [run] = runs_of(exporter, job_id)
        assert run.name == "process greet" and run.parent is None  # a root of its own
        link = linked(run)
        assert link.trace_id == req.trace_id and link.span_id in by_span
        # what travelled is the producer span's context, as W3C traceparent
        assert seen[job_id]["traceparent"].rsplit("-", 1)[0] == traceparent_of(link)
        assert run.attributes == {
            otel.MESSAGING_SYSTEM: "chronos_trio",
            otel.MESSAGING_OPERATION_TYPE: "process",
            otel.MESSAGING_OPERATION_NAME: "process",
            otel.MESSAGING_DESTINATION: "mail",
            otel.MESSAGING_MESSAGE_ID: job_id,
            otel.JOB_KIND: "greet",
            otel.JOB_ATTEMPT: 1,
            otel.JOB_MAX_RETRIES: 3,
            otel.WORKER_ID: worker.config.worker_id,
            otel.JOB_OUTCOME: otel.SUCCEEDED,
        }
        assert run.status.status_code is StatusCode.UNSET
    # every job links to a producer span of its own
    assert len({linked(r).span_id for j in ids for r in runs_of(exporter, j)}) == 3
    # the handler's own spans are children of its run span
    inside = [s for s in exporter.get_finished_spans() if s.name == "inside"]
    assert len(inside) == 4
    run_ids = {context_of(s).span_id for s in spans(exporter, SpanKind.CONSUMER)}
    assert all(s.parent is not None and s.parent.span_id in run_ids for s in inside)

    # both workflow steps, the second enqueued by the worker's continuer,
    # link to the workflow's one enqueue span
    first, second = runs_of(exporter, "wf.0"), runs_of(exporter, "wf.1")
    assert [s.name for s in first + second] == ["process greet", "process shout"]
    flow_link = linked(first[0])
    assert ids_of(flow_link) == ids_of(linked(second[0]))
    assert flow_link.span_id in by_span
    assert flow_link.span_id not in {linked(r).span_id for j in ids for r in runs_of(exporter, j)}
    assert seen["wf.1"]["traceparent"] == seen["wf.0"]["traceparent"]
    assert flow.id == "wf"
    stats = inst.statistics()
    assert (stats.injected, stats.inject_failures, stats.runs_traced) == (4, 0, 5)


async def test_each_attempt_is_a_span_with_its_outcome_linked_to_the_same_producer(
    autojump_clock: object,
) -> None:
    provider, exporter = tracing()
    app = App(MemoryStore())
    otel.instrument(app, tracer_provider=provider)
    tries: dict[str, int] = {}

    @app.task("flaky", max_retries=3, timeout=5)
    async def flaky(args: str, job: JobContext) -> None:
        tries[args] = tries.get(args, 0) + 1
        if args == "once" and job.attempt == 1:
            raise RuntimeError("first try fails")
        if args == "always":
            raise KeyError("never works")
        if args == "skip":
            raise SkipRetry("no point")
        if args == "limited" and tries[args] == 1:
            raise RateLimited(2, "slow down")
        if args == "slow":
            await trio.sleep(60)  # past its timeout, every time
        if args == "abort":
            await trio.sleep(3600)

    async with app.open_worker(concurrency=4, retain_succeeded=600, **FAST) as worker:
        once = await flaky.enqueue("once")
        always = await flaky.enqueue("always", max_retries=1)
        skip = await flaky.enqueue("skip")
        limited = await flaky.enqueue("limited")
        slow = await flaky.enqueue("slow", max_retries=0)
        abort = await flaky.enqueue("abort")
        with trio.fail_after(600):
            while tries.get("abort") != 1:
                await trio.sleep(0.1)
            await abort.abort("changed my mind")
            await worker.wait_idle()

    def outcomes(handle: Any) -> list[tuple[int, str, StatusCode]]:
        return [
            (s.attributes[otel.JOB_ATTEMPT], s.attributes[otel.JOB_OUTCOME], s.status.status_code)  # type: ignore[index]
            for s in runs_of(exporter, handle.job_id)
        ]

    assert outcomes(once) == [(1, "retried", StatusCode.ERROR), (2, "succeeded", StatusCode.UNSET)]
    first, second = runs_of(exporter, once.job_id)
    # both attempts, one producer context
    assert ids_of(linked(first)) == ids_of(linked(second))
    assert first.status.description == "RuntimeError: first try fails"
    assert first.attributes is not None and first.attributes[otel.ERROR_TYPE] == "RuntimeError"
    [event] = first.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.message"] == "first try fails"

    assert outcomes(always) == [(1, "retried", StatusCode.ERROR), (2, "dead", StatusCode.ERROR)]
    assert outcomes(skip) == [(1, "dead", StatusCode.ERROR)]
    # deferred: the attempt given back, so the next run is attempt 1 again
    assert outcomes(limited) == [
        (1, "deferred", StatusCode.UNSET),
        (1, "succeeded", StatusCode.UNSET),
    ]
    assert outcomes(slow) == [(1, "dead", StatusCode.ERROR)]
    [timed_out] = runs_of(exporter, slow.job_id)
    assert timed_out.status.description == "TimeoutError: handler exceeded its 5s timeout"
    assert outcomes(abort) == [(1, "aborted", StatusCode.UNSET)]
    for handle, state in [(once, JobState.SUCCEEDED), (always, JobState.DEAD)]:
        assert (await handle.status()).state is state  # the outcomes said what happened


class _BrokenPropagator(TextMapPropagator):
    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        raise RuntimeError("extract is broken")

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        raise RuntimeError("inject is broken")

    @property
    def fields(self) -> set[str]:
        return set()


class _BrokenTracerProvider(TracerProvider):
    """A provider whose tracer cannot start a span."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        tracer = super().get_tracer(*args, **kwargs)

        def start_span(*a: Any, **kw: Any) -> Any:
            raise RuntimeError("no spans today")

        tracer.start_span = start_span  # type: ignore[method-assign]
        return tracer


async def test_tracing_failures_never_lose_a_job(autojump_clock: object) -> None:
    done: list[str] = []

    async def work(args: str, job: JobContext) -> None:
        done.append(args)

    # the propagator fails both ways: enqueued without a context, run unlinked
    app = App(MemoryStore())
    provider, exporter = tracing()
    inst = otel.instrument(app, tracer_provider=provider, propagator=_BrokenPropagator())
    task = app.task("work")(work)
    await task.enqueue("a")
    await task.enqueue_many(["b", "c"])
    # a caller's own traceparent wins, and headers too large for the context stay
    given = await task.enqueue("d", headers={"traceparent": "mine"})
    big = {"pad": "x" * 8150}
    otel_app = App(MemoryStore())
    big_inst = otel.instrument(otel_app, tracer_provider=provider)
    big_task = otel_app.task("work")(work)
    padded = await big_task.enqueue("e", headers=big)
    assert dict((await otel_app.store.get_job(padded.job_id)).headers) == big  # type: ignore[union-attr]
    assert big_inst.statistics().inject_failures == 1
    assert dict((await app.store.get_job(given.job_id)).headers) == {"traceparent": "mine"}  # type: ignore[union-attr]
    async with app.open_worker(**FAST) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    assert sorted(done) == ["a", "b", "c", "d"]
    assert inst.statistics().inject_failures == 4
    assert inst.statistics().run_span_failures == 1  # the one with headers to extract
    assert [s.attributes[otel.JOB_OUTCOME] for s in spans(exporter, SpanKind.CONSUMER)] == [  # type: ignore[index]
        "succeeded"
    ] * 3

    # the tracer fails: enqueued and run untraced
    done.clear()
    app2 = App(MemoryStore())
    inst2 = otel.instrument(app2, tracer_provider=_BrokenTracerProvider())
    task2 = app2.task("work")(work)
    await task2.enqueue("f")
    async with app2.open_worker(**FAST) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    assert done == ["f"]
    assert (inst2.statistics().inject_failures, inst2.statistics().run_span_failures) == (1, 1)

    with pytest.raises(ValueError, match="already instrumented"):
        otel.instrument(app2)
    inst2.uninstrument()
    assert app2.producer_hooks == [] and app2.registry.middleware == []


@pytest.mark.redis
async def test_the_context_survives_redis_and_the_sync_producer(redis_url: str) -> None:
    provider, exporter = tracing()
    tracer = provider.get_tracer("test")
    app = App(redis_url)
    otel.instrument(app, tracer_provider=provider)

    @app.task("traced")
    async def traced(args: str, job: JobContext) -> None:
        pass

    with tracer.start_as_current_span("trio request") as trio_request:
        from_trio = await traced.enqueue("trio")

    def from_a_thread() -> tuple[str, SpanContext]:
        # a program outside Trio, in its own span
        with SyncProducer(app=app) as producer, tracer.start_as_current_span("wsgi") as span:
            return producer.enqueue("traced", "sync").job_id, context_of(span)

    sync_id, wsgi = await trio.to_thread.run_sync(from_a_thread)
    for job_id, parent in [(from_trio.job_id, context_of(trio_request)), (sync_id, wsgi)]:
        stored = await app.store.get_job(job_id)
        assert stored is not None
        traceparent = dict(stored.headers)["traceparent"]
        assert traceparent.split("-")[1] == f"{parent.trace_id:032x}"
    async with app.open_worker(**REDIS_TIMING) as worker:
        with trio.fail_after(20):
            await worker.wait_idle()
    producers = {context_of(s).span_id: s for s in spans(exporter, SpanKind.PRODUCER)}
    for job_id, parent in [(from_trio.job_id, context_of(trio_request)), (sync_id, wsgi)]:
        [run] = runs_of(exporter, job_id)
        link = linked(run)
        assert link.trace_id == parent.trace_id
        assert producers[link.span_id].parent.span_id == parent.span_id  # type: ignore[union-attr]
        assert run.attributes is not None and run.attributes[otel.JOB_OUTCOME] == "succeeded"
    await app.aclose()


# -- opentelemetry stays optional ------------------------------------------------------------
_WITHOUT_OTEL = """
import importlib, pkgutil, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None

sys.meta_path.insert(0, Block())
import chronos_trio
app = chronos_trio.App()
for info in pkgutil.walk_packages(chronos_trio.__path__, "chronos_trio."):
    if info.name != "chronos_trio.integrations.otel":
        importlib.import_module(info.name)
try:
    import chronos_trio.integrations.otel
except ModuleNotFoundError as exc:
    print("otel:", exc)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_chronos_trio_imports_without_opentelemetry() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "otel: No module named 'opentelemetry' (blocked)",
        "[]",
    ]


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def test_only_the_integration_imports_opentelemetry() -> None:
    package = Path(chronos_trio.__file__).parent
    importers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(name.split(".")[0] == "opentelemetry" for name in _imports(path))
    )
    assert importers == ["integrations/otel.py"]
