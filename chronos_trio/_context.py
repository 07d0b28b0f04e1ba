"""What a handler knows about the job it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._job import Job

if TYPE_CHECKING:
    from ._app import App


@attrs.define(eq=False)
class JobContext:
    """Passed to every handler next to its payload.

    ``deadline`` is on Trio's clock (compare with ``trio.current_time()``); the
    handler is cancelled there. ``lease_lost`` turns True when the worker lost
    the lease (another worker may now run the job); the handler is cancelled
    too, so it only matters to cleanup code.
    """

    job: Job
    worker_id: str
    deadline: float
    app: App
    _lease_lost: bool = False

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
        return self._lease_lost

    def mark_lease_lost(self) -> None:
        self._lease_lost = True
