"""One-for-one supervision with a restart intensity, and fault injection.

Modelled on Erlang/OTP: a crashed child is restarted on its own; if children
crash more than ``intensity`` times within ``period`` seconds the supervisor
gives up and raises :class:`ActorFailed`, so the worker fails loudly and its
parent (the process manager, or the embedding program) decides what next.
Cancellation and KeyboardInterrupt are never swallowed.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import ActorFailed, sole_exception
from ..records._log import log_event
from ._restarts import RestartWindow

log = logging.getLogger("chronos_trio.supervisor")

ActorRun = Callable[..., Awaitable[None]]


@attrs.frozen
class ChildSpec:
    """An actor: ``run(task_status=...)`` calls ``task_status.started()`` once
    it is ready and then runs until cancelled."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    run: ActorRun


class Supervisor:
    """Restarts crashed children, within ``intensity`` restarts per ``period`` s."""

    def __init__(
        self,
        *,
        intensity: int,
        period: float,
        on_restart: Callable[[str, BaseException, int], None] | None = None,
    ) -> None:
        self._window = RestartWindow(intensity, period)
        #: Called (never awaited) as ``on_restart(actor, failure, restarts)``.
        self.on_restart = on_restart
        self.restarts: collections.Counter[str] = collections.Counter()
        self._scopes: dict[str, trio.CancelScope] = {}
        self._injected: dict[str, BaseException] = {}

    @property
    def intensity(self) -> int:
        return self._window.intensity

    @property
    def period(self) -> float:
        return self._window.period

    @property
    def children(self) -> list[str]:
        return sorted(self._scopes)

    def crash(self, name: str, exc: BaseException | None = None) -> None:
        """Fault injection: make actor ``name`` fail with ``exc`` now (at its
        current checkpoint), as if its own code had raised it."""
        scope = self._scopes.get(name)
        if scope is None:
            raise KeyError(f"no running actor {name!r}; actors: {', '.join(self.children)}")
        self._injected[name] = exc or RuntimeError(f"fault injected into {name}")
        scope.cancel()

    async def supervise(
        self, spec: ChildSpec, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run ``spec`` until it returns or is cancelled, restarting it when it
        crashes. Start-up errors of the first incarnation propagate."""
        started = False
        while True:
            failure: BaseException | None = None
            scope = trio.CancelScope()
            self._scopes[spec.name] = scope
            try:
                with scope:
                    async with trio.open_nursery() as nursery:
                        await nursery.start(spec.run)
                        if not started:
                            started = True
                            task_status.started()
            except* Exception as group:
                failure = sole_exception(group)
            finally:
                if self._scopes.get(spec.name) is scope:
                    del self._scopes[spec.name]
            injected = self._injected.pop(spec.name, None)
            if failure is None and injected is not None and scope.cancelled_caught:
                failure = injected
            if failure is None:
                return
            if not started:
                raise failure
            self._record(spec.name, failure)

    def _record(self, name: str, failure: BaseException) -> None:
        if self._window.record_failure(trio.current_time()):
            log_event(
                log, logging.ERROR, "actor crashed again: restart intensity exceeded", actor=name
            )
            raise ActorFailed(name, self._window.failures, self.period) from failure
        self.restarts[name] += 1
        log_event(
            log,
            logging.WARNING,
            "actor crashed; restarting",
            actor=name,
            restart=self.restarts[name],
            error=f"{type(failure).__name__}: {failure}",
            exc_info=failure,
        )
        if self.on_restart is not None:
            self.on_restart(name, failure, self.restarts[name])


__all__: list[Any] = ["ActorRun", "ChildSpec", "Supervisor"]
