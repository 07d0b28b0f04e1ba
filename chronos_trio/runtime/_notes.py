"""The notes buffer: running jobs' progress and log lines, kept in the worker
until the ``noter`` actor writes them (``actors.noter``).

A handler's ``job.progress()`` and ``job.log()`` only change this buffer
(no store call, no await but a checkpoint): per job it keeps the latest
progress and the lines logged since the last write, so a handler that
reports progress in a tight loop costs a dictionary update per call. The
noter takes everything pending every ``notes_interval`` seconds and writes
it in one batch (one ``write_notes`` call for every job that changed), and
at once when an executor asks for a job's final flush (:meth:`NotesBuffer.
flush_for`, before the job's outcome goes to the completer), so a job's last
progress and lines are in the store before its settle.

One owner: the buffer is the only holder of pending notes. Handlers (in
Trio, or in a worker thread for plain-function handlers) add; the noter
takes, and puts back what a failed write did not write; executors ask for
a job's final flush. Adding and taking hold a lock (a handler thread may
add while the noter takes).

Bounds: a job's pending lines are at most ``MAX_NOTE_LINES`` (the newest;
more logged within one interval push the oldest out before they are
written, counted in :attr:`NotesStatistics.lines_cut`), each at most
``MAX_LINE_CHARS`` (cut by ``JobContext.log``).
"""

from __future__ import annotations

import collections
import logging
import threading

import attrs
import trio
from trio_util import AsyncValue

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._jobs import LeaseRef
from ..records._log import log_event
from ..records._notes import MAX_NOTE_LINES, NoteWrite, Progress
from ._events import NotesWritten

log = logging.getLogger("chronos_trio.worker")


@attrs.frozen
class NotesStatistics:
    """What a worker's notes buffer did: jobs' writes and what they carried
    (``progress`` updates and log ``lines`` the store took), writes the store
    refused (the lease was lost: dropped), lines pushed out before they
    were written (more than ``MAX_NOTE_LINES`` logged within one interval),
    calls made while the store has no notes (no-ops), and flushes (batches
    sent)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    progress: int = 0
    lines: int = 0
    refused: int = 0
    lines_cut: int = 0
    ignored: int = 0
    flushes: int = 0


def _lines() -> collections.deque[str]:
    return collections.deque(maxlen=MAX_NOTE_LINES)


@attrs.define
class _Pending:
    """One job's notes not yet written."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    ref: LeaseRef
    progress: Progress | None = None
    lines: collections.deque[str] = attrs.field(factory=_lines)


