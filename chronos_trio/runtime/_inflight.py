"""The worker's table of leases it holds, and the stage each one is at.

The table belongs to the worker, not to any actor, so when an actor dies its
work is not forgotten: the restarted actor picks up the entries of the stages
it owns (see each actor's start-up). A slot is taken when a job is leased and
given back only when its outcome reached the store (or the lease was lost),
which is what bounds the in-flight work.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator

import attrs
import trio

from ..records._jobs import LeasedJob
from ..store import Settlement
from ._context import JobContext


class Stage(enum.Enum):
    LEASED = "leased"  # leased by the leaser, not yet handed to executors
    QUEUED = "queued"  # in the worker's leased-job channel
    RUNNING = "running"  # an executor runs its handler
    DONE = "done"  # outcome decided, being handed to the completer
    SETTLING = "settling"  # the completer holds it and is writing it to the store


@attrs.define(eq=False)
class Entry:
    leased: LeasedJob
    stage: Stage = Stage.LEASED
    outcome: Settlement | None = None  # None with stage DONE: lease lost, just forget it
    cancel_scope: trio.CancelScope | None = None
    context: JobContext | None = None
    lost: bool = False

    @property
    def token(self) -> str:
        return self.leased.token

    def mark_lost(self) -> None:
        """The lease is gone: cancel the handler if it runs."""
        self.lost = True
        if self.context is not None:
            self.context.mark_lease_lost()
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()


class InFlight:
    """Leases held by this worker, keyed by fencing token, capped at ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: dict[str, Entry] = {}
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, token: str) -> Entry | None:
        return self._entries.get(token)

    @property
    def free(self) -> int:
        return max(0, self.capacity - len(self._entries))

    def add(self, leased: LeasedJob) -> Entry:
        entry = Entry(leased)
        self._entries[leased.token] = entry
        return entry

    def remove_many(self, tokens: list[str]) -> None:
        """Remove a settled batch, waking waiters once (not once per job)."""
        removed = [self._entries.pop(t, None) for t in tokens]
        if any(e is not None for e in removed):
            self._notify()

    def in_stage(self, *stages: Stage) -> list[Entry]:
        return [e for e in self._entries.values() if e.stage in stages]

    def count(self, *stages: Stage) -> int:
        return sum(1 for e in self._entries.values() if e.stage in stages)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_free(self) -> None:
        """Until at least one slot is free."""
        while not self.free:
            await self._changed.wait()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate()`` is true (re-checked after every removal)."""
        while not predicate():
            await self._changed.wait()
