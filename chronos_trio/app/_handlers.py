"""What a handler is, read off the function at registration: async or plain
(run in a thread), its payload type and its result type. Wrong shapes fail
here with a clear ``TypeError``, not when the first job runs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import attrs


@attrs.frozen
class HandlerShape:
    """``is_async``: a coroutine function (run on the event loop), else a
    plain function (run in a worker thread). ``payload_type`` from the first
    parameter's annotation (``Any`` when missing); ``result_type`` from the
    return annotation (``None`` when missing or ``None``: nothing is stored)."""

    is_async: bool
    payload_type: Any
    result_type: Any


def inspect_handler(fn: Callable[..., Any]) -> HandlerShape:
    """Raises ``TypeError`` for anything that cannot be a handler: not
    callable, a generator or async generator, or not callable with exactly
    ``(payload, job_context)``."""
    if not callable(fn):
        raise TypeError(f"{fn!r} is not callable")
    name = getattr(fn, "__qualname__", repr(fn))
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
    try:
        signature.bind(None, None)
    except TypeError:
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        raise TypeError(
            f"handler {name} must take (payload, job_context), it takes "
            f"{len(params)} parameter(s): {signature}"
        ) from None
    try:
        hints = get_type_hints(target)
    except Exception:  # unresolvable forward references: fall back to raw JSON
        hints = {}
    params = list(signature.parameters.values())
    payload_type = hints.get(params[0].name, Any) if params else Any
    result_type = hints.get("return")
    if result_type is type(None):
        result_type = None
    return HandlerShape(is_async, payload_type, result_type)


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    unwrapped: Callable[..., Any] = inspect.unwrap(fn)
    return unwrapped