class NotesBuffer:
    """Pending notes of this worker's running jobs (see the module docstring).

    ``offered``: whether the store keeps notes (``NotesRole``); when it does
    not, every call is a no-op, logged once per worker.
    """

    def __init__(self, *, offered: bool) -> None:
        self.offered = offered
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        #: Jobs of the write under way (taken, not yet done).
        self._writing: frozenset[str] = frozenset()
        self._taken = 0
        #: How many takes are done (written, refused or failed).
        self._done = AsyncValue(0)
        self._hurry = trio.Event()
        #: Set when a job's notes arrive in an empty buffer (the noter sleeps
        #: on it while there is nothing to write: an idle worker, or one
        #: whose handlers report nothing, never ticks for notes).
        self._added = trio.Event()
        try:
            self._token: trio.lowlevel.TrioToken | None = trio.lowlevel.current_trio_token()
        except RuntimeError:  # made outside Trio (a Runtime's default)
            self._token = None
        self._trio_thread = threading.get_ident()
        self._warned = False
        self._stats = NotesStatistics()
        self._cut = 0

    # -- handlers -------------------------------------------------------------------
    def progress(self, ref: LeaseRef, fraction: float, message: str) -> None:
        """Keep ``fraction`` and ``message`` (checked) as the job's latest progress."""
        if not self.offered:
            self._ignored()
            return
        with self._lock:
            pending, first = self._entry(ref)
            pending.progress = Progress(fraction, message)
        if first:
            self._wake_noter()

    def log(self, ref: LeaseRef, line: str) -> None:
        """Append ``line`` (checked and cut) to the job's pending lines."""
        if not self.offered:
            self._ignored()
            return
        with self._lock:
            pending, first = self._entry(ref)
            if len(pending.lines) == MAX_NOTE_LINES:
                self._cut += 1
            pending.lines.append(line)
        if first:
            self._wake_noter()

    def _entry(self, ref: LeaseRef) -> tuple[_Pending, bool]:
        """The job's pending notes (made if none), and whether the buffer was
        empty (the noter is then woken). Called under the lock."""
        first = not self._pending
        pending = self._pending.get(ref.job_id)
        if pending is None:
            pending = self._pending[ref.job_id] = _Pending(ref)
        return pending, first

    def _wake_noter(self) -> None:
        """Notes arrived in an empty buffer: wake the noter (from a handler's
        thread, through the Trio token: thread-safe)."""
        if threading.get_ident() == self._trio_thread:
            self._added.set()
        elif self._token is not None:
            self._token.run_sync_soon(self._set_added)

    def _set_added(self) -> None:
        self._added.set()

    def _ignored(self) -> None:
        self._stats = attrs.evolve(self._stats, ignored=self._stats.ignored + 1)
        if not self._warned:
            self._warned = True
            log_event(
                log,
                logging.WARNING,
                "job.progress/job.log ignored: the store keeps no notes (NotesRole)",
            )

    # -- executors ------------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """Whether any job has notes not yet taken for a write."""
        return bool(self._pending)

    @property
    def active(self) -> bool:
        """Whether any job has notes not yet written (pending, or in the
        write under way). Read by the executors for every job: cheap."""
        return bool(self._pending) or bool(self._writing)

    def holds(self, job_id: str) -> bool:
        """Whether ``job_id`` has notes not yet written."""
        return job_id in self._pending or job_id in self._writing

    async def flush_for(self, job_id: str, timeout: float) -> None:
        """Return once the notes ``job_id`` has pending (or in a write under
        way) were written (or refused, or their write failed), asking the
        noter to write at once; or after ``timeout`` seconds (they are then
        written with a later batch, or refused once the job is settled)."""
        if job_id in self._pending:
            target = self._taken + 1
        elif job_id in self._writing:
            target = self._taken
        else:
            return
        self._hurry.set()
        with trio.move_on_after(timeout):
            await self._done.wait_value(lambda done: done >= target)

    def discard(self, job_id: str) -> None:
        """Forget ``job_id``'s pending notes (its lease was lost)."""
        with self._lock:
            self._pending.pop(job_id, None)

    # -- the noter --------------------------------------------------------------------
    async def wait_hurried(self) -> None:
        """Return once an executor asked for a final flush."""
        await self._hurry.wait()

    async def wait_pending(self) -> None:
        """Return once some job has notes to write (at once if one has)."""
        if not self._pending:
            await self._added.wait()

    def take(self) -> list[NoteWrite]:
        """Everything pending, as one write per job, and forget it (until
        :meth:`done`, its jobs are those of the write under way)."""
        with self._lock:
            taken, self._pending = self._pending, {}
            self._added = trio.Event()
        self._hurry = trio.Event()
        self._taken += 1
        self._writing = frozenset(taken)
        return [NoteWrite(p.ref, p.progress, tuple(p.lines)) for p in taken.values()]

    def done(self, writes: list[NoteWrite], refused: tuple[str, ...] | None) -> NotesWritten | None:
        """The write of the last :meth:`take` ended: ``refused`` the jobs the
        store refused (their notes are dropped), or None when the write
        failed (its notes are put back, before anything added since).
        Returns what the store took (None: the write failed)."""
        taken = None
        if refused is None:
            self._put_back(writes)
        else:
            gone = set(refused)
            written = [w for w in writes if w.lease.job_id not in gone]
            taken = NotesWritten(
                sum(w.progress is not None for w in written),
                sum(len(w.lines) for w in written),
                len(refused),
            )
            s = self._stats
            self._stats = attrs.evolve(
                s,
                progress=s.progress + taken.progress,
                lines=s.lines + taken.lines,
                refused=s.refused + taken.refused,
                flushes=s.flushes + 1,
            )
        self._writing = frozenset()
        self._done.value = self._taken
        return taken

    def _put_back(self, writes: list[NoteWrite]) -> None:
        with self._lock:
            for w in writes:
                later = self._pending.get(w.lease.job_id)
                back = self._pending[w.lease.job_id] = _Pending(w.lease, w.progress)
                back.lines.extend(w.lines)
                if later is not None:
                    back.progress = later.progress or w.progress
                    back.lines.extend(later.lines)

    def statistics(self) -> NotesStatistics:
        return attrs.evolve(self._stats, lines_cut=self._cut)
