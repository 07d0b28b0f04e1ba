"""The values the store protocol (:mod:`chronos_trio.store._roles`) takes and
returns: settlements and queue weights in, and out one frozen result per
operation that says all it did (:class:`LeaseResult`, :class:`RenewResult`,
:class:`SettleResult`, :class:`CountResult`, :class:`PromoteResult`,
:class:`RecoverResult`), what an operation set aside (:class:`SetAside`),
queue statistics and topology, leadership. The store checker's findings
live in ``_check_results``, loaded on first use.

Every value here is immutable; the role ABCs that use them stay in
``_roles``."""

from __future__ import annotations

import enum

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._jobs import Job, JobState, LeasedJob, LeaseRef, NewJob


class SettleKind(enum.StrEnum):
    """How a worker finishes a lease."""

    SUCCEEDED = "succeeded"  # done; dropped, or retained for ``retain_for`` seconds
    RETRY = "retry"  # failed; run again ``retry_delay`` seconds from the store's now
    DEAD = "dead"  # failed for good: dead-letter it
    RELEASE = "release"  # not run (shutdown): back to ready at once, attempt not counted
    DISCARD = "discard"  # failed for good, and not kept: deleted instead of dead-lettered
    #: the handler raised RateLimited: retry_wait for ``retry_delay`` seconds,
    #: attempt not counted, and the job's rate limits held back as long
    DEFER = "defer"
    ABORTED = "aborted"  # an abort was asked (renew said so): aborted, never run again
    #: the worker has no handler for the job's kind: retry_wait for
    #: ``retry_delay`` seconds, attempt not counted, for a worker that has
    #: one; dead (with ``error``) once it has gone back unclaimed for
    #: ``unclaimed_grace`` seconds (see :meth:`WorkerRole.settle`)
    UNCLAIMED = "unclaimed"


class AbortResult(enum.StrEnum):
    """What :meth:`AdminRole.abort` did."""

    ABORTED = "aborted"  # it was waiting (scheduled, ready, retry_wait): aborted at once
    FLAGGED = "flagged"  # it is leased: flagged; its worker's next renewal is told
    FINISHED = "finished"  # it had finished already (succeeded, dead, aborted): nothing changed
    NOT_FOUND = "not_found"  # no such job: nothing changed


@attrs.frozen
class Successor:
    """A chain link's next step, handed to the success settle of the link
    (:attr:`Settlement.successor`): the one job its continuation makes now
    (computed by the worker with ``records._workflow.chain_successor``),
    and the workflow it belongs to (None: a continuation that carries none)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: NewJob
    workflow: str | None = None
    #: The settling worker's ID when it asks to be handed the successor
    #: leased (``""``: never). A store that ``leases_in_settle`` then stores
    #: the successor already leased to that worker, for ``lease_duration``
    #: seconds under a fresh fencing token, in the same atomic step (what
    #: it did is in :attr:`SettleResult.leased`); any other store, or a
    #: successor it does not create now (its ID taken, the outbox path),
    #: ignores it. The worker asks only while it has a handler for the
    #: successor's kind, consumes its queue and is not stopping: the
    #: predecessor's in-flight slot, held until the reply, is the
    #: successor's.
    lease_to: str = ""
    lease_duration: float = 0.0


@attrs.frozen
class Settlement:
    """One lease's outcome, fenced by ``lease.token``."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    lease: LeaseRef
    kind: SettleKind
    error: str = ""
    retry_delay: float = 0.0
    retain_for: float = 0.0
    #: SUCCEEDED only: the encoded result to keep for ``result_ttl`` seconds
    #: (None, or a ttl of 0: nothing is kept).
    result: bytes | None = None
    result_ttl: float = 0.0
    #: UNCLAIMED only: how long (s, store clock) the job may keep going back
    #: unclaimed before this settle dead-letters it instead.
    unclaimed_grace: float = 0.0
    #: Any kind but SUCCEEDED: when the attempt's lease was granted (store
    #: clock; ``LeasedJob.leased_at``), kept in the job's attempt history
    #: (``records._attempts``); None: not known.
    started: float | None = None
    #: SUCCEEDED of a chain link only: the one job its continuation makes
    #: next. A store that continues chains in its settle
    #: (``continues_in_settle``) may enqueue it in the same atomic step
    #: instead of writing an outbox entry (then the index is in
    #: :attr:`SettleResult.continued`); any other store, or case, ignores
    #: it and writes the outbox entry as ever. None: nothing to hand over.
    successor: Successor | None = None


