"""The store protocol: a small required core and optional capabilities, as
roles (small sets of *batched*, atomic job operations) and features.

A backend declares what it offers by subclassing roles (each role is an ABC
whose methods are the contract) and by naming the features it honours in
its ``features`` class attribute. Both are held to the conformance suite in
:mod:`chronos_trio.testing`: each check declares the capabilities it needs,
and a backend runs exactly the checks its capabilities imply.

The core, required of every backend (what a worker needs to run jobs):

* :class:`StoreRole`: the base of every role: the store's clock (``now``),
  ``shared_across_processes`` and ``aclose``.
* :class:`WorkerRole`: the hot path (enqueue, lease, renew, settle,
  recover) and idle waiting (``wait_ready``).

The optional roles, each a :class:`~chronos_trio.store.Capability`:

* :class:`PromotionRole`: delayed jobs promoted by a promoter
  (``promote_due``, ``wait_scheduled``); a store without it judges due
  times in its lease.
* :class:`RegistryRole`: the registry of live workers (beats, ``workers``).
* :class:`AdminRole`: inspection, administration and retention (``trim``).
* :class:`TopologyRole`: versioned queue routing.
* :class:`LeadershipRole`: leadership leases with epochs, and schedule
  triggers fenced by them.
* :class:`ResultRole`: results and waiting for a job's outcome.
* :class:`FlowRole`: workflow continuations.
* :class:`CheckRole`: the store checker (find and repair inconsistencies).

The features, declared in ``features`` (semantics carried inside the core's
arguments): unique jobs, rate limits, concurrency limits, expiry,
priorities and abort (see ``store._capabilities``).

:class:`Store` is all of them: every role and every feature.
``MemoryStore``, ``RedisStore`` and ``testing.FaultyStore`` are full
stores; ``testing.MinimalStore`` offers only the core.

Who needs which: a producer needs the core, and the features its jobs use;
a worker needs the core, and starts each optional actor only when the store
offers its capability (the promoter with promotion, the registrar with the
registry, the janitor with admin and leadership, the leader and scheduler
with leadership), refusing before it starts anything an app that uses a
capability its store lacks (schedules, kept results); the ``Inspector``
needs :class:`AdminRole` and :class:`TopologyRole`, and more for some of
its methods. Code that takes a store checks what it needs where the store
comes in (:func:`~chronos_trio.store.require_capabilities`,
:func:`require_roles`), so a store without it fails there with one clear
error (:class:`~chronos_trio.store.MissingCapability`, a ``TypeError``),
not with an ``AttributeError`` halfway through a run.

Conventions
-----------
* Times are float seconds since the Unix epoch **on the store's clock**.
  Due times and lease expiry are judged only by that clock.
* Each method is atomic per job: a job is never observed half-moved. Batches
  may be applied per partition, but no job is in two states at once.
* Every lease carries a fencing token. ``renew`` and ``settle`` must present
  it; a stale token changes nothing and is reported as ``False``.
* A job ID is unique within its queue. Reusing one ID in two queues is not
  part of the contract (the MemoryStore has one ID space for all queues, the
  RedisStore one per queue): give jobs of different queues different IDs.
* Cancelling a call, like a :class:`StoreError`, leaves each job of the
  batch either moved or not moved, never in between.
* A damaged record never aborts a batch. An operation checks what it reads
  before it writes: a record that lacks a field the operation needs (missing,
  empty, of the wrong type) is dead-lettered with ``last_error`` "damaged
  record: <field and value>"; an index entry with no record is taken out of
  the index and quarantined; a record of a newer record format is left
  exactly as it is. The rest of the batch proceeds, and the operation
  reports what it set aside (:class:`SetAside`): in the ``aside`` of its
  result (:class:`LeaseBatch`, :class:`FencedResults`, :class:`CountResult`,
  :class:`PromoteResult`, :class:`RecoverResult`), read with
  :func:`aside_of`, which also takes the plain results of a backend that
  sets nothing aside. Admin reads (``get_job``, ``list_jobs``) return a
  damaged record as a ``Job`` whose ``damage`` says what is wrong; workers
  are never handed one.

Errors
------
* :class:`StoreError`: the store could not be reached, timed out, refused
  the operation (an error reply) or is closed. The operation may or may not
  have been applied (a reply can be lost after the store applied it), so
  every method is safe to call again: enqueue is idempotent by job ID, renew
  and settle are fenced by the token (a repeated settle that already applied
  reports ``False``), and the rest are idempotent or report what they did.
  A MemoryStore is never unreachable: it raises no StoreError except
  :class:`TopologyError`.
* :class:`TopologyError` (a StoreError): a topology change was refused.
* ``ValueError``: an argument the store rejects before doing anything
  (documented per method), and, from the first call of a RedisStore built
  from a URL, a URL part only parsed when it connects. Arguments outside a
  method's documented range that it does not check (e.g. a negative
  ``limit``) are a caller's bug with unspecified results; the ``Inspector``
  checks what an operator types.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Sequence
from typing import ClassVar

import attrs

from ..records._errors import StoreError as StoreError
from ..records._errors import TopologyError as TopologyError
from ..records._jobs import (
    EnqueueResult,
    Job,
    JobOutcome,
    JobRef,
    JobState,
    LeasedJob,
    LeaseRef,
    NewJob,
)
from ..records._workers import WorkerInfo
from ..records._workflow import Arrival
from ._capabilities import FEATURES, Capability
from ._observer import StoreObserver


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
class Settlement:
    """One lease's outcome, fenced by ``lease.token``."""

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


@attrs.frozen
class QueueWeight:
    """A queue a worker consumes, with its share of each lease batch."""

    name: str
    weight: int = 1


