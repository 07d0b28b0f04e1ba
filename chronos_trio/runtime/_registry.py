"""What a worker needs from the program that runs it: the task registry
(handlers by kind, dead-letter hooks, schedules) and the store.

The App builds a :class:`Registry` as tasks are registered and hands itself
to a worker as a :class:`WorkerHost`; the runtime never imports the App.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs

from ..records._jobs import Job
from ._context import JobContext, Producer
from ._metrics import Metrics
from ._schedule import Schedule, leadership_name
from ._tasks import TaskSpec

#: ``async def hook(job)``, called for each dead-lettered job.
DeadLetterHook = Callable[[Job], Awaitable[object]]
#: ``middleware(job_context)`` -> an async context manager entered around
#: every handler run (inside the run's cancel scope).
Middleware = Callable[[JobContext], AbstractAsyncContextManager[object]]
#: ``lifespan(app)`` -> an async context manager entered once per worker
#: process, before the first lease; its value is ``job.lifespan``.
Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


@attrs.define(eq=False)
class Registry:
    """Tasks by kind, dead-letter hooks and schedules of one app.

    ``name`` names the app's leadership (schedules and janitor run under it).
    The App writes it while tasks are registered; workers only read it.
    """

    name: str
    tasks: dict[str, TaskSpec] = attrs.field(factory=dict)
    dead_letter_hooks: list[DeadLetterHook] = attrs.field(factory=list)
    schedules: list[Schedule] = attrs.field(factory=list)
    #: Around every handler run, the first registered outermost.
    middleware: list[Middleware] = attrs.field(factory=list)
    lifespan: Lifespan | None = None
    #: Fed by every worker of the app from its event seam (None: nothing is).
    metrics: Metrics | None = None

    @property
    def leadership_name(self) -> str:
        """The store leadership that guards this app's singleton duties."""
        return leadership_name(self.name)


class WorkerHost(Producer, Protocol):
    """The program a worker runs for (an App): a :class:`Producer` that also
    has the task registry."""

    @property
    def registry(self) -> Registry: ...
