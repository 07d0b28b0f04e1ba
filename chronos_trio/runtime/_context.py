"""What a handler knows about the job it runs."""

from __future__ import annotations

from typing import Any, Protocol, Unpack

import attrs

from ..records._jobs import EnqueueResult, Job
from ..records._options import EnqueueOptions
from ..store import Store


class LeaseStatus(Protocol):
    """Whether the worker still holds a job's lease (its in-flight entry)."""

    @property
    def lost(self) -> bool: ...


class Producer(Protocol):
    """What a handler can reach through ``job.app``: the store, and
    ``enqueue`` by kind (to start follow-up jobs). The App is one."""

    @property
    def store(self) -> Store: ...

    async def enqueue(
        self, kind: str, payload: Any, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult: ...


@attrs.define(eq=False)
class JobContext:
    """Passed to every handler next to its payload.

    ``deadline`` is on Trio's clock (compare with ``trio.current_time()``); the
    handler is cancelled there. ``lease_lost`` turns True when the worker lost
    the lease (another worker may now run the job); the handler is cancelled
    too, so it only matters to cleanup code. ``app`` is the App the worker
    runs for (``await job.app.enqueue("kind", payload)``).
    """

    job: Job
    worker_id: str
    deadline: float
    app: Producer
    _lease: LeaseStatus

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry, ..."""
        return self.job.attempts

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def lease_lost(self) -> bool:
        return self._lease.lost