# -- what an operation set aside ---------------------------------------------------------
@attrs.frozen
class AsideEntry:
    """One job an operation did not apply to and did not dead-letter: an
    index entry without a usable record (quarantined), or a record of a newer
    format (left alone). ``reason`` says which."""

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


class LeaseBatch(list[LeasedJob]):
    """What :meth:`WorkerRole.lease` returns on a store that sets records
    aside (RedisStore): the leased jobs, a plain ``list`` in every way (it
    compares equal to a list of the same jobs), plus ``aside``: what the
    lease met and set aside instead of leasing. Read it with :func:`aside_of`,
    which also accepts the plain list another backend may return.

    Flow control (``records._control``) adds what the lease held back:

    * ``expired``: jobs it dead-lettered instead of leasing because their
      ``expires_at`` had passed (state dead, ``last_error`` "expired: ...");
      a worker counts each as dead and publishes ``JobDead``.
    * ``held_for``: seconds from the lease until the next permit of a rate
      limit that held a ready job back, or None: the leaser sleeps that
      long instead of polling.
    * ``capped``: a ready job was held back by a concurrency limit at its
      limit: a slot comes back with a settle or a lease's expiry, so the
      leaser looks again shortly.
    """

    __slots__ = ("aside", "capped", "expired", "held_for")

    def __init__(
        self,
        jobs: Iterable[LeasedJob] = (),
        aside: SetAside = NOTHING_SET_ASIDE,
        *,
        expired: tuple[Job, ...] = (),
        held_for: float | None = None,
        capped: bool = False,
    ):
        super().__init__(jobs)
        self.aside = aside
        self.expired = expired
        self.held_for = held_for
        self.capped = capped


class FencedResults(list[bool]):
    """What ``renew`` and ``settle`` return on a store that sets records aside:
    one bool per lease, as a plain list, plus ``aside``. A lease whose record
    was dead-lettered as damaged, or left alone as of a newer format, reports
    ``False`` (it was not renewed or settled as asked) and is in ``aside``.

    ``aborted``: the indexes of the leases whose job an abort was asked for
    (see :meth:`AdminRole.abort`): from ``renew``, leases renewed (True) and
    flagged, whose worker should stop the run and settle ABORTED; from
    ``settle``, settlements applied (True) that made the job aborted (an
    ABORTED one, or a RETRY, DEFER, RELEASE or UNCLAIMED of a flagged lease).
    Read it with :func:`aborted_of`, which also takes a plain list.

    ``unclaimed_dead``: from ``settle``, the indexes of the UNCLAIMED
    settlements applied (True) that dead-lettered the job, because it had
    gone back unclaimed for longer than their ``unclaimed_grace``. Read it
    with :func:`unclaimed_dead_of`."""

    __slots__ = ("aborted", "aside", "unclaimed_dead")

    def __init__(
        self,
        results: Iterable[bool] = (),
        aside: SetAside = NOTHING_SET_ASIDE,
        aborted: frozenset[int] = frozenset(),
        unclaimed_dead: frozenset[int] = frozenset(),
    ):
        super().__init__(results)
        self.aside = aside
        self.aborted = aborted
        self.unclaimed_dead = unclaimed_dead


class CountResult(int):
    """What ``trim`` and ``requeue_dead`` return on a store that sets records
    aside: the count, as a plain ``int``, plus ``aside``."""

    aside: SetAside

    def __new__(cls, count: int = 0, aside: SetAside = NOTHING_SET_ASIDE) -> CountResult:
        made = super().__new__(cls, count)
        made.aside = aside
        return made


def aside_of(result: object) -> SetAside:
    """What the operation that returned ``result`` set aside: its ``aside``
    (a :class:`LeaseBatch`, :class:`FencedResults`, :class:`CountResult`,
    :class:`PromoteResult` or :class:`RecoverResult`), or the empty report for
    a result without one (a plain list from a backend that sets nothing aside)."""
    aside = getattr(result, "aside", None)
    return aside if isinstance(aside, SetAside) else NOTHING_SET_ASIDE


def aborted_of(result: object) -> frozenset[int]:
    """The indexes of the leases an abort was asked for, of a ``renew`` or
    ``settle`` result (see :class:`FencedResults`); empty for a result
    without them (a plain list)."""
    aborted = getattr(result, "aborted", None)
    return aborted if isinstance(aborted, frozenset) else frozenset()


def unclaimed_dead_of(result: object) -> frozenset[int]:
    """The indexes of the UNCLAIMED settlements of a ``settle`` result that
    dead-lettered their job (see :class:`FencedResults`); empty for a result
    without them (a plain list)."""
    dead = getattr(result, "unclaimed_dead", None)
    return dead if isinstance(dead, frozenset) else frozenset()


@attrs.frozen
class PromoteResult:
    """``promoted`` jobs moved to ready; ``next_due_at`` is the earliest due
    time still waiting (None when nothing waits; records of a newer format
    left waiting do not count); ``now`` is the store's clock; ``aside`` what
    the promotion set aside (see :class:`SetAside`)."""

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

    requeued: tuple[str, ...] = ()
    dead: tuple[Job, ...] = ()
    aside: SetAside = NOTHING_SET_ASIDE
    aborted: tuple[Job, ...] = ()


@attrs.frozen
class LimitUsage:
    """One flow-control key of a queue (see ``records._control``) as the
    store holds it now."""

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
    version: int
    partitions: int
    state: VersionState


@attrs.frozen
class QueueTopology:
    """A queue's routing: the active version gets new jobs; draining versions
    are still consumed until empty and marked complete."""

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

    name: str
    holder: str
    epoch: int
    expires_at: float