@attrs.frozen
class QueueWeight:
    """A queue a worker consumes, with its share of each lease batch."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    weight: int = 1


# -- what an operation set aside ---------------------------------------------------------
@attrs.frozen
class AsideEntry:
    """One job an operation did not apply to and did not dead-letter: an
    index entry without a usable record (quarantined), or a record of a newer
    format (left alone). ``reason`` says which."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    job_id: str
    reason: str


@attrs.frozen
class SetAside:
    """What one store operation met and set aside instead of applying, so the
    rest of its batch could proceed (empty, and false, when nothing was).

    * ``dead``: damaged records it dead-lettered: a field the operation needs
      was missing, empty or unreadable. Each is the job as now stored (state
      dead, ``last_error`` "damaged record: <field and value>", and
      ``damage`` saying what its decoder found). A worker logs each, counts
      it as dead and publishes ``JobDead`` for it.
    * ``quarantined``: index entries with no record behind them (or a key
      that is not a job record), taken out of the index and listed in the
      store's quarantine for the checker and inspector. A worker logs them.
    * ``newer``: records of a newer record format, left exactly as they are
      for a newer worker. A worker warns and counts them; it meets the same
      records again on later calls while they wait, so warn once per job.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    dead: tuple[Job, ...] = ()
    quarantined: tuple[AsideEntry, ...] = ()
    newer: tuple[AsideEntry, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.dead or self.quarantined or self.newer)

    def __add__(self, other: SetAside) -> SetAside:
        if not other:
            return self
        if not self:
            return other
        return SetAside(
            self.dead + other.dead,
            self.quarantined + other.quarantined,
            self.newer + other.newer,
        )


#: The empty report (shared: a SetAside is immutable).
NOTHING_SET_ASIDE = SetAside()


# -- what each operation did -------------------------------------------------------------
# One frozen result per call, saying everything the operation did. The fields
# a backend must decide have no default, so a backend that forgets one fails
# to type-check instead of silently breaking flow control, aborts or the
# reporting of damaged records.


@attrs.frozen
class LeaseResult:
    """What :meth:`WorkerRole.lease` did.

    * ``jobs``: the leased jobs, in the order the store leased them (oldest
      due first within a queue), each complete and held by the caller until
      its ``expires_at``. Empty when nothing was leased.
    * ``aside``: what the lease met and set aside instead of leasing (see
      :class:`SetAside`); each was replaced by the next ready job.
    * ``expired``: jobs it dead-lettered instead of leasing because their
      flow-control ``expires_at`` had passed (state dead, ``last_error``
      "expired: ..."); a worker counts each as dead and publishes ``JobDead``.
    * ``held_for``: seconds from the lease until the next permit of a rate
      limit that held a ready job back (>= 0), or None when no rate limit
      held one: the leaser sleeps that long instead of polling.
    * ``capped``: True when a ready job was held back by a concurrency limit
      at its limit: a slot comes back with a settle or a lease's expiry, so
      the leaser waits for a wake-up (``wait_ready(held=True)``) rather than
      looking again at once.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    jobs: tuple[LeasedJob, ...]
    aside: SetAside
    expired: tuple[Job, ...]
    held_for: float | None
    capped: bool


