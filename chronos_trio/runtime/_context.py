"""What a handler knows about the job it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Unpack

import attrs
import trio

from ..records._attrs_methods import fields_repr
from ..records._errors import JobCancelled
from ..records._jobs import Job, LeasedJob
from ..records._notes import check_fraction, check_message, cut_line
from ..records._options import EnqueueOptions
from ..store import Store
from ._notes import NotesBuffer

if TYPE_CHECKING:
    from ._isolation_wire import ChildNote


class LeaseStatus(Protocol):
    """Whether the worker still holds a job's lease, until when on its own
    clock, and whether an abort was asked for the job (its in-flight entry)."""

    @property
    def lost(self) -> bool: ...

    @property
    def deadline(self) -> float: ...

    @property
    def abort_requested(self) -> bool: ...

    @property
    def leased(self) -> LeasedJob: ...


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

    __repr__ = fields_repr

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
    #: Where progress and log lines go until the noter writes them (None: a
    #: context made outside a worker; they go nowhere).
    _notes: NotesBuffer | None = None

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

    async def progress(self, fraction: float, message: str = "") -> None:
        """Report this run's progress: ``fraction`` done, a finite number
        from 0 to 1 (``4 / 10`` for "4 of 10"), and a short ``message`` (at
        most ``MAX_PROGRESS_MESSAGE`` = 200 characters). Only the latest
        report counts: the worker writes it at most every
        ``notes_interval`` (a tight loop of reports costs no store call
        each), and the last one before the job's outcome is settled. Read
        with ``handle.progress()``, ``python -m chronos_trio job ID``, the
        dashboard. A checkpoint; never blocks on the store.

        Raises ``ValueError`` for a fraction out of range (or not finite, or
        a bool) or a message too long, ``TypeError`` for a message that is
        not a str: nothing is reported then. On a store that keeps no notes
        it does nothing (the worker logs that once)."""
        self.progress_nowait(fraction, message)
        await trio.lowlevel.checkpoint()

    def progress_nowait(self, fraction: float, message: str = "") -> None:
        """:meth:`progress` without the checkpoint: for a plain-function
        handler (it runs in a thread, where it may call this one), or code
        that must not yield. Same checks and errors."""
        checked = check_fraction(fraction)
        text = check_message(message)
        if self._notes is not None:
            self._notes.progress(self._lease.leased.ref, checked, text)

    def log(self, line: str) -> None:
        """Append ``line`` to this job's log: kept with the job (its newest
        ``MAX_NOTE_LINES`` = 100 lines over all its attempts, each with its
        attempt and time), written with the progress, shown by
        ``python -m chronos_trio job ID`` and the dashboard. A line longer
        than ``MAX_LINE_CHARS`` = 500 characters is cut and ends with
        " [cut]". Never blocks; safe from a plain-function handler's
        thread. Raises ``TypeError`` for a line that is not a str. On a
        store that keeps no notes it does nothing (logged once)."""
        text = cut_line(line)
        if self._notes is not None:
            self._notes.log(self._lease.leased.ref, text)

    def take_note(self, note: ChildNote) -> None:
        """Report what an isolated handler's child sent (its ``job.progress``
        and ``job.log`` calls, already checked) as this run's own."""
        if note.progress is not None:
            self.progress_nowait(*note.progress)
        for line in note.lines:
            self.log(line)

    def check_cancelled(self) -> None:
        """Raise :class:`~chronos_trio.JobCancelled` if this run was called
        off: how a long plain-function handler stops cooperatively."""
        if self.cancelled:
            raise JobCancelled(f"job {self.job.id}: run called off")