class TriggerResult(enum.StrEnum):
    ENQUEUED = "enqueued"  # this call recorded the trigger and enqueued its job
    ALREADY_FIRED = "already_fired"  # the schedule had already fired at or after it
    STALE_EPOCH = "stale_epoch"  # the caller no longer leads: nothing was done


# -- the store checker's findings ---------------------------------------------------------
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


class Problem(enum.StrEnum):
    """What the store checker found wrong with one job (or index entry)."""

    NO_INDEX = "no_index"  # a record in no index: nothing will ever lease, promote or trim it
    NO_RECORD = "no_record"  # an index entry whose record is gone
    TWO_INDEXES = "two_indexes"  # a record in more than one index
    WRONG_INDEX = "wrong_index"  # a record in one index, not the one its state names
    EXPIRED_LEASE = "expired_lease"  # a lease expired more than the grace ago, not recovered
    DAMAGED = "damaged"  # a field missing or of the wrong type (the detail names it)
    NEWER_FORMAT = "newer_format"  # written in a newer record format: left for a newer version
    QUARANTINED = "quarantined"  # an entry of a quarantine hash: already set aside

    @property
    def report_only(self) -> bool:
        """True for findings that are listed but are not a problem to repair:
        a newer format's record (a rolling upgrade in progress) and a
        quarantine entry (a problem already dealt with)."""
        return self in (Problem.NEWER_FORMAT, Problem.QUARANTINED)


class Repair(enum.StrEnum):
    """What ``check(repair=True)`` did about one finding."""

    NONE = "none"  # nothing: repair not asked, or a report-only finding
    REINDEXED = "reindexed"  # put in the index its state names, with the right score
    RECOVERED = "recovered"  # an expired lease taken back: ready again
    DEAD_LETTERED = "dead_lettered"  # made dead, with a last_error naming the problem
    QUARANTINED = "quarantined"  # index entries removed, the job id recorded in quarantine
    SKIPPED = "skipped"  # the job changed since it was inspected: left alone (check again)


@attrs.frozen
class Finding:
    """One problem the store checker found, and what repair did about it.

    ``state`` is the record's state as stored ("" when there is no record or
    no state), ``indexes`` the indexes (state names) that held the job when
    it was inspected, ``record_format`` the record's format version (None
    with no record, or one that cannot be read). ``detail`` says what is
    wrong, naming the field and value for a damaged record;
    ``repair_detail`` what the repair did (or why it did nothing).
    """

    problem: Problem
    job_id: str
    queue: str
    queue_version: int
    partition: int
    detail: str
    state: str = ""
    indexes: tuple[str, ...] = ()
    record_format: int | None = None
    repair: Repair = Repair.NONE
    repair_detail: str = ""


def finding_order(finding: Finding) -> tuple[str, int, int, str]:
    """The order reports list findings in: by queue, version, partition, job id."""
    return (finding.queue, finding.queue_version, finding.partition, finding.job_id)


@attrs.frozen
class CheckReport:
    """What one walk of a store found (see :meth:`CheckRole.check`).

    ``findings`` lists problems and newer-format records by queue, version,
    partition and job id (:func:`finding_order`), then quarantine entries.
    The counters say how much was walked: ``records`` job records and
    ``index_entries`` index entries seen (a record or entry that moved during
    the walk may be seen twice), in ``partitions`` partitions;
    ``skipped_keys`` are job keys of the namespace outside the checked
    partitions (another queue, or a version no longer in the topology), left
    alone. ``now`` is the store's clock when the walk began.
    """

    queues: tuple[str, ...]
    repair: bool
    lease_grace: float
    now: float
    findings: tuple[Finding, ...] = ()
    partitions: int = 0
    records: int = 0
    index_entries: int = 0
    skipped_keys: int = 0

    @property
    def problems(self) -> tuple[Finding, ...]:
        """Findings that are problems (not report-only)."""
        return tuple(f for f in self.findings if not f.problem.report_only)

    @property
    def unresolved(self) -> tuple[Finding, ...]:
        """Problems not repaired: every problem without repair; with repair,
        those it skipped because the job changed meanwhile."""
        return tuple(f for f in self.problems if f.repair in (Repair.NONE, Repair.SKIPPED))

    @property
    def ok(self) -> bool:
        """True when no problem is left unrepaired."""
        return not self.unresolved


# -- the roles ------------------------------------------------------------------------
class StoreRole(abc.ABC):
    """What every store offers, whatever its roles: its clock, whether it can
    be shared by processes, and closing (with :class:`WorkerRole`, the
    core).

    A backend does not subclass this directly but the roles it offers
    (:class:`WorkerRole`, the core, and the optional roles it adds), or
    :class:`Store` for all of them; it declares the features it honours in
    :attr:`features`.
    """

    #: True when several processes (or machines) can share the store: a
    #: worker pool of many processes needs it. Stores in one process's memory
    #: set False.
    shared_across_processes: bool = False

    #: The features (:data:`~chronos_trio.store.FEATURES`: unique jobs,
    #: limits, expiry, priorities, abort) this backend honours in the core's
    #: arguments; none by default. Producers and workers refuse a job or a
    #: task that uses one the store does not declare (see
    #: :func:`~chronos_trio.store.capabilities_of`).
    features: ClassVar[frozenset[Capability]] = frozenset()

    @abc.abstractmethod
    async def now(self) -> float:
        """The store's clock, in epoch seconds: the clock every due time,
        lease expiry and leadership expiry is judged by (every role's times
        are on it, so every role offers it).

        Raises StoreError when the store cannot be reached."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store cannot be used afterwards (a
        RedisStore raises StoreError from every later call). Closing twice is
        allowed. The default does nothing."""

    def observe_round_trips(self, observer: StoreObserver | None) -> None:  # noqa: B027
        """Call ``observer(operation, failed)`` after every batch this store
        sends (None: stop). See ``store._observer``. The default does
        nothing: a store without round trips (the memory store) has none to
        report."""