#: A lease that leased, met and held back nothing (shared: it is immutable).
NOTHING_LEASED = LeaseResult((), NOTHING_SET_ASIDE, (), None, False)


@attrs.frozen
class RenewResult:
    """What :meth:`WorkerRole.renew` did.

    * ``renewed``: one bool per lease, in the order given: True when the
      lease was extended; False when it is no longer held with that token
      (nothing changed), or its record was set aside (then it is in
      ``aside`` too).
    * ``aside``: what the renewal set aside (see :class:`SetAside`): a held
      lease's record that was damaged (dead-lettered) or of a newer format
      (left alone).
    * ``aborted``: the indexes of the renewed leases (True in ``renewed``)
      whose job an abort was asked for (see :meth:`AdminRole.abort`): their
      worker should call off the run and settle ABORTED.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    renewed: tuple[bool, ...]
    aside: SetAside
    aborted: frozenset[int]


@attrs.frozen
class SettleResult:
    """What :meth:`WorkerRole.settle` did.

    * ``settled``: one bool per settlement, in the order given: True when it
      was applied under its lease's fence; False when the lease was no
      longer held with that token (nothing changed), or its record was set
      aside (then it is in ``aside`` too).
    * ``aside``: what the settle set aside (see :class:`SetAside`).
    * ``aborted``: the indexes of the applied settlements that made the job
      aborted: the ABORTED ones, and a RETRY, DEFER, RELEASE or UNCLAIMED of
      a lease whose job an abort was asked for (the abort wins).
    * ``unclaimed_dead``: the indexes of the applied UNCLAIMED settlements
      that dead-lettered the job, because it had gone back unclaimed for
      longer than their ``unclaimed_grace``.
    * ``continued``: the indexes of the applied SUCCEEDED settlements whose
      :attr:`Settlement.successor` the store enqueued in the settle itself
      (or found already stored under its ID), writing no outbox entry.
    * ``leased``: (index, lease) per applied settlement in ``continued``
      whose successor the store created already leased to the worker it
      named (:attr:`Successor.lease_to`): the worker runs it as any lease
      it took (fenced by its token; recovered, if the worker dies, as any
      expired lease is).
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    settled: tuple[bool, ...]
    aside: SetAside
    aborted: frozenset[int]
    unclaimed_dead: frozenset[int]
    continued: frozenset[int] = frozenset()
    leased: tuple[tuple[int, LeasedJob], ...] = ()


@attrs.frozen
class NotesResult:
    """What :meth:`~chronos_trio.store.NotesRole.write_notes` did: the job
    IDs whose notes it wrote, those it refused because their lease was lost
    (wrong token, expired, the job not leased or gone: nothing of theirs
    changed), in batch order, and how many older log lines the line bound
    pushed out (over the whole batch)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    written: tuple[str, ...]
    refused: tuple[str, ...]
    dropped: int


@attrs.frozen
class CountResult:
    """What :meth:`AdminRole.trim`, :meth:`AdminRole.requeue_dead` and
    :meth:`AdminRole.purge_queue` did: ``count`` jobs deleted (trim, purge)
    or requeued (requeue_dead), and ``aside``,
    what the operation set aside instead of applying (see :class:`SetAside`):
    records not counted in ``count``."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    count: int
    aside: SetAside


@attrs.frozen
class PromoteResult:
    """``promoted`` jobs moved to ready; ``next_due_at`` is the earliest due
    time still waiting (None when nothing waits; records of a newer format
    left waiting do not count); ``now`` is the store's clock; ``aside`` what
    the promotion set aside (see :class:`SetAside`)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    promoted: int
    next_due_at: float | None
    now: float
    aside: SetAside = NOTHING_SET_ASIDE


@attrs.frozen
class RecoverResult:
    """Jobs whose leases had expired: ``requeued`` went back to ready, ``dead``
    were dead-lettered because their attempts were used up; ``aside`` what the
    recovery set aside instead (damaged records it dead-lettered are in
    ``aside.dead``, not in ``dead``; see :class:`SetAside`); ``aborted`` were
    made aborted, as now stored, because an abort had been asked for them."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    requeued: tuple[str, ...] = ()
    dead: tuple[Job, ...] = ()
    aside: SetAside = NOTHING_SET_ASIDE
    aborted: tuple[Job, ...] = ()


