"""OpenTelemetry traces for chronos_trio (the optional extra ``otel``).

``instrument(app)`` hooks both ends of a job into OpenTelemetry:

* **Producer side** (a producer hook, so every way this app builds a job:
  ``enqueue``, ``enqueue_many``, workflows, and the producers outside Trio
  made with ``app=app``): a PRODUCER span ``enqueue <kind>`` is started
  and ended in the producer's current context (a child of the caller's
  span), and *its* context is injected into the job's headers with the
  propagator (W3C ``traceparent`` / ``tracestate``, plus ``baggage`` with
  the default global propagator). With ``producer_spans=False`` no span is
  made and the caller's own context travels.
* **Worker side** (a middleware, registered outermost): a CONSUMER span
  ``process <kind>`` around every run, a new trace root with a *link* to
  the context in the job's headers (OpenTelemetry's messaging conventions
  require the link, a parent is optional; a delayed job, its retries hours
  later and a cron job fan-in would otherwise grow one trace without end).
  Every attempt of a job links to the same producer context, as its
  headers are stored with it. The span is current while the handler runs,
  so the handler's own spans are its children.

Guarantees:

* Tracing never fails an enqueue: whatever the tracer or the propagator
  raises is caught (logged and counted in :meth:`Instrumentation.statistics`)
  and the job is enqueued without a trace context; headers that would go
  past the size limit with the context added are left as they were.
* Tracing never fails a run: a failure to start or end a span is caught,
  and the handler runs (or has run) as it would untraced. The middleware
  never swallows the handler's exception.
* Headers the caller gave (``headers={"traceparent": ...}``) win over the
  injected ones.
* Nothing else in chronos_trio imports opentelemetry: this module is the
  only one (tested), so ``import chronos_trio`` works without the extra.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import Any

import attrs
import trio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from ..app import App
from ..records import RateLimited, Retry, SkipRetry, _options
from ..records._log import log_event
from ..records._version import VERSION
from ..runtime import JobContext

log = logging.getLogger("chronos_trio.otel")

#: The instrumentation scope name of every span made here.
TRACER_NAME = "chronos_trio"

# -- attribute names (OpenTelemetry messaging conventions where they have one) --
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
ERROR_TYPE = "error.type"
JOB_KIND = "chronos.job.kind"
JOB_ATTEMPT = "chronos.job.attempt"
JOB_MAX_RETRIES = "chronos.job.max_retries"
JOB_OUTCOME = "chronos.job.outcome"
WORKER_ID = "chronos.worker.id"

#: ``messaging.system`` of every span made here.
SYSTEM = "chronos_trio"

# -- outcomes of a run (``chronos.job.outcome``) ---------------------------------------
#: The handler returned (a result that then fails to encode makes the job
#: dead; the middleware cannot see that).
SUCCEEDED = "succeeded"
#: The handler failed (or timed out) with attempts left: it runs again.
RETRIED = "retried"
#: The handler failed for good: ``SkipRetry``, a ``never_retry`` error, or
#: its last attempt.
DEAD = "dead"
#: An abort of the job reached the worker and cancelled the run.
ABORTED = "aborted"
#: ``RateLimited``: it runs again later, the attempt given back.
DEFERRED = "deferred"
#: The worker lost the job's lease (another worker may run it).
LOST = "lost"
#: Cancelled otherwise (a shutdown past its grace period): the job goes
#: back to ready with its attempt given back.
INTERRUPTED = "interrupted"

#: Outcomes that are the handler's failure: the span's status is ERROR.
_FAILED = frozenset({RETRIED, DEAD})


@attrs.frozen
class OtelStatistics:
    """What one :class:`Instrumentation` did: trace contexts injected into
    jobs' headers, injections that failed or were left out (the job was
    enqueued without one), runs traced, and runs whose span failed (the run
    went on untraced). Counted without a lock: exact within one thread."""

    injected: int
    inject_failures: int
    runs_traced: int
    run_span_failures: int


class Instrumentation:
    """The tracing of one App: its producer hook and its middleware, both
    registered by :func:`instrument`. ``uninstrument()`` removes them."""

    def __init__(
        self,
        app: App,
        *,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
        producer_spans: bool = True,
    ) -> None:
        self.app = app
        self.producer_spans = producer_spans
        self._propagator = propagator
        # with no provider given, the global one: a proxy until it is set,
        # so instrument() may run before the SDK is configured
        self._tracer: Tracer = trace.get_tracer(
            TRACER_NAME, VERSION, tracer_provider=tracer_provider
        )
        self._injected = 0
        self._inject_failures = 0
        self._runs_traced = 0
        self._run_span_failures = 0

    @property
    def propagator(self) -> TextMapPropagator:
        """The propagator given, else the global one (read on each use, so
        ``propagate.set_global_textmap`` later still applies)."""
        return self._propagator if self._propagator is not None else propagate.get_global_textmap()

    def statistics(self) -> OtelStatistics:
        return OtelStatistics(
            self._injected, self._inject_failures, self._runs_traced, self._run_span_failures
        )

    # -- producer side -----------------------------------------------------------------
    def producer_hook(self, kind: str, headers: dict[str, str]) -> None:
        """The producer hook: adds the trace context of an ``enqueue <kind>``
        PRODUCER span (or, without producer spans, the current context) to
        ``headers``. Never raises."""
        try:
            carrier: dict[str, str] = {}
            if self.producer_spans:
                span = self._tracer.start_span(
                    f"enqueue {kind}",
                    kind=SpanKind.PRODUCER,
                    attributes={
                        MESSAGING_SYSTEM: SYSTEM,
                        MESSAGING_OPERATION_TYPE: "create",
                        MESSAGING_OPERATION_NAME: "enqueue",
                        JOB_KIND: kind,
                    },
                )
                try:
                    self.propagator.inject(carrier, context=trace.set_span_in_context(span))
                finally:
                    span.end()
            else:
                self.propagator.inject(carrier)
            merged = _merge(headers, carrier)
        except Exception:
            self._inject_failed(kind)
            return
        if merged is True:
            self._injected += 1
        elif merged is None:
            self._inject_failures += 1

    def _inject_failed(self, kind: str) -> None:
        self._inject_failures += 1
        # the first with its traceback; a broken propagator must not flood the log
        log_event(
            log,
            logging.WARNING,
            "tracing: no trace context (job enqueued without one)",
            kind=kind,
            exc_info=self._inject_failures == 1,
        )

    # -- worker side -------------------------------------------------------------------
    def middleware(self, job: JobContext) -> _RunSpan:
        """The middleware: a CONSUMER span around one run of ``job``."""
        return _RunSpan(self, job)

    def _start_run(self, job: JobContext) -> Span:
        links = []
        if job.job.headers:
            parent = self.propagator.extract(dict(job.job.headers))
            found = trace.get_current_span(parent).get_span_context()
            if found.is_valid:
                links.append(Link(found))
        return self._tracer.start_span(
            f"process {job.kind}",
            # a root of its own: not a child of whatever context the worker's
            # task runs in (a Trio program that embeds the worker in a span)
            context=otel_context.Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                MESSAGING_SYSTEM: SYSTEM,
                MESSAGING_OPERATION_TYPE: "process",
                MESSAGING_OPERATION_NAME: "process",
                MESSAGING_DESTINATION: job.queue,
                MESSAGING_MESSAGE_ID: job.id,
                JOB_KIND: job.kind,
                JOB_ATTEMPT: job.attempt,
                JOB_MAX_RETRIES: job.job.max_retries,
                WORKER_ID: job.worker_id,
            },
        )

    def _end_run(self, span: Span, job: JobContext, exc: BaseException | None) -> None:
        outcome = run_outcome(job, exc, self._never_retry(job.kind))
        span.set_attribute(JOB_OUTCOME, outcome)
        if outcome in _FAILED and exc is not None:
            if isinstance(exc, trio.Cancelled):  # cancelled at its deadline
                description = f"TimeoutError: handler exceeded its {job.job.timeout:g}s timeout"
                span.set_attribute(ERROR_TYPE, "TimeoutError")
            else:
                span.record_exception(exc)
                description = f"{type(exc).__name__}: {exc}"
                span.set_attribute(ERROR_TYPE, _qualified_name(type(exc)))
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    def _never_retry(self, kind: str) -> tuple[type[BaseException], ...]:
        task = self.app.registry.tasks.get(kind)
        return task.never_retry if task is not None else ()

    def uninstrument(self) -> None:
        """Remove the producer hook and the middleware from the app (jobs
        already made keep their headers)."""
        hooks, middleware = self.app.producer_hooks, self.app.registry.middleware
        if self.producer_hook in hooks:
            hooks.remove(self.producer_hook)
        if self.middleware in middleware:
            middleware.remove(self.middleware)


class _RunSpan:
    """The middleware's async context manager for one run (a class, not a
    generator: one object per run, and the exception is seen as it is)."""

    __slots__ = ("_inst", "_job", "_span", "_token")

    def __init__(self, inst: Instrumentation, job: JobContext) -> None:
        self._inst = inst
        self._job = job
        self._span: Span | None = None
        self._token: Token[otel_context.Context] | None = None

    async def __aenter__(self) -> None:
        inst = self._inst
        try:
            span = inst._start_run(self._job)
            self._token = otel_context.attach(trace.set_span_in_context(span))
            self._span = span
            inst._runs_traced += 1
        except Exception:
            inst._run_span_failures += 1
            log_event(
                log,
                logging.WARNING,
                "tracing: no span (run untraced)",
                job=self._job.id,
                exc_info=inst._run_span_failures == 1,
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        span, token = self._span, self._token
        if span is None or token is None:
            return False
        otel_context.detach(token)  # logs, never raises, on a token of another context
        try:
            self._inst._end_run(span, self._job, exc)
        except Exception:
            self._inst._run_span_failures += 1
            log_event(
                log, logging.WARNING, "tracing: span not ended", job=self._job.id, exc_info=True
            )
        return False  # never swallow what the handler raised


def instrument(
    app: App,
    *,
    tracer_provider: TracerProvider | None = None,
    propagator: TextMapPropagator | None = None,
    producer_spans: bool = True,
) -> Instrumentation:
    """Trace ``app``'s jobs: its producer hook injects the trace context
    into every job it builds (so do the producers outside Trio made with
    ``app=app``, which use the app's hooks), and its middleware, registered
    outermost (before any other), opens a CONSUMER span per run linked to
    it. ``tracer_provider``: None, the global one; ``propagator``: None, the
    global text map propagator (W3C trace context and baggage by default).
    ``producer_spans=False``: no ``enqueue`` span, the caller's context
    travels as it is.

    Call it once per app, before workers start (a running worker reads the
    middleware list per run, so later works too). Raises ``ValueError`` when
    the app is already instrumented."""
    if any(isinstance(getattr(h, "__self__", None), Instrumentation) for h in app.producer_hooks):
        raise ValueError("this app is already instrumented for OpenTelemetry")
    inst = Instrumentation(
        app, tracer_provider=tracer_provider, propagator=propagator, producer_spans=producer_spans
    )
    app.producer_hook(inst.producer_hook)
    app.registry.middleware.insert(0, inst.middleware)  # outermost: times the others too
    return inst


def run_outcome(
    job: JobContext,
    exc: BaseException | None,
    never_retry: tuple[type[BaseException], ...] = (),
) -> str:
    """What a run that ended with ``exc`` (None: it returned) comes to, as
    far as a middleware can tell: the executor's own rules (see
    ``actors/executor.py``) on the exception, the job's attempts and the run's
    lease, abort flag and deadline. One of :data:`SUCCEEDED`,
    :data:`RETRIED`, :data:`DEAD`, :data:`ABORTED`, :data:`DEFERRED`,
    :data:`LOST`, :data:`INTERRUPTED`."""
    if exc is None:
        return SUCCEEDED
    if isinstance(exc, trio.Cancelled):
        # the executor's order: a lost lease, then an abort, then the deadline
        if job.lease_lost:
            return LOST
        if job.abort_requested:
            return ABORTED
        if trio.current_time() >= job.deadline:
            return _failed(job)
        return INTERRUPTED
    if not isinstance(exc, Exception):
        return INTERRUPTED  # KeyboardInterrupt and the like: not a job's failure
    if isinstance(exc, SkipRetry):
        return DEAD
    if isinstance(exc, Retry):
        return _failed(job)
    if isinstance(exc, RateLimited):
        return DEFERRED
    if never_retry and isinstance(exc, never_retry):
        return DEAD
    return _failed(job)


def _failed(job: JobContext) -> str:
    """A failed attempt: dead once the attempts are used up (as ``_failure``)."""
    return DEAD if job.job.attempts > job.job.max_retries else RETRIED


def _merge(headers: dict[str, str], carrier: Mapping[str, Any]) -> bool | None:
    """Add the propagator's fields to ``headers`` (those already there win),
    unless they are not text or would take the headers past their size
    limit. True: some were added; False: there were none to add; None:
    left out, too large."""
    added = {
        name: value
        for name, value in carrier.items()
        if isinstance(name, str) and name and isinstance(value, str) and name not in headers
    }
    if not added:
        return False
    merged = {**headers, **added}
    size = len(_options.encode_headers(tuple(merged.items())))
    if size > _options.MAX_HEADERS_BYTES:
        log_event(
            log,
            logging.WARNING,
            "tracing: trace context left out: the headers would be over the limit",
            size=size,
            limit=_options.MAX_HEADERS_BYTES,
        )
        return None
    headers.update(added)
    return True


def _qualified_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


__all__ = [
    "ABORTED",
    "DEAD",
    "DEFERRED",
    "INTERRUPTED",
    "LOST",
    "RETRIED",
    "SUCCEEDED",
    "Instrumentation",
    "OtelStatistics",
    "instrument",
    "run_outcome",
]