class WorkerRole(StoreRole):
    """The core: what a worker needs to run jobs. Store new jobs, lease,
    renew and settle leases, take back expired ones, and let idle workers
    wait. Every backend offers it; everything else is a capability
    (:class:`~chronos_trio.store.Capability`).

    Every operation on jobs takes a batch and costs the backend one round
    trip per batch (per partition or node at most), never one per job. Producers
    (``App.enqueue``) need only this role (and the features their jobs use).

    A backend without :class:`PromotionRole` judges due times here: a
    scheduled or retry_wait job whose due time has come (store clock) is
    leased as a ready one is, and :meth:`wait_ready` returns by its due time.
    """

    @abc.abstractmethod
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Store ``jobs`` atomically per job, in order; one result per job.

        A job whose ID already exists in its queue (in any state, including
        retained succeeded and dead) is not touched and reports
        ``created=False`` with the existing job's due time (0.0 when that
        record's due time is unreadable) and routing; so
        does a later job of the same batch with an ID already used in it.
        Due jobs (``run_at`` at or before the store's now, or no ``run_at``
        and ``delay`` <= 0) become ``ready``, others ``scheduled``. New jobs
        are routed to the queue's active topology version and a partition by
        job-ID hash (:func:`~chronos_trio.store.partition_of`); a queue's
        first job registers the queue. An empty batch does nothing.

        Raises StoreError when the store cannot be reached or refuses; some
        of the jobs may be stored then, and enqueueing the same jobs again
        (same IDs) is safe.
        """

    @abc.abstractmethod
    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> list[LeasedJob]:
        """Lease at most ``count`` ready jobs, oldest due first within a queue
        (however the queue is partitioned).

        ``count`` is shared among the queues by weight
        (:func:`~chronos_trio.store.share_by_weight`); a share a queue cannot
        use goes to the others, so a batch comes back short only for want of
        ready jobs (or when concurrent leasers took them first). With
        ``strict`` the queues are in priority order instead, weights ignored
        (:func:`~chronos_trio.store.share_strictly`): a queue's jobs are
        leased only once every queue before it has no ready job left to give
        this call (as far as the store saw when the call began). Paused
        queues, queues with weight <= 0 and unknown queues are skipped;
        ``count`` <= 0 leases nothing. Each leased job's ``attempts`` grows by
        one and it gets ``worker_id`` as owner and a fresh fencing token,
        unique among all leases this store ever issued, expiring
        ``lease_duration`` (> 0) seconds from the store's now.

        Every leased job is complete (kind, payload, attempts, ...): a ready
        record lacking one is set aside (see the module's conventions) and
        replaced by the next ready job. The result is a list of
        :class:`LeasedJob`; a backend that sets records aside returns a
        :class:`LeaseBatch` (a list) whose ``aside`` reports them.

        Raises StoreError when the store cannot be reached; jobs leased by a
        call whose reply was lost stay leased until their lease expires and
        :meth:`recover_expired` takes them back (that attempt counts).
        """

    @abc.abstractmethod
    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> list[bool]:
        """Extend each lease to ``lease_duration`` seconds from the store's
        now; one result per lease, in order.

        ``False`` (and nothing changes) for a lease that is no longer held
        with that token: settled, taken back, leased again, deleted, or
        expired, even if not yet recovered (an expired lease is lost for
        good); also for a lease whose record, held with that token, was
        damaged (dead-lettered) or is of a newer format (left alone), which a
        :class:`FencedResults` reports in ``aside``.

        A renewed lease whose job an abort was asked for (:meth:`AdminRole.abort`)
        is listed in the result's ``aborted`` (read it with :func:`aborted_of`):
        the flag reaches the worker in this reply, with no call of its own,
        every renewal until the lease ends. Raises StoreError when the store
        cannot be reached (renew again: renewing twice is harmless).
        """

    @abc.abstractmethod
    async def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        """Apply each outcome if its lease is still held with its token (and
        unexpired); ``False`` and no change otherwise. One result per
        settlement, in order; of two settlements of one lease only the first
        applies.

        SUCCEEDED drops the job, or keeps it as ``succeeded`` until
        ``retain_for`` (> 0) seconds have passed; RETRY records ``error`` and
        makes the job ``retry_wait``, due ``retry_delay`` seconds from now
        (a negative delay counts as 0); DEAD dead-letters it with ``error``
        and its finish time; DISCARD deletes it instead (a failure nobody
        keeps: in no dead index, never listed, counted, requeued or run; a
        job with result waiters stays readable to them as ``dead`` with
        ``error`` for as long as an unretained success would, then goes by
        itself), releasing its unique lock as DEAD does; RELEASE returns it
        to ``ready`` at once with its due time kept and gives back the
        attempt its lease took; ABORTED
        makes it ``aborted``, kept as a dead job is (in the dead jobs' index,
        trimmed with them), with ``last_error`` the abort's text (``error``
        when no abort was asked), its finish time, its unique key released.

        UNCLAIMED (the worker has no handler for the job's kind) sends the
        job back for a worker that has one: ``retry_wait``, due
        ``retry_delay`` seconds from now, the attempt its lease took given
        back, ``last_error`` kept, and ``unclaimed_since`` stamped with the
        store's now unless it holds a time already (a value that is not a
        finite number, or is later than now, counts as none). Once that
        stamp is ``unclaimed_grace`` seconds old or more, it dead-letters the
        job instead (``error`` its ``last_error``, the attempt given back,
        the stamp kept, its unique lock released as DEAD does) and lists the
        settlement in the result's ``unclaimed_dead``. So the time with no
        taker survives bounces between workers and their restarts. A RETRY
        or DEFER clears the stamp (a worker that has the handler ran it),
        and so do the recovery of an expired lease (its worker may have had
        one) and ``requeue_dead``; RELEASE (not run) keeps it.

        A RETRY, DEFER, RELEASE or UNCLAIMED of a lease whose job an abort
        was asked for makes it aborted instead (the abort wins over running
        it again; a success or a dead-letter or a discard stands): those
        settlements, and the ABORTED ones, are listed in the result's
        ``aborted``. Every
        applied outcome clears the lease (token, owner, expiry). A lease
        whose record, held with that token, is damaged is dead-lettered
        instead, and one of a newer format is left alone: both report
        ``False``, and a :class:`FencedResults` lists them in ``aside``.

        Raises StoreError when the store cannot be reached; settlements that
        did apply then report ``False`` if sent again (their leases are gone).
        """

    @abc.abstractmethod
    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        """Take back up to ``limit`` leases of ``queues`` that expired (by the
        store's clock), queue by queue in the order given, earliest expiry
        first within a queue: back to ready (due now), or dead, with a
        ``last_error`` saying the lease expired, when the job has used
        ``max_retries + 1`` attempts (a job that keeps killing its worker
        must not loop forever), or aborted (``aborted``) when an abort was
        asked for it. Their old tokens are fenced from then
        on. ``limit`` <= 0 recovers nothing. Damaged records and entries
        without a record are set aside (``aside``), never left in the
        leased index half-recovered.

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        """Return soon after a job may have become ready in ``queues`` (an
        enqueue, promotion, release, recovery, run-now or resume), at once
        when one that is not paused already has a ready job, or after
        ``timeout`` (>= 0) seconds. Spurious returns are allowed; missing a
        wake-up for longer than ``timeout`` is not. Every waiter sees every
        wake-up (a store may let one that lost the last job to another look
        first, briefly): a waiter that never reads its wake-up (a stopped
        process, a cut link) or was cancelled must not keep it from the
        others. ``held``: the caller's
        last lease found the ready jobs there held back by flow control
        (see :class:`LeaseBatch`): do not return for them, only for a
        wake-up (which a settle that frees a concurrency slot also sends).

        Idle workers block here instead of polling fast. Raises StoreError
        when the store cannot be reached. A negative ``timeout`` is a
        ValueError on the MemoryStore.
        """


class PromotionRole(StoreRole):
    """Promotion of delayed jobs: a promoter actor moves scheduled and
    retry_wait jobs whose due time has come to ready, sleeping until the
    next due time (or an earlier job's wake-up).

    Optional (:attr:`~chronos_trio.store.Capability.PROMOTION`): a store
    without it judges due times in its lease instead (a scheduled or
    retry_wait job whose due time has come is leased as if ready, and
    :meth:`WorkerRole.wait_ready` returns for it by then), and a worker
    on it runs no promoter.
    """

    @abc.abstractmethod
    async def promote_due(self, queues: Sequence[str], limit: int) -> PromoteResult:
        """Move up to ``limit`` jobs of ``queues`` whose due time has come from
        ``scheduled``/``retry_wait`` to ``ready``, queue by queue in the order
        given, earliest due first within a queue. Reports how many moved, the
        earliest due time still waiting over all of ``queues``
        (``next_due_at``) and the store's now.

        A queue that holds no job (or is unknown) contributes nothing;
        ``limit`` <= 0 promotes nothing. Paused queues are promoted too
        (pausing stops leasing, not time). Records set aside are in
        ``aside``. Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def wait_scheduled(
        self, queues: Sequence[str], *, earlier_than: float | None, timeout: float
    ) -> None:
        """Return soon after ``queues`` hold a scheduled or retry_wait job due
        before ``earlier_than`` (at once if one is already there; any such
        job when None), or after ``timeout`` (>= 0) seconds. A promoter
        sleeping until its next due time calls this so an earlier job wakes
        it; every waiter sees every such wake-up, as for :meth:`wait_ready`.
        Spurious returns are allowed.

        Raises StoreError when the store cannot be reached. A negative
        ``timeout`` is a ValueError on the MemoryStore.
        """


class RegistryRole(StoreRole):
    """The registry of live workers: each worker process beats once per
    heartbeat interval (never per job) and is listed until its entry
    lapses. Optional (:attr:`~chronos_trio.store.Capability.REGISTRY`): a
    worker on a store without it runs no registrar.
    """

    @abc.abstractmethod
    async def beat_worker(self, worker: WorkerInfo, ttl: float) -> None:
        """Record ``worker`` in the registry of live workers, or refresh its
        entry (keyed by ``worker.worker_id``, replacing what the entry held):
        the first beat registers it. The store sets ``last_beat`` to its own
        now (the value passed is ignored) and keeps the entry listed until
        ``ttl`` (> 0) seconds after it: a worker that stops beating (killed,
        paused, cut off) drops out of :meth:`RegistryRole.workers` then, even
        if nothing removed its entry yet. At most
        :data:`~chronos_trio.records._workers.MAX_RUNNING_IDS` of
        ``running_job_ids`` are kept. The same call may remove a few lapsed
        entries of other workers (bounded work, so stale entries never pile
        up). Atomic: a listing sees the old entry or the new one.

        Raises ``ValueError`` for a ``ttl`` that is not positive, StoreError
        when the store cannot be reached (beating again is harmless).
        """

    @abc.abstractmethod
    async def unregister_worker(self, worker_id: str) -> None:
        """Remove the registry entry of ``worker_id`` (a worker stopping
        cleanly); an absent entry is fine. Raises StoreError when the store
        cannot be reached (the entry then lapses by itself)."""

    @abc.abstractmethod
    async def workers(self) -> list[WorkerInfo]:
        """Every live worker of the registry (see
        :meth:`RegistryRole.beat_worker`): each entry whose last beat is less
        than its ttl ago by the store's clock, sorted by host, then pid. A
        lapsed entry is never listed, removed or not. An entry that cannot
        be read (not a record of this version: damaged, or of a newer
        format) is skipped with a warning, never failing the listing.
        Raises StoreError when the store cannot be reached."""


class AdminRole(StoreRole):
    """Inspection and administration: what an operator (the ``Inspector``,
    the command line) sees and does, and retention (:meth:`trim`, run by the
    leader's janitor).

    Not the hot path: these may cost a few round trips, never one per job.
    A queue is *known* once a job was enqueued in it, it was paused or
    resumed, or its topology was read or changed; it stays known.
    """

    @abc.abstractmethod
    async def queues(self) -> list[str]:
        """Names of every known queue (see the class docstring), sorted.
        Raises StoreError when the store cannot be reached."""

    @abc.abstractmethod
    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        """Counts per state (and per version/partition) of ``queues``, one
        entry per name in order (all known queues, sorted, when None).

        A name the store does not know reports zero counts and is not
        registered by asking. Counts of several partitions are read in one
        batch, not one snapshot: under load they can be off by the jobs that
        moved meanwhile. Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        """The job with ``job_id`` in ``queue`` (searching every known queue
        when None), in whatever state, or None when there is none.
        Raises StoreError when the store cannot be reached."""

    @abc.abstractmethod
    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        """Jobs of ``queue`` in ``state``, ordered by due time (scheduled,
        ready, retry_wait), lease expiry (leased) or finish time (succeeded,
        dead, aborted), then job ID; ``offset`` (>= 0) and ``limit`` (>= 0) page
        through them, and ``limit`` 0 lists nothing. An unknown queue lists
        nothing. Pages are read one by one, so jobs that move between two
        calls may be skipped or listed twice. (A RedisStore indexes succeeded
        jobs by the end of their retention: when they were retained for
        different periods, its pages may leave finish-time order.)

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        """Make a scheduled, retry_wait or dead job ready at once (due now; a
        dead job gets its attempts reset to 0 and its finish time cleared).
        False, and nothing changes, if there is no such job in one of those
        states (``queue`` None: in any queue). Also False for a record of a
        newer format (left alone) and for one whose state is unreadable
        (dead-lettered: it cannot be run); ``get_job`` then shows why.

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        """Delete a job that is not leased, in any other state. False, and
        nothing changes, if absent (``queue`` None: in every queue), leased
        (a running job is settled by its worker, not deleted under it) or of
        a newer record format. A record whose state is unreadable is deleted
        and taken out of every index (deleting is how an operator clears it).

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        """Abort the job ``job_id`` (in ``queue``; every queue when None).

        A scheduled, ready or retry_wait job becomes ``aborted`` at once (out
        of its index, into the dead jobs' index with its finish time,
        ``last_error`` "aborted" and ``reason`` if given, its unique key
        released, its waiters woken): it is never leased. A leased job is
        flagged and stays leased (asked again, the first reason stands):
        every renewal of its lease reports the flag (see
        :meth:`WorkerRole.renew`), its worker cancels the run and settles it
        ABORTED (fenced by its token), and recovery makes it aborted if its
        lease expires first. The flag is stored with the job,
        so it outlives the worker, and the store if it persists. A finished
        job (succeeded, dead, aborted) and an unknown one are reported as
        such and left alone. A record whose state cannot be read is
        dead-lettered as damaged (reported FINISHED); one of a newer format
        is left alone (NOT_FOUND). Raises StoreError when the store cannot
        be reached (aborting again is harmless).
        """

    @abc.abstractmethod
    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> int:
        """Make up to ``limit`` dead jobs of ``queue`` ready again (due now),
        the oldest dead first, with attempts reset to 0; ``limit`` None (or
        0) requeues every dead job (aborted jobs are never requeued).
        Returns how many were requeued (a :class:`CountResult` on a backend
        that sets records aside: records of a newer format stay dead,
        untouched).

        Raises StoreError when the store cannot be reached; some may have
        been requeued then.
        """

    @abc.abstractmethod
    async def set_paused(self, queue: str, paused: bool) -> None:
        """Pause (no new leases from ``queue``; leased jobs run on) or resume
        it, and register the queue. Idempotent. A resume wakes idle workers.
        This store instance obeys at once; other processes within a short,
        backend-defined delay (a RedisStore's ``topology_ttl``, 1 s by
        default).

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> int:
        """Delete the retained succeeded jobs of ``queues`` whose retention
        has passed, their dead jobs that finished ``dead_max_age`` or more
        seconds ago, the oldest dead jobs beyond ``dead_max_count`` per
        queue (``dead_max_count`` 0: every dead job; aborted jobs count as
        dead jobs here), and, beyond ``keep_succeeded`` retained succeeded
        jobs per queue, those whose retention ends first, retention left or
        not (with one retention period for every job: the oldest; 0: every
        retained one). A job kept only for its result or its waiters is not
        retained here (it goes when they are done). None turns a limit off.
        Returns how many jobs were deleted (a :class:`CountResult` on a
        backend that sets records aside: only a record in the state of its
        index is deleted; others are set aside, see the conventions).

        Raises StoreError when the store cannot be reached; some jobs may
        have been deleted then (trimming again is harmless).
        """

    @abc.abstractmethod
    async def limit_usage(self, queue: str) -> list[LimitUsage]:
        """The rate and concurrency limit keys of ``queue`` that jobs used
        (see ``records._control``), with their state now, sorted by kind
        then key. Raises StoreError when the store cannot be reached."""


class TopologyRole(StoreRole):
    """Versioned queue routing: new jobs go to a queue's active version;
    draining versions are still consumed until they are empty and completed.

    A queue never configured has version 1, with the store's default
    partition count, active. Reading or changing a queue's topology
    registers the queue.
    """

    @abc.abstractmethod
    async def topology(self, queue: str) -> QueueTopology:
        """The queue's versions (exactly one active). Raises StoreError when
        the store cannot be reached."""

    @abc.abstractmethod
    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        """Make ``version`` (with ``partitions`` partitions) active for new
        jobs; the previously active version becomes draining (workers keep
        consuming it). Returns the new topology. Other processes route new
        jobs to it within a short, backend-defined delay (a RedisStore's
        ``topology_ttl``); jobs they route to the old version meanwhile are
        still consumed.

        Raises TopologyError, changing nothing, when ``partitions`` < 1 or
        ``version`` is not greater than every existing version; StoreError
        when the store cannot be reached.
        """

    @abc.abstractmethod
    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        """Remove a draining version once it holds no job in any state
        (retained succeeded and dead jobs count: trim or delete them first).
        Returns the new topology. A writer with an outdated topology cannot
        slip a job into the removed version.

        Raises TopologyError, changing nothing, when ``version`` is unknown,
        active, or still holds jobs; StoreError when the store cannot be
        reached.
        """


class LeadershipRole(StoreRole):
    """Leadership leases and fenced schedule triggers: singleton duties (cron
    triggers, the janitor) run only under the elected leader, and each
    trigger is fenced by the leader's epoch and recorded once per fire time.

    A leadership ``name`` is a lease held by one ``holder`` until it expires
    (by the store's clock); its ``epoch`` grows with every new acquisition
    and is never reused, so it fences out a paused ex-leader. A trigger
    enqueues a job, so a backend with this role offers :class:`WorkerRole`
    too in practice.
    """

    @abc.abstractmethod
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        """Take leadership ``name`` for ``ttl`` (> 0) seconds if nobody holds
        it (or its lease expired), with a new epoch one above the last one
        ever issued for ``name``. If ``holder`` already holds it, renew it
        and return the same epoch. None, and nothing changes, when someone
        else holds it.

        A new leader also finishes the triggers a predecessor recorded but
        may not have enqueued (see :meth:`enqueue_trigger`). Raises
        StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend a held leadership to ``ttl`` seconds from the store's now;
        False, and nothing changes, if ``holder`` with ``epoch`` no longer
        holds it (including when its lease expired, even if nobody took it).

        Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        """Give up leadership at once so a follower can take over (with the
        next epoch); False, and nothing changes, if not held by ``holder``
        with ``epoch``. Raises StoreError when the store cannot be reached."""

    @abc.abstractmethod
    async def current_leader(self, name: str) -> Leadership | None:
        """The unexpired holder of ``name``, or None. Raises StoreError when
        the store cannot be reached."""

    @abc.abstractmethod
    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        """Fire one schedule trigger, fenced by leadership ``name``/``epoch``.

        STALE_EPOCH, doing nothing, unless ``epoch`` is the current,
        unexpired epoch of ``name``; ALREADY_FIRED if the schedule's last
        fired time is at or after ``fire_at``; otherwise record ``fire_at`` as
        last fired and enqueue ``job`` (as :meth:`WorkerRole.enqueue_many`;
        its ID is deterministic, so a retry after a crash cannot double-fire).

        A recorded trigger's job is never lost: if the call fails (or is
        cancelled) after recording it, the job is enqueued by the next
        ``enqueue_trigger`` under ``name`` or the next acquisition of the
        leadership. Raises StoreError when the store cannot be reached.
        """

    @abc.abstractmethod
    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        """Last fired trigger time of every schedule under leadership
        ``name`` (whoever led then). Raises StoreError when the store cannot
        be reached."""


class ResultRole(StoreRole):
    """Results and waiting for a job's outcome: what a producer holding a job
    handle uses. Results are written by the fenced success settle (only the
    current lease holder's counts), so a stale or duplicate run can never
    overwrite one."""

    @abc.abstractmethod
    async def outcome(self, ref: JobRef) -> JobOutcome | None:
        """Where the job of ``ref`` stands now, with its result if one is
        kept; None when no such job exists (never enqueued in that queue, or
        finished and gone: dropped, trimmed, or its result expired).

        Raises StoreError when the store cannot be reached."""

    @abc.abstractmethod
    async def wait_outcome(self, ref: JobRef, *, timeout: float) -> JobOutcome | None:
        """The job's outcome once it is finished (succeeded or dead), waiting
        at most ``timeout`` seconds: then the outcome as it stands (not
        finished), or None when the job does not exist (see :meth:`outcome`).

        Waiting is pushed by the store, never a poll: the waiter registers,
        then reads the state, then blocks until the job's completion wakes it,
        so a completion between the read and the block is never missed.
        Waiters in one process share the store's connections (many thousands
        cost no connection each).

        Raises StoreError when the store cannot be reached."""


@attrs.frozen
class Continuation:
    """An outbox entry: a workflow job that succeeded, its continuation (see
    ``records._workflow``) and its result (None: none kept)."""

    job_id: str
    queue: str
    queue_version: int
    partition: int
    then: str
    result: bytes | None


class FlowRole(StoreRole):
    """Workflow continuations: the outbox the fenced success settle fills
    (a job enqueued with ``NewJob.then`` that succeeds is put there in the
    same atomic step, and is kept :data:`~chronos_trio.records._workflow.
    WORKFLOW_KEEP` seconds), and group arrivals."""

    @abc.abstractmethod
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        """Up to ``limit`` outbox entries of ``queues`` (oldest first within a
        partition; a Redis store reads ``limit`` of each partition), left in
        the outbox until :meth:`finish_continuations`: a continuer that dies
        before then leaves them for the next. Raises StoreError."""

    @abc.abstractmethod
    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        """Remove handled outbox entries (an entry already gone is fine)."""

    @abc.abstractmethod
    async def wait_continuations(self, timeout: float) -> None:
        """Return when a settle of this process may have filled the outbox,
        or after ``timeout`` seconds (entries other processes left are found
        by looking again then)."""

    @abc.abstractmethod
    async def group_arrive(
        self, arrivals: Sequence[Arrival], ttl: float
    ) -> list[list[bytes | None] | None]:
        """Record group members' results, in order, in one step per store
        round trip: each ``Arrival`` is member ``index`` (of ``size``) of
        group ``group_id`` with its ``result``; a second arrival of the same
        member changes nothing. Per arrival, the members' results in member
        order once all ``size`` have arrived (from the arrival that completes
        the group on, counting earlier arrivals of the same call), else None.
        A group's record lasts ``ttl`` seconds from its latest arrival.
        Raises StoreError."""


class CheckRole(StoreRole):
    """The store checker: walk the store and report (and optionally repair)
    what no correct operation leaves behind.

    It is safe on a live system: the walk reads in bounded batches, so it
    never blocks a shared store for long, and each job is judged from one
    atomic reading of its record and of every index of its partition, so a
    job that moves while the walk runs is never a finding. Each repair is
    one atomic step per job that first re-checks that the job is still
    exactly as inspected, so it never races a worker into a wrong state.
    """

    @abc.abstractmethod
    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """Walk the jobs of ``queues`` (every known queue when None; an
        unknown name contributes nothing), ``batch`` (>= 1) keys or entries
        per step, and report every :class:`Problem` found:

        * NO_INDEX: a record in no index (its state says where it belongs);
        * NO_RECORD: an index entry whose record is gone;
        * TWO_INDEXES / WRONG_INDEX: a record in several indexes, or in one
          that is not its state's;
        * EXPIRED_LEASE: a lease expired more than ``lease_grace`` seconds
          ago and not recovered;
        * DAMAGED: a record with a field missing or of the wrong type (the
          detail names each such field and its value);
        * NEWER_FORMAT: a record in a newer format than this version knows
          (report only: never repaired, never touched);
        * QUARANTINED: an index entry a store operation already set aside
          (report only).

        With ``repair`` each problem is repaired where the job still is as
        inspected (else SKIPPED): a record goes back to the index its state
        names, with the score its fields give; an expired lease is taken
        back as :meth:`WorkerRole.recover_expired` would (ready, or dead when
        its attempts are used up); a damaged record is dead-lettered with
        ``last_error`` = :data:`DAMAGED_RECORD` + the detail; an index entry
        without a record is removed and its job id quarantined. Dead-letter
        hooks do not run for jobs the checker dead-letters: the report lists
        them.

        A backend whose indexes cannot hold an entry without a record (the
        MemoryStore) never reports NO_RECORD. Raises ``ValueError`` for
        ``batch`` < 1 or a negative ``lease_grace``; StoreError when the store
        cannot be reached (repairs already applied stay applied; checking
        again is safe).
        """


class Store(
    WorkerRole,
    PromotionRole,
    RegistryRole,
    AdminRole,
    TopologyRole,
    LeadershipRole,
    ResultRole,
    CheckRole,
    FlowRole,
):
    """A store with every role and every feature: what the worker, the
    producers, the ``Inspector`` and the command line can all use.
    ``MemoryStore`` and ``RedisStore`` are Stores. See the module docstring
    for conventions and errors, and each role for its methods' guarantees."""

    features: ClassVar[frozenset[Capability]] = FEATURES


#: Every role, in the order messages list them: the core first.
ROLES: tuple[type[StoreRole], ...] = (
    WorkerRole,
    PromotionRole,
    RegistryRole,
    AdminRole,
    TopologyRole,
    LeadershipRole,
    ResultRole,
    CheckRole,
    FlowRole,
)


def roles_of(store: object) -> tuple[type[StoreRole], ...]:
    """The roles ``store`` (an instance or a class) offers, in :data:`ROLES` order."""
    cls = store if isinstance(store, type) else type(store)
    return tuple(role for role in ROLES if issubclass(cls, role))


# ``roles`` is typed ``type``, not ``type[StoreRole]``: mypy refuses abstract
# classes (every role is one) where ``type[X]`` is expected.
def require_roles(store: object, *roles: type, what: str) -> None:
    """Check that ``store`` offers every one of ``roles`` (role classes such
    as :class:`AdminRole`); ``what`` names who needs them (``"the
    inspector"``), for the message.

    Call it where a store enters (a constructor), so a store without a role
    fails at once with a message naming the roles, rather than with an
    ``AttributeError`` in the middle of a run. Raises ``TypeError`` naming
    the missing roles and the ones ``store`` offers.
    """
    missing = [role for role in roles if not isinstance(store, role)]
    if missing:
        offered = _names(roles_of(store)) or "no role"
        raise TypeError(
            f"{what} needs a store offering {_names(roles)}; "
            f"{type(store).__name__} lacks {_names(missing)} (it offers {offered})"
        )


def _names(roles: Iterable[type]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    names = [role.__name__ for role in roles]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