@attrs.frozen
class LimitUsage:
    """One flow-control key of a queue (see ``records._control``) as the
    store holds it now."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    key: str
    #: "rate" or "concurrency".
    kind: str
    #: concurrency: the slots held now (by unexpired leases); rate: 0.
    in_use: int = 0
    #: rate: the limit's theoretical arrival time (store clock): permits are
    #: booked up to here (a time past is a fresh limit); None for concurrency.
    booked_until: float | None = None


@attrs.frozen
class QueueStats:
    """Counts of one queue's jobs by state, and by (version, partition)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    counts: dict[JobState, int]
    paused: bool = False
    by_partition: dict[tuple[int, int], int] = attrs.field(factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class VersionState(enum.StrEnum):
    ACTIVE = "active"  # new jobs go here
    DRAINING = "draining"  # no new jobs; workers still consume what it holds


@attrs.frozen
class QueueVersion:
    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    version: int
    partitions: int
    state: VersionState


@attrs.frozen
class QueueTopology:
    """A queue's routing: the active version gets new jobs; draining versions
    are still consumed until empty and marked complete."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    versions: tuple[QueueVersion, ...]

    @property
    def active(self) -> QueueVersion:
        for v in self.versions:
            if v.state is VersionState.ACTIVE:
                return v
        raise LookupError(f"queue {self.queue!r} has no active version")


@attrs.frozen
class Leadership:
    """A held leadership lease. ``epoch`` grows by one with every acquisition
    (by anyone), so it fences out a paused ex-leader."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    holder: str
    epoch: int
    expires_at: float


class TriggerResult(enum.StrEnum):
    ENQUEUED = "enqueued"  # this call recorded the trigger and enqueued its job
    ALREADY_FIRED = "already_fired"  # the schedule had already fired at or after it
    STALE_EPOCH = "stale_epoch"  # the caller no longer leads: nothing was done


class ScheduleEdit(enum.StrEnum):
    """One change to a stored schedule
    (:meth:`~chronos_trio.store.ScheduleStoreRole.edit_schedule`)."""

    ADD = "add"  # store a new schedule (refused when its id is stored)
    CHANGE = "change"  # replace a stored schedule's definition (keeps paused)
    PAUSE = "pause"  # stop its triggers until resumed
    RESUME = "resume"  # fire its triggers again
    REMOVE = "remove"  # forget it (its last fired time stays, see the role)


@attrs.frozen
class StoredSchedule:
    """A schedule kept in the store: its ``definition`` is opaque text to the
    store (the runtime's JSON, ``runtime._stored_schedules``)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    definition: str
    paused: bool
    #: The store's time of its last edit (epoch seconds).
    updated_at: float


@attrs.frozen
class StoredSchedules:
    """Every stored schedule of one leadership name, read in one atomic step,
    with the ``version`` they are at (0: never edited)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    version: int
    schedules: tuple[StoredSchedule, ...]  # by id


# -- the store checker's constants (its findings: ``_check_results``) ------------------
#: How long (seconds) past its expiry a lease may stay unrecovered before the
#: checker reports it: workers recover expired leases every few seconds (at
#: most 5 s by default), so one still there a minute later has nobody
#: recovering it (no worker runs that queue, or recovery is failing).
LEASE_GRACE = 60.0

#: The ``last_error`` prefix of a job dead-lettered because its record could
#: not be used ("damaged record: field 'attempts' holds b'x', not an integer").
#: The checker accepts a dead record with this prefix as set aside, whatever
#: its other fields hold.
DAMAGED_RECORD = "damaged record: "
