"""What a handler knows about the job it runs."""

from __future__ import annotations

from typing import Any, Protocol, Unpack

import attrs
import trio

from ..records._errors import JobCancelled
from ..records._jobs import Job
from ..records._options import EnqueueOptions
from ..store import Store


class LeaseStatus(Protocol):
    """Whether the worker still holds a job's lease, until when on its own
    clock, and whether an abort was asked for the job (its in-flight entry)."""

    @property
    def lost(self) -> bool: ...

    @property
    def deadline(self) -> float: ...

    @property
    def abort_requested(self) -> bool: ...


class Producer(Protocol):
    """What a handler can reach through ``job.app``: the store, and
    ``enqueue`` by kind (to start follow-up jobs). The App is one."""

    @property
    def store(self) -> Store: ...

    async def enqueue(self, kind: str, payload: Any, **options: Unpack[EnqueueOptions]) -> Any:
        """A job handle (the App's ``JobHandle``: the fields of an
        EnqueueResult, and ``status()``/``result()``)."""


@attrs.define(eq=False)
class JobContext:
    """Passed to every handler next to its payload.

    ``deadline`` is on Trio's clock (compare with ``trio.current_time()``); the
    handler is cancelled there (a plain-function handler's timeout counts
    from when its thread starts: ``deadline`` is set then). ``lease_lost``
    turns True when the worker lost the lease (another worker may now run
    the job); the handler is cancelled too, so it only matters to cleanup
    code. ``abort_requested`` likewise
    turns True, just before the handler is cancelled, when an abort of the
    job reached this worker. ``app`` is the App the worker
    runs for (``await job.app.enqueue("kind", payload)``). ``lifespan`` is
    what the app's lifespan yielded for this worker process (a DB pool, an
    HTTP client; None without one).

    A plain-function handler runs in a worker thread and cannot be
    interrupted there: it may read :attr:`cancelled` or call
    :meth:`check_cancelled` to stop once its run was called off.
    """

    job: Job
    worker_id: str
    deadline: float
    app: Producer
    _lease: LeaseStatus
    lifespan: Any = None
    _scope: trio.CancelScope | None = None
    #: Set by the executor for a handler in a worker thread: the scope may
    #: not be read there, so the executor tells the thread with this flag.
    _in_thread: bool = False
    _called_off: bool = False
    #: Whether the lease had ended on the worker's clock when the run was
    #: called off (what a thread reads: it cannot read Trio's clock).
    _lease_ended: bool = False

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
    def redis(self) -> Any:
        """The worker's own Redis connections for this handler's commands
        (``await job.redis.execute("INCR", "hits")``; a
        :class:`~chronos_trio.store.redis.RedisCommands`): pooled, never
        blocking the event loop, with the store's timeouts and errors.
        Raises TypeError when the app's store is not a Redis store."""
        commands = getattr(self.app.store, "commands", None)
        if commands is None:
            raise TypeError(
                f"job.redis needs a Redis store; this app's store is a "
                f"{type(self.app.store).__name__}"
            )
        return commands()

    @property
    def headers(self) -> dict[str, str]:
        """The metadata its producer attached (``headers=``, producer hooks):
        a new dict on each read."""
        return dict(self.job.headers)

    @property
    def lease_lost(self) -> bool:
        """True once the worker gave up the job's lease: the store refused
        to renew it (the job was recovered, taken or deleted elsewhere), or
        it ended on the worker's clock before a renewal got through. Safe to
        read from the handler's thread."""
        lease = self._lease
        if lease.lost:
            return True
        if self._in_thread:
            return self._lease_ended
        return trio.current_time() >= lease.deadline

    @property
    def abort_requested(self) -> bool:
        """True once an abort of this job (``handle.abort()``,
        ``Inspector.abort``, ``python -m chronos_trio abort``) reached this
        worker, with a lease renewal: at most one heartbeat after it was
        asked. It turns True before the run is cancelled, so cleanup code
        (``finally``, ``except trio.Cancelled``) can tell an abort from a
        timeout or a shutdown. Safe to read from the handler's thread."""
        return self._lease.abort_requested

    @property
    def cancelled(self) -> bool:
        """True once this run was called off (timeout, lost lease, abort, or
        a shutdown past its grace). Safe to read from the handler's thread."""
        if self._in_thread:
            return self._called_off
        scope = self._scope
        return scope is not None and scope.cancel_called

    def call_off(self) -> None:
        """The executor's note that this run was called off (for a handler
        in a worker thread, which cannot see the cancel scope or Trio's
        clock). Called from Trio's thread."""
        self._lease_ended = trio.current_time() >= self._lease.deadline
        self._called_off = True

    def check_cancelled(self) -> None:
        """Raise :class:`~chronos_trio.JobCancelled` if this run was called
        off: how a long plain-function handler stops cooperatively."""
        if self.cancelled:
            raise JobCancelled(f"job {self.job.id}: run called off")
