"""The in-flight table: the leases one worker holds, and the one owner of
every move each of them makes.

A slot is taken when a job is leased and given back only when its outcome
reached the store (or there was nothing left to write), which is what bounds
the work in flight. The table belongs to the worker, not to any actor, so
when an actor dies its work is not forgotten: the restarted actor picks up
the entries of the stages it owns.

Stages, and the only legal moves (anything else raises
:class:`IllegalTransition`)::

   admit> LEASED -dispatch> QUEUED -start> RUNNING -decide> DECIDED -claim> SETTLING -settled> gone
             |                |               |                 ^
             +----------------+---------------+---- release ----+   (shutdown, crashed executors)

``lost`` is a flag, not a stage: the store refused to renew the lease
(another worker may hold the job now), or the lease reached its
``deadline`` on this worker's clock before a renewal got through. It
cancels a running handler; a lost entry that has not run is decided with
nothing to write (an outcome decided before the loss is still sent: the
store's fence judges it).

Each entry's ``deadline`` is enforced by the cancel scope of the handler
that runs it, not by any actor: while an entry is RUNNING its executor's
scope has the lease deadline as its own (armed when the handler starts,
moved by each renewal), so Trio cancels the handler when the lease ends on
this worker's clock, whatever the store calls meant to renew it are doing
(hung on a dead link, say). Trio expires deadlines before it runs any task
of a scheduling round, so even after a pause (SIGSTOP, a stalled host) a
handler blocked at a checkpoint runs no code past the deadline but its
cleanup, and one that was woken in that same round (its I/O became ready)
is cancelled at its next checkpoint. Deadlines are quantized
(:func:`lease_deadline`), so consecutive jobs on one executor almost always
share one and arming it costs a float comparison, not a deadline
registration per job.

``abort_requested`` is a flag too: a renewal reported that an abort was
asked for the job. It cancels a running handler the same way, and the
outcome written is ABORTED; an entry that has not run is decided ABORTED
without running; an outcome decided before the flag came stands (the store
makes a retry or a release of a flagged job aborted itself).

The table also owns the two queues between actors, so an entry's stage and
its place in a queue can never disagree: the run queue (QUEUED entries,
FIFO, at most ``queue_capacity``) that executors take from, and the decided
queue (DECIDED entries) that the completer claims in batches.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import trio

from ..records._jobs import LeasedJob, abort_error
from ..store import SettleKind, Settlement

#: Fraction of a lease this worker gives up early: its clock may run a
#: little slower than the store's, so it must stop using a lease before the
#: store hands it to another worker.
LEASE_SAFETY_MARGIN = 0.05

#: Lease deadlines are rounded down to a multiple of this fraction of the
#: lease, so the leases of consecutive batches share one deadline and an
#: executor rarely has to move its scope's (see the module docstring): a
#: worker gives a lease up between 5% and 6% of it early.
LEASE_DEADLINE_STEP = 0.01


def lease_deadline(asked_at: float, lease_duration: float) -> float:
    """Until when a lease asked for (or renewed) at ``asked_at`` on Trio's
    clock is this worker's: ``lease_duration`` less the safety margin,
    counted from when it was asked (the store counts from when it received
    the request, which is later), rounded down to a multiple of
    ``LEASE_DEADLINE_STEP * lease_duration``."""
    step = lease_duration * LEASE_DEADLINE_STEP
    return math.floor((asked_at + lease_duration * (1 - LEASE_SAFETY_MARGIN)) / step) * step


class Stage(enum.Enum):
    LEASED = "leased"  # leased, not yet in the run queue
    QUEUED = "queued"  # in the run queue, waiting for an executor
    RUNNING = "running"  # an executor runs its handler
    DECIDED = "decided"  # outcome decided, waiting for the completer
    SETTLING = "settling"  # the completer is writing the outcome to the store


class IllegalTransition(RuntimeError):
    """A move the in-flight table does not allow (a bug in the runtime)."""


class Entry:
    """One lease this worker holds. Only :class:`InFlight` changes it;
    everyone else reads it."""

    __slots__ = (
        "abort_requested",
        "admitted_at",
        "cancel_scope",
        "deadline",
        "decided_at",
        "handovers",
        "leased",
        "lost",
        "outcome",
        "stage",
        "started_at",
    )

    def __init__(self, leased: LeasedJob, deadline: float = math.inf) -> None:
        self.leased = leased
        #: When this worker must consider the lease gone, on Trio's clock:
        #: a little before the store's expiry, counted from when the lease
        #: (or its last renewal) was asked for. Past it the worker starts
        #: nothing more on the lease, its running handler is cancelled (its
        #: scope has this deadline), and no renewal extends it any more.
        self.deadline = deadline
        self.stage = Stage.LEASED
        #: What the completer writes; None once decided means nothing to
        #: write (the lease was lost).
        self.outcome: Settlement | None = None
        self.lost = False
        #: An abort was asked for the job (a renewal said so): its run is
        #: called off and its outcome is ABORTED.
        self.abort_requested = False
        #: The scope its handler runs in, while RUNNING (a lost lease cancels it).
        self.cancel_scope: trio.CancelScope | None = None
        #: Trio-clock times the handler started and its outcome was decided.
        self.started_at: float | None = None
        self.decided_at: float | None = None
        #: Trio-clock time the lease was asked for (``admit``'s
        #: ``asked_at``): with the store's expiry, it puts the handler's
        #: start on the store's clock (metrics; one round trip early).
        self.admitted_at: float | None = None
        #: How many links of its chain in a row this worker was handed by
        #: its own settles, this one included (0: leased as any job is).
        self.handovers = 0

    @property
    def token(self) -> str:
        return self.leased.token

    def __repr__(self) -> str:
        lost = " lost" if self.lost else ""
        aborting = " aborting" if self.abort_requested else ""
        return f"<Entry {self.leased.job.id} {self.stage.value}{lost}{aborting}>"


class InFlight:
    """Leases held by this worker, keyed by fencing token, at most ``capacity``."""

    def __init__(
        self,
        capacity: int,
        queue_capacity: int,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if capacity < 1 or queue_capacity < 1:
            raise ValueError("capacity and queue_capacity must be >= 1")
        #: Times handlers start and outcomes are decided (Trio's clock).
        self._clock = clock
        self.capacity = capacity
        self.queue_capacity = queue_capacity
        self._entries: dict[str, Entry] = {}
        self._run_queue: deque[Entry] = deque()
        self._decided: deque[Entry] = deque()
        self._running = 0
        #: Set by :meth:`release_unstarted` (shutdown): nothing starts any more.
        self.draining = False
        # Wake-ups, each created only while someone waits (the hot path pays
        # one attribute test per move when nobody does).
        self._queued_waiter: trio.Event | None = None
        self._room_waiter: trio.Event | None = None
        self._decided_waiter: trio.Event | None = None
        self._change_waiter: trio.Event | None = None

    # -- reading ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, token: str) -> Entry | None:
        return self._entries.get(token)

    @property
    def free(self) -> int:
        """Slots left for new leases."""
        return max(0, self.capacity - len(self._entries))

    @property
    def running(self) -> int:
        """Handlers running now."""
        return self._running

    @property
    def queued(self) -> int:
        """Entries in the run queue."""
        return len(self._run_queue)

    def running_job_ids(self, limit: int) -> list[str]:
        """The job IDs of the running handlers, at most ``limit`` of them
        (the worker registry's beat reads them; a read, never a copy kept)."""
        out: list[str] = []
        for entry in self._entries.values():
            if len(out) >= limit:
                break
            if entry.stage is Stage.RUNNING:
                out.append(entry.leased.job.id)
        return out

    def in_stage(self, *stages: Stage) -> list[Entry]:
        return [e for e in self._entries.values() if e.stage in stages]

    def count(self, *stages: Stage) -> int:
        return sum(1 for e in self._entries.values() if e.stage in stages)

    # -- leaser -----------------------------------------------------------------
    def admit(
        self,
        batch: Sequence[LeasedJob],
        deadline: float = math.inf,
        asked_at: float | None = None,
    ) -> list[Entry]:
        """Take a slot for each newly leased job (LEASED), each held until
        ``deadline`` on Trio's clock unless renewed. While draining they are
        released at once, so a lease that arrives during shutdown goes
        straight back. Raises if the batch does not fit or a token repeats."""
        if len(batch) > self.free:
            raise IllegalTransition(f"{len(batch)} leases do not fit in {self.free} free slot(s)")
        entries = []
        for leased in batch:
            if leased.token in self._entries:
                raise IllegalTransition(f"lease token {leased.token!r} is already held")
            entry = Entry(leased, deadline)
            entry.admitted_at = asked_at
            self._entries[leased.token] = entry
            entries.append(entry)
        if self.draining:
            for entry in entries:
                self._release(entry)
        return entries

    def dispatch_nowait(self, entry: Entry) -> bool:
        """LEASED -> QUEUED at the end of the run queue; False (and no change)
        when the run queue is full. An entry released meanwhile (shutdown)
        is skipped and counts as done."""
        if entry.stage is not Stage.LEASED:
            if entry.stage is Stage.DECIDED and self.draining:
                return True
            self._illegal(entry, Stage.QUEUED)
        if len(self._run_queue) >= self.queue_capacity:
            return False
        entry.stage = Stage.QUEUED
        self._run_queue.append(entry)
        if self._queued_waiter is not None:
            self._queued_waiter.set()
            self._queued_waiter = None
        return True

    async def wait_queue_room(self) -> None:
        """Until the run queue has room for one more entry."""
        while len(self._run_queue) >= self.queue_capacity:
            if self._room_waiter is None:
                self._room_waiter = trio.Event()
            await self._room_waiter.wait()

    # -- executors --------------------------------------------------------------
    def start_next_nowait(self, scope: trio.CancelScope) -> Entry | None:
        """QUEUED -> RUNNING for the first entry of the run queue, its handler
        to run in ``scope``, which gets the lease's deadline as its own
        (and keeps it until the next start); None when the queue is empty.
        Entries whose
        lease was lost meanwhile are decided with nothing to write, those
        an abort was asked for are decided ABORTED, and while draining
        entries are released instead of started."""
        queue = self._run_queue
        while queue:
            entry = queue.popleft()
            if self._room_waiter is not None:
                self._room_waiter.set()
                self._room_waiter = None
            if entry.deadline <= self._clock():
                entry.lost = True  # past its deadline: the store may have it back
            if entry.lost:
                self._decide(entry, None)
            elif entry.abort_requested:
                self._decide(entry, _aborted(entry))
            elif self.draining:
                self._release(entry)
            else:
                entry.stage = Stage.RUNNING
                entry.cancel_scope = scope
                # The lease ends the run on its own (see the module
                # docstring); the deadline is usually the one the scope has.
                if scope.deadline != entry.deadline:
                    scope.deadline = entry.deadline
                entry.started_at = self._clock()
                self._running += 1
                return entry
        return None

    async def wait_queued(self) -> None:
        """Until the run queue may hold an entry (spurious returns allowed)."""
        if self._run_queue:
            return
        if self._queued_waiter is None:
            self._queued_waiter = trio.Event()
        await self._queued_waiter.wait()

    def decide(self, entry: Entry, outcome: Settlement | None) -> None:
        """RUNNING -> DECIDED with ``outcome`` (None: the lease was lost,
        nothing to write); the completer will claim it."""
        if entry.stage is not Stage.RUNNING:
            self._illegal(entry, Stage.DECIDED)
        self._running -= 1
        self._decide(entry, outcome)

    def release_running(self) -> int:
        """RUNNING -> DECIDED (release) for every entry whose handler no
        longer runs because the executors stopped (crash, or shutdown past
        its grace): back to ready without counting the attempt."""
        running = [e for e in self._entries.values() if e.stage is Stage.RUNNING]
        for entry in running:
            self._running -= 1
            self._release(entry)
        return len(running)

    # -- completer ----------------------------------------------------------------
    async def wait_decided(self) -> None:
        """Until at least one entry is DECIDED and unclaimed."""
        while not self._decided:
            if self._decided_waiter is None:
                self._decided_waiter = trio.Event()
            await self._decided_waiter.wait()

    def claim_decided(self, limit: int) -> list[Entry]:
        """DECIDED -> SETTLING for up to ``limit`` entries, oldest first."""
        batch: list[Entry] = []
        decided = self._decided
        while decided and len(batch) < limit:
            entry = decided.popleft()
            entry.stage = Stage.SETTLING
            batch.append(entry)
        return batch

    def settled(self, batch: list[Entry]) -> None:
        """SETTLING -> gone: their outcomes reached the store (or were
        refused by its fence); the slots are free again. Wakes waiters once."""
        entries = self._entries
        for entry in batch:
            if entry.stage is not Stage.SETTLING or entries.get(entry.token) is not entry:
                self._illegal(entry, None)
        for entry in batch:
            del entries[entry.token]
            entry.cancel_scope = None
        self._changed()

    # -- heartbeater ----------------------------------------------------------------
    def renewed(self, entry: Entry, deadline: float) -> None:
        """The store extended ``entry``'s lease; this worker holds it until
        ``deadline``, and so may its running handler. A lease already lost
        stays lost, and so does one whose deadline passed: its handler may
        have been cancelled for it already, and a renewal that comes back
        after the lease ended on this worker's clock is too late to trust."""
        if entry.lost or deadline <= entry.deadline or entry.deadline <= self._clock():
            return
        entry.deadline = deadline
        if entry.cancel_scope is not None:  # RUNNING: its scope enforces the lease
            entry.cancel_scope.deadline = deadline

    def overdue(self) -> list[Entry]:
        """Held entries past their deadline and not yet marked lost (their
        renewals did not get through in time: a pause, a partition)."""
        now = self._clock()
        return [
            e
            for e in self._entries.values()
            if e.deadline <= now and not e.lost and e.stage is not Stage.SETTLING
        ]

    def renewable(self) -> list[Entry]:
        """Entries whose leases should be renewed: held, not lost, and not
        being settled (a settle in flight ends the lease itself)."""
        return [e for e in self._entries.values() if not e.lost and e.stage is not Stage.SETTLING]

    def mark_lost(self, entry: Entry) -> bool:
        """``entry``'s lease is gone (the store refused to renew it, or it
        ended on this worker's clock): flag it and cancel its handler if
        one runs. False (and nothing changes) when it no
        longer needs the lease: settling or settled (a settle that applied
        ends the lease, which is why the renewal was refused), or already lost."""
        if entry.lost or entry.stage is Stage.SETTLING:
            return False
        if self._entries.get(entry.token) is not entry:
            return False
        entry.lost = True
        # A decided outcome is still sent: the store's fence, not this
        # process's belief, decides whether it applies.
        if entry.cancel_scope is not None:
            entry.cancel_scope.cancel()
        return True

    def mark_aborted(self, entry: Entry) -> bool:
        """A renewal reported that an abort was asked for ``entry``'s job:
        flag it, then cancel its handler if one runs (the executor decides
        ABORTED); one waiting in the run queue is decided ABORTED at once,
        one not yet queued when it is started. False (and nothing changes)
        when it was flagged already, is lost, or is past running (decided,
        settling or settled: its outcome stands)."""
        if entry.abort_requested or entry.lost:
            return False
        if self._entries.get(entry.token) is not entry:
            return False
        if entry.stage not in (Stage.LEASED, Stage.QUEUED, Stage.RUNNING):
            return False
        # Set before the cancel: cleanup code in the handler can see why.
        entry.abort_requested = True
        if entry.stage is Stage.RUNNING:
            if entry.cancel_scope is not None:
                entry.cancel_scope.cancel()
        elif entry.stage is Stage.QUEUED:
            self._run_queue.remove(entry)
            if self._room_waiter is not None:
                self._room_waiter.set()
                self._room_waiter = None
            self._decide(entry, _aborted(entry))
        return True

    # -- shutdown ----------------------------------------------------------------
    def release_unstarted(self) -> int:
        """Shutdown: LEASED and QUEUED -> DECIDED (release), so jobs that have
        not started go back to ready at once, and from now on nothing starts
        (late leases are released on admission). Returns how many."""
        self.draining = True
        unstarted = [e for e in self._entries.values() if e.stage in (Stage.LEASED, Stage.QUEUED)]
        self._run_queue.clear()
        for entry in unstarted:
            self._release(entry)
        if self._room_waiter is not None:
            self._room_waiter.set()
            self._room_waiter = None
        return len(unstarted)

    def unsettled(self) -> list[Settlement]:
        """What is left to write when the completer could not (exit): each
        decided outcome, and a release for every lease not yet decided."""
        out: list[Settlement] = []
        for entry in self._entries.values():
            if entry.stage in (Stage.DECIDED, Stage.SETTLING):
                if entry.outcome is not None:
                    out.append(entry.outcome)
            elif entry.abort_requested and not entry.lost:
                out.append(_aborted(entry))
            elif not entry.lost:
                out.append(Settlement(entry.leased.ref, SettleKind.RELEASE))
        return out

    def forget_all(self) -> None:
        """Drop every entry (their outcomes were written directly, or their
        leases will expire and be recovered)."""
        self._entries.clear()
        self._run_queue.clear()
        self._decided.clear()
        self._running = 0
        self._changed()

    # -- waiting ------------------------------------------------------------------
    async def wait_free(self) -> None:
        """Until at least one slot is free."""
        while not self.free:
            await self._wait_change()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate()`` is true (re-checked after every settle and
        every decided outcome)."""
        while not predicate():
            await self._wait_change()

    async def _wait_change(self) -> None:
        if self._change_waiter is None:
            self._change_waiter = trio.Event()
        await self._change_waiter.wait()

    def _changed(self) -> None:
        if self._change_waiter is not None:
            self._change_waiter.set()
            self._change_waiter = None

    # -- internal moves ------------------------------------------------------------
    def _decide(self, entry: Entry, outcome: Settlement | None) -> None:
        entry.stage = Stage.DECIDED
        entry.outcome = outcome
        entry.cancel_scope = None
        entry.decided_at = self._clock()
        self._decided.append(entry)
        if self._decided_waiter is not None:
            self._decided_waiter.set()
            self._decided_waiter = None
        if self._change_waiter is not None:
            self._changed()

    def _release(self, entry: Entry) -> None:
        # A lost lease has nothing to give back: the store took it already.
        outcome = None if entry.lost else Settlement(entry.leased.ref, SettleKind.RELEASE)
        if outcome is not None and entry.abort_requested:
            outcome = _aborted(entry)  # an aborted job is not run again
        self._decide(entry, outcome)

    def _illegal(self, entry: Entry, target: Stage | None) -> None:
        where = "gone" if target is None else target.value
        raise IllegalTransition(f"job {entry.leased.job.id}: {entry.stage.value} -> {where}")


def _aborted(entry: Entry) -> Settlement:
    """The outcome of a run an abort called off (the store records the
    abort's own text as the job's last error)."""
    return Settlement(entry.leased.ref, SettleKind.ABORTED, error=abort_error())
