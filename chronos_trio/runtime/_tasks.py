"""A registered task as the runtime sees it: the handler, how to call it,
and its job defaults."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._control import ControlDefaults
from ..records._retry import RetryPolicy
from ..records._unique import Unique
from ._context import JobContext

#: How the runtime calls a handler: ``fn(payload, job_context)``, awaited
#: when the task is async, else run in a worker thread. (A handler of
#: another accepted shape is adapted to it at registration, see
#: ``app._handlers``.)
Handler = Callable[[Any, JobContext], Awaitable[object] | object]

#: How long a result is kept when the task does not say (seconds).
DEFAULT_RESULT_TTL = 3600.0
#: The largest encoded result kept when the app does not say (its payload limit).
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024


@attrs.frozen
class TaskSpec:
    """One registered handler and its job defaults (the App's ``Task`` wraps
    it for producers).

    ``fn``: how the runtime calls the handler, ``fn(payload, job_context)``
    (the handler itself, or an adapter made at registration for a handler
    of another shape); ``handler``: the function as registered.
    ``is_async`` False: the handler is a plain function, run in a worker
    thread unless ``isolate`` (then in a child process by the worker's
    pool, whether it is a plain function or not; ``on_loop`` and
    ``in_thread`` say where a worker runs it). ``result_type``:
    how the return value is stored (None: nothing is). ``retry``: this
    task's backoff (None: the worker's). ``never_retry``: exception types
    that dead-letter the job at once. ``max_result_bytes``:
    a larger encoded result fails the job (dead)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    kind: str
    fn: Handler
    payload_type: Any
    queue: str
    max_retries: int
    timeout: float
    is_async: bool = True
    result_type: Any = None
    result_ttl: float = DEFAULT_RESULT_TTL
    retry: RetryPolicy | None = None
    never_retry: tuple[type[BaseException], ...] = ()
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    #: The default of its jobs (None: not unique; see ``Unique``).
    unique: Unique | None = None
    #: Its jobs' default priority, expiry and limits (None: none).
    control: ControlDefaults | None = None
    #: Seconds its successes stay retained (None: the worker's
    #: ``retain_succeeded``).
    retain_succeeded: float | None = None
    #: A job that fails for good is dropped (SettleKind.DISCARD), not kept
    #: dead; the dead-letter hooks still run.
    discard_dead: bool = False
    #: Run in a child process of the worker's pool (``runtime._isolation``).
    isolate: bool = False
    #: The function as registered (``fn`` when it takes ``(payload, job_context)``).
    handler: Callable[..., Any] = attrs.field(
        default=attrs.Factory(lambda spec: spec.fn, takes_self=True), eq=False
    )
    #: A worker awaits it on its event loop (async, not isolated).
    on_loop: bool = attrs.field(
        init=False, default=attrs.Factory(lambda s: s.is_async and not s.isolate, takes_self=True)
    )
    #: A worker runs it in one of its threads (plain, not isolated).
    in_thread: bool = attrs.field(
        init=False,
        default=attrs.Factory(lambda s: not s.is_async and not s.isolate, takes_self=True),
    )
