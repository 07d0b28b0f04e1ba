"""What a worker needs from the program that runs it: the task registry
(handlers by kind, dead-letter hooks, schedules) and the store.

The App builds a :class:`Registry` as tasks are registered and hands itself
to a worker as a :class:`WorkerHost`; the runtime never imports the App.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs

from ..records._attrs_methods import fields_repr
from ..records._codec import decode_payload
from ..records._errors import PayloadError, UnknownTask
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

    __repr__ = fields_repr

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

    def check_schedules(self) -> None:
        """Raise unless every schedule can fire a job a worker will run:
        ``UnknownTask`` for a schedule whose kind is not registered here
        (and not ``external``), naming the closest registered kind;
        ``PayloadError`` for a payload its task cannot decode (a schedule
        declared before its task was registered encoded it as plain JSON).
        Called when a worker starts, when every task is registered."""
        for schedule in self.schedules:
            task = self.tasks.get(schedule.kind)
            if task is None:
                if schedule.external:
                    continue
                raise UnknownTask(_unknown_kind_message(schedule, self.tasks))
            try:
                decode_payload(schedule.payload, task.payload_type)
            except PayloadError as exc:
                raise PayloadError(f"schedule {schedule.id!r}: {exc}") from None


def _unknown_kind_message(schedule: Schedule, tasks: Mapping[str, TaskSpec]) -> str:
    import difflib  # only on this error path

    close = difflib.get_close_matches(schedule.kind, list(tasks), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    known = ", ".join(sorted(tasks)) or "none"
    return (
        f"schedule {schedule.id!r} ({schedule.spec}) names task {schedule.kind!r}, which this "
        f"app does not register ({hint}registered: {known}); every trigger would be "
        "dead-lettered. Register the task, fix the name, or pass external=True when "
        "another program sharing the store registers it"
    )


class WorkerHost(Producer, Protocol):
    """The program a worker runs for (an App): a :class:`Producer` that also
    has the task registry."""

    @property
    def registry(self) -> Registry: ...
