"""What a handler is, read off the function at registration: async or plain
(run in a thread), which of the accepted shapes it has, its payload type
and its result type. Wrong shapes fail here with a ``TypeError`` that shows
the accepted ones, not when the first job runs.

The accepted shapes (``def`` or ``async def``; parameter names are free)::

    handler(payload: P) -> R                     # Celery, Dramatiq, huey
    handler(payload: P, job: JobContext) -> R    # this library's own
    handler(job: JobContext, payload: P) -> R    # context first: arq, SAQ

The shape is told by the annotations: a first parameter annotated
``JobContext`` is the context; a second one is the context unless it is
annotated with another type (then it must have a default, and the handler
takes its payload alone). The runtime always calls ``fn(payload,
job_context)``: for the other shapes :func:`inspect_handler` returns a
small adapter made once here, which calls the handler directly (no
coroutine of its own, nothing allocated per job but its call frame).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..runtime._context import JobContext
from ..runtime._tasks import Handler

#: How a handler takes its arguments (see the module doc).
Shape = Literal["payload", "payload_context", "context_payload"]

#: The accepted shapes, as the registration errors show them.
ACCEPTED_SHAPES = (
    "a handler takes its payload, and may take the job context before or after it:\n"
    "    async def handler(payload: P) -> R\n"
    "    async def handler(payload: P, job: JobContext) -> R\n"
    "    async def handler(job: JobContext, payload: P) -> R\n"
    "(or a plain def, run in a worker thread; a parameter after the payload that "
    "is annotated with another type than JobContext must have a default)"
)


@attrs.frozen
class HandlerShape:
    """``is_async``: a coroutine function (run on the event loop), else a
    plain function (run in a worker thread). ``shape``: which arguments it
    takes, in which order. ``call``: how the runtime calls it, always
    ``call(payload, job_context)`` (the handler itself for the
    ``payload_context`` shape). ``payload_type`` from the payload
    parameter's annotation (``Any`` when missing); ``result_type`` from the
    return annotation (``None`` when missing or ``None``: nothing is
    stored); ``returns_annotated`` False when there is no return annotation
    at all (the App warns: a result would be dropped)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    is_async: bool
    shape: Shape
    call: Handler
    payload_type: Any
    result_type: Any
    returns_annotated: bool


def inspect_handler(fn: Callable[..., Any]) -> HandlerShape:
    """Read ``fn``'s shape. Raises ``TypeError`` for anything that cannot be
    a handler: not callable, a generator or async generator, or a
    signature that is none of the accepted shapes (the message shows them)."""
    if not callable(fn):
        raise TypeError(f"{fn!r} is not callable")
    name = getattr(fn, "__qualname__", None) or repr(fn)
    target = _unwrapped(fn)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise TypeError(
            f"handler {name} is a generator function: a handler runs once and returns "
            "(use a plain or async def)"
        )
    is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an instance with async __call__
    )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of handler {name}: {exc}") from None
    annotated = target if inspect.isroutine(target) else type(target).__call__
    try:
        hints = get_type_hints(annotated)
    except Exception:  # unresolvable forward references: read the raw text
        hints = {}
    shape, payload_param = _shape(name, signature, hints)
    payload_type = Any if payload_param is None else hints.get(payload_param, Any)
    result_type = hints.get("return")
    if result_type is type(None):
        result_type = None
    returns_annotated = (
        "return" in hints or signature.return_annotation is not inspect.Signature.empty
    )
    return HandlerShape(
        is_async, shape, _caller(fn, shape), payload_type, result_type, returns_annotated
    )


def _shape(
    name: str, signature: inspect.Signature, hints: dict[str, Any]
) -> tuple[Shape, str | None]:
    """The handler's shape and the name of its payload parameter (None:
    ``*args`` takes it)."""
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = any(p.kind is p.VAR_POSITIONAL for p in params)
    required = [p for p in positional if p.default is p.empty]
    keyword_only = [p for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]

    def refuse(why: str) -> TypeError:
        return TypeError(
            f"handler {name}{signature} is not a handler's shape: {why}; {ACCEPTED_SHAPES}"
        )

    if keyword_only:
        raise refuse(f"its keyword-only parameter {keyword_only[0].name!r} has no default")
    if not positional and not star:
        raise refuse("it takes no parameter for its payload")
    if len(required) > 2:
        raise refuse(
            f"it needs {len(required)} arguments ({', '.join(p.name for p in required)}), "
            "but a job gives at most two: the payload and the context"
        )
    first = _context_annotation(positional[0], hints) if positional else None
    if first:  # (job: JobContext, payload)
        if len(positional) < 2 and not star:
            raise refuse("it takes only the job context, and no payload")
        if len(positional) >= 2 and _context_annotation(positional[1], hints):
            raise refuse("both of its parameters are annotated JobContext")
        return "context_payload", positional[1].name if len(positional) >= 2 else None
    payload = positional[0].name if positional else None
    if len(positional) >= 2:
        second = positional[1]
        takes = _context_annotation(second, hints)
        if takes is False:  # annotated with another type: it cannot take the context
            if second.default is second.empty:
                raise refuse(
                    f"its second parameter {second.name!r} is annotated "
                    f"{_annotation_text(second, hints)}, but would receive the job context "
                    "(annotate it JobContext, or give it a default to take the payload alone)"
                )
            return "payload", payload
        return "payload_context", payload
    if star:
        return "payload_context", payload
    return "payload", payload


def _context_annotation(param: inspect.Parameter, hints: dict[str, Any]) -> bool | None:
    """Whether ``param`` is annotated as the job context: True for
    ``JobContext`` (a subclass, an Optional of it, or the text of a
    forward reference naming it), None when it says nothing (no
    annotation, ``Any``, ``object``), False for any other type."""
    hint = hints.get(param.name, param.annotation)
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return None
    if isinstance(hint, str):
        return hint.strip("'\"").rpartition(".")[2] == "JobContext"
    if get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        return any(_is_context_type(a) for a in get_args(hint))
    return _is_context_type(hint)


def _is_context_type(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, JobContext)


def _annotation_text(param: inspect.Parameter, hints: dict[str, Any]) -> str:
    hint = hints.get(param.name, param.annotation)
    if isinstance(hint, type):
        return hint.__qualname__
    return str(hint)


def _caller(fn: Callable[..., Any], shape: Shape) -> Handler:
    """``fn`` as the runtime calls it, ``(payload, job_context)``: made once
    here; the adapters return what ``fn`` returns (an async handler's
    coroutine itself, awaited by the runtime)."""
    if shape == "payload_context":
        return fn
    if shape == "payload":
        return lambda payload, job: fn(payload)
    return lambda payload, job: fn(job, payload)


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    unwrapped: Callable[..., Any] = inspect.unwrap(fn)
    return unwrapped
