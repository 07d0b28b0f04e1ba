"""Calling a task's handler directly in a test: :func:`run_inline`.

The payload takes the way a real job's does: encoded as ``enqueue`` encodes
it (with the same checks, options and producer hooks, through
``task.new_job``), then decoded as a worker decodes it, so a payload that
would fail at enqueue or in the worker fails here too. The handler runs in
the caller's Trio task (a plain ``def`` in a worker thread, as a worker
runs it) with a :class:`~chronos_trio.testing.FakeJobContext`. Its return
value is encoded as a worker stores it (a result that would fail the job
fails here), and returned as it is; what it raises propagates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, TypeVar, Unpack, cast

import trio

from ..app import App, Task
from ..records._checks import check_bool, check_positive_int
from ..records._codec import decode_payload, encode_payload
from ..records._errors import PayloadError
from ..records._options import EnqueueOptions
from ..runtime._context import JobContext, Producer
from ..runtime._registry import Middleware
from ..runtime._tasks import TaskSpec
from .fake_context import FakeJobContext, job_context

P = TypeVar("P")


async def run_inline(
    task: Task[P],
    payload: P,
    *,
    context: FakeJobContext | None = None,
    attempt: int = 1,
    app: Producer | None = None,
    lifespan: Any = None,
    redis: Any = None,
    middleware: bool = False,
    **options: Unpack[EnqueueOptions],
) -> Any:
    """Run ``task``'s handler on ``payload`` now, in this Trio task, and
    return what it returned (see the module doc).

    ``options`` are ``enqueue``'s (``job_id``, ``queue``, ``headers``,
    ``max_retries``, ``timeout``, ...): they shape the job the context
    shows. The context (unless ``context`` gives one, made by
    :func:`~chronos_trio.testing.job_context`) has ``attempt`` (1: the
    first run), ``job.app`` = ``app`` (default: the task's App, so
    follow-up enqueues go to its store, or run eagerly under
    :func:`~chronos_trio.testing.eager`), ``job.lifespan`` = ``lifespan``
    and ``job.redis`` = ``redis``. ``middleware=True`` runs the App's
    middleware around the handler, as a worker does. The task's timeout is
    not enforced (``job.deadline`` says when it would end).

    Raises ``TypeError`` for a ``task`` that is not a Task, a
    ``middleware`` that is not a bool, or a ``context`` given with
    ``attempt``, ``app``, ``lifespan`` or ``redis`` (give those to
    ``job_context``); ``ValueError`` for an ``attempt`` that is not an int
    >= 1; what ``enqueue`` raises for the payload and options
    (``PayloadError``, ``TypeError``, ``ValueError``), ``PayloadError`` when
    the payload does not decode or the result does not encode (or is over
    the size limit), and whatever the handler raises.
    """
    if not isinstance(task, Task):
        raise TypeError(f"run_inline takes a task (what @app.task returns), got {task!r}")
    check_bool("middleware", middleware, error=TypeError)
    check_positive_int("attempt", attempt, note=" (1 is the first run)")
    if context is not None:
        given = {"attempt": attempt != 1, "app": app, "lifespan": lifespan, "redis": redis}
        clash = [name for name, value in given.items() if value not in (None, False)]
        if clash:
            raise TypeError(
                f"run_inline got a context and {', '.join(clash)}: give those to "
                "job_context(...) when making the context"
            )
    spec = task.spec
    new = task.new_job(payload, **options)
    decoded = decode_payload(new.payload, spec.payload_type)
    if context is None:
        host = app if app is not None else cast(Producer, task.app)
        context = job_context(new, app=host, attempt=attempt, lifespan=lifespan, redis=redis)
    around = task.app.registry.middleware if middleware and isinstance(task.app, App) else ()
    value = await call_handler(spec, decoded, context, around)
    encode_result(spec, value)
    return value


async def call_handler(
    spec: TaskSpec, payload: Any, ctx: JobContext, middleware: Sequence[Middleware] = ()
) -> object:
    """``spec``'s handler on a decoded ``payload``, inside ``middleware``
    (the first outermost): awaited when async, else in a worker thread."""
    async with contextlib.AsyncExitStack() as stack:
        for factory in middleware:
            await stack.enter_async_context(factory(ctx))
        if spec.is_async:
            return await spec.fn(payload, ctx)  # type: ignore[misc]  # is_async: awaitable
        return await trio.to_thread.run_sync(spec.fn, payload, ctx)


def encode_result(spec: TaskSpec, value: object) -> bytes | None:
    """``value`` as a worker stores it (None: the task keeps no result).
    Raises ``PayloadError`` when it does not encode as the task's result
    type or is over the task's result size limit (a worker dead-letters
    such a job)."""
    if spec.result_type is None or spec.result_ttl <= 0:
        return None
    data = encode_payload(value, spec.result_type, what="result")
    if len(data) > spec.max_result_bytes:
        raise PayloadError(
            f"result is {len(data)} bytes encoded, over the {spec.max_result_bytes}-byte limit"
        )
    return data
