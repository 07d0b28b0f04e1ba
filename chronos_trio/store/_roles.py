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
* :class:`WorkflowRole`: workflow records and their cancel marks.
* :class:`CheckRole`: the store checker (find and repair inconsistencies).
* :class:`NotesRole`: a running job's progress and log lines.
* :class:`ScheduleStoreRole`: schedules kept in the store, edited at run
  time.
* :class:`SearchRole`: jobs found by kind, state, queue, texts, times and
  worker, page by page, with a bounded scan per call.
* :class:`AggregatesRole`: per-minute aggregates of what workers ran.

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
  reports what it set aside (:class:`SetAside`) in the ``aside`` of its
  result (:class:`LeaseResult`, :class:`RenewResult`, :class:`SettleResult`,
  :class:`CountResult`, :class:`PromoteResult`, :class:`RecoverResult`).
  Admin reads (``get_job``, ``list_jobs``) return a damaged record as a
  ``Job`` whose ``damage`` says what is wrong; workers are never handed one.
* Every operation that reports more than one thing returns one frozen
  result (module ``_results``) whose fields say all it did; the fields a
  backend must decide have no default.

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
import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, cast

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import StoreError as StoreError
from ..records._errors import TopologyError as TopologyError
from ..records._jobs import (
    EnqueueResult,
    Job,
    JobOutcome,
    JobRef,
    JobState,
    LeaseRef,
    NewJob,
)
from ..records._notes import JobNotes, NoteWrite
from ..records._placement import Placement
from ..records._workers import WorkerInfo
from ..records._workflow import Arrival
from ._capabilities import FEATURES, Capability
from ._observer import StoreObserver

# The values the roles take and return live in ``_results``; re-exported
# here for the modules that import them with the roles.
from ._results import DAMAGED_RECORD as DAMAGED_RECORD
from ._results import LEASE_GRACE as LEASE_GRACE
from ._results import NOTHING_LEASED as NOTHING_LEASED
from ._results import NOTHING_SET_ASIDE as NOTHING_SET_ASIDE
from ._results import AbortResult as AbortResult
from ._results import AsideEntry as AsideEntry
from ._results import CountResult as CountResult
from ._results import Leadership as Leadership
from ._results import LeaseResult as LeaseResult
from ._results import LimitUsage as LimitUsage
from ._results import NotesResult as NotesResult
from ._results import PromoteResult as PromoteResult
from ._results import QueueStats as QueueStats
from ._results import QueueTopology as QueueTopology
from ._results import QueueVersion as QueueVersion
from ._results import QueueWeight as QueueWeight
from ._results import RecoverResult as RecoverResult
from ._results import RenewResult as RenewResult
from ._results import ScheduleEdit as ScheduleEdit
from ._results import SetAside as SetAside
from ._results import SettleKind as SettleKind
from ._results import Settlement as Settlement
from ._results import SettleResult as SettleResult
from ._results import StoredSchedule as StoredSchedule
from ._results import StoredSchedules as StoredSchedules
from ._results import TriggerResult as TriggerResult
from ._results import VersionState as VersionState
from ._search_limits import SCAN_LIMIT
from ._topology_placement import locate

if TYPE_CHECKING:
    # Workflow records, aggregates, search and the checker load on first
    # use: no worker needs them before its first job.
    from ..records._aggregates import KindCounts, MinuteCounts
    from ..records._flow_control import WorkflowRecord
    from ._check_results import CheckReport as CheckReport
    from ._check_results import Finding as Finding
    from ._check_results import Problem as Problem
    from ._check_results import Repair as Repair
    from ._check_results import finding_order as finding_order
    from ._search import JobQuery, SearchPage

#: The names of this module loaded on first use, and the package each is
#: public in: the store checker's findings (re-exported here as the other
#: results are) and the types of search, of workflow records and of
#: aggregates that the roles' signatures name.
_LAZY_TYPES = {
    "CheckReport": "chronos_trio.store",
    "Finding": "chronos_trio.store",
    "Problem": "chronos_trio.store",
    "Repair": "chronos_trio.store",
    "finding_order": "chronos_trio.store",
    "JobQuery": "chronos_trio.store",
    "SearchPage": "chronos_trio.store",
    "WorkflowRecord": "chronos_trio.records",
    "KindCounts": "chronos_trio.records",
    "MinuteCounts": "chronos_trio.records",
}


def __getattr__(name: str) -> object:
    """A name of :data:`_LAZY_TYPES`, loaded when first asked for (through
    its public package, so it reports that module however it was reached)
    and bound here from then on. Raises AttributeError for any other name."""
    if name not in _LAZY_TYPES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(_LAZY_TYPES[name]), name)
    globals()[name] = value
    return value


def load_lazy_types() -> None:
    """Load and bind every name of :data:`_LAZY_TYPES`: what
    ``typing.get_type_hints`` needs to resolve every role method's
    signature (it reads this module's namespace, not its ``__getattr__``)."""
    for name in _LAZY_TYPES:
        __getattr__(name)


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
    ) -> LeaseResult:
        """Lease at most ``count`` ready jobs, in lease order within a queue
        (highest priority first, then oldest due; however the queue is
        partitioned).

        ``count`` is shared among the queues by weight
        (:func:`~chronos_trio.store.share_by_weight`); a share a queue cannot
        use goes to the others, so a batch comes back short only for want of
        ready jobs (or when concurrent leasers took them first). Within a
        queue, a job that flow control holds back (a rate or concurrency
        limit: it stays ready, untouched) or dead-letters as expired is
        replaced by the queue's next ready job in that order, whatever its
        partition: a queue gives the first jobs of its order that may start,
        up to its share, looking at no more than its share + 256 ready jobs.
        (The shares count the ready jobs as the store saw them when the call
        began, held-back ones included: a share that held-back jobs leave
        unused is not passed to another queue. A RedisStore on a Cluster
        takes at most ``CLUSTER_LEASE_ROUNDS`` = 4 rounds to look past
        held-back jobs in several partitions; past them its batch may be
        short.) With
        ``strict`` the queues are in priority order instead, weights ignored
        (:func:`~chronos_trio.store.share_strictly`): a queue's jobs are
        leased only once every queue before it has no ready job left to give
        this call (as far as the store saw when the call began). Paused
        queues, queues with weight <= 0 and unknown queues are skipped;
        ``count`` <= 0 leases nothing. Each leased job's ``attempts`` grows by
        one and it gets ``worker_id`` as owner and a fresh fencing token,
        unique among all leases this store ever issued, expiring
        ``lease_duration`` (> 0) seconds from the store's now; its
        ``leased_at`` is the store's now when it was leased.

        Every leased job is complete (kind, payload, attempts, ...): a ready
        record lacking one is set aside (see the module's conventions) and
        replaced by the next ready job. The :class:`LeaseResult` holds the
        leased jobs, what was set aside, and what flow control expired or
        held back.

        Raises StoreError when the store cannot be reached; jobs leased by a
        call whose reply was lost stay leased until their lease expires and
        :meth:`recover_expired` takes them back (that attempt counts).
        """

    @abc.abstractmethod
    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        """Extend each lease to ``lease_duration`` seconds from the store's
        now; one result per lease, in order (:attr:`RenewResult.renewed`).

        ``False`` (and nothing changes) for a lease that is no longer held
        with that token: settled, taken back, leased again, deleted, or
        expired, even if not yet recovered (an expired lease is lost for
        good); also for a lease whose record, held with that token, was
        damaged (dead-lettered) or is of a newer format (left alone), which
        the result reports in ``aside``.

        A renewed lease whose job an abort was asked for (:meth:`AdminRole.abort`)
        is listed in the result's ``aborted``:
        the flag reaches the worker in this reply, with no call of its own,
        every renewal until the lease ends. Raises StoreError when the store
        cannot be reached (renew again: renewing twice is harmless).
        """

    @abc.abstractmethod
    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        """Apply each outcome if its lease is still held with its token (and
        unexpired); ``False`` and no change otherwise. One result per
        settlement, in order (:attr:`SettleResult.settled`); of two
        settlements of one lease only the first applies.

        SUCCEEDED drops the job, or keeps it as ``succeeded`` until
        ``retain_for`` (> 0) seconds have passed (retained: listed and
        counted by the admin reads, trimmed by :meth:`AdminRole.trim`); a
        success kept only for its result (``retain_for`` 0, ``result_ttl``
        > 0) or its waiters is readable (``get_job``, ``outcome``) but not
        retained: never listed or counted, it goes by itself. RETRY records
        ``error`` and makes the job ``retry_wait``, due ``retry_delay`` seconds from now
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
        ``False``, and the result lists them in ``aside``.

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
        (see :class:`LeaseResult`): do not return for them, only for a
        wake-up (which a settle that frees a concurrency slot also sends).

        Idle workers block here instead of polling fast. Raises StoreError
        when the store cannot be reached. A negative ``timeout`` is a
        ValueError on the MemoryStore.
        """

    async def wait_lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
        timeout: float,
    ) -> LeaseResult | None:
        """An idle worker's :meth:`wait_ready` and :meth:`lease` in one step
        (optional): wait as ``wait_ready(names, timeout)`` does, except that
        the caller's last lease (or wait_lease) is the look (it found no
        ready job, none held back), then lease as ``lease`` does, and return
        what that lease did (often nothing: a timeout, a job another worker
        took). The caller counts the lease from its call (the store may
        grant it up to a tenth of ``lease_duration`` later). Cancelled, it
        leaves no job leased to the caller that the caller does not know of
        for longer than the lease (a store gives such jobs back at once
        where it can).

        None (the default): not offered here, for these queues or now;
        nothing was leased, and the caller waits with ``wait_ready`` and
        leases. Raises StoreError as ``lease`` does.
        """
        return None


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
        moved meanwhile. Succeeded jobs count only while retained (see
        :meth:`WorkerRole.settle`: not one kept only for its result or its
        waiters), as :meth:`list_jobs` lists them; a discarded job kept for
        its waiters counts in no state. Raises StoreError when the store
        cannot be reached.
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
        retry_wait), lease order (ready: highest priority first, then due
        time, as :meth:`WorkerRole.lease` takes them), lease expiry (leased)
        or finish time (succeeded, dead, aborted), then job ID; so a page of
        ready jobs shows what runs next. (Priority and due time are one
        number, ``run_at - priority * 1e10`` as a double: at a priority
        other than 0, due times less than about 20 µs apart may tie, and
        then go by job ID.) ``offset`` (>= 0) and ``limit`` (>= 0) page
        through them, and ``limit`` 0 lists nothing. An unknown queue lists
        nothing. Pages are read one by one, so jobs that move between two
        calls may be skipped or listed twice. Succeeded jobs are listed
        while retained (``retain_for`` > 0, or a workflow's), until trimmed;
        a success kept only for its result or its waiters is never listed
        (read it with :meth:`get_job`), nor is a discarded job kept for its
        waiters. (A RedisStore indexes succeeded
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
        A workflow job keeps its place in its flow in the same atomic step
        (see :class:`FlowRole`).

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
    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        """Make up to ``limit`` dead jobs of ``queue`` ready again (due now),
        the oldest dead first, with attempts reset to 0; ``limit`` None (or
        0) requeues every dead job (aborted jobs are never requeued).
        Returns how many were requeued (:attr:`CountResult.count`; records of
        a newer format stay dead, untouched, and are in its ``aside``).

        Raises StoreError when the store cannot be reached; some may have
        been requeued then.
        """

    @abc.abstractmethod
    async def purge_queue(self, queue: str, *, limit: int) -> CountResult:
        """Delete up to ``limit`` (>= 1) jobs of ``queue`` that are not
        leased: scheduled, ready, retry_wait, retained succeeded, dead and
        aborted ones, each exactly as :meth:`delete_job` deletes one (out of
        every index, its notes with it, its unique key released, its result
        waiters woken). Leased jobs are left to finish: their workers settle
        them as usual, fenced by their tokens (a success then keeps or drops
        the job as it would have, so a purge never cancels a running job;
        abort those first to stop them). A success kept only for its result
        or its waiters, and a discarded job kept for its waiters, are not
        listed and are not purged: they go by themselves. Another queue's
        jobs, the queue's topology and whether it is paused are untouched.

        Atomic per job (a job is deleted whole or left whole, never half
        removed); a backend deletes each call's jobs in one batch per
        partition. Returns how many jobs were deleted
        (:attr:`CountResult.count`): call it again until it deletes none to
        empty the queue of everything but its leased jobs (jobs enqueued
        meanwhile may be deleted too). A record of a newer format is left as
        it is (in ``aside``). An unknown queue deletes nothing.

        Raises StoreError when the store cannot be reached (some jobs may
        have been deleted then: purging again is harmless).
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
    ) -> CountResult:
        """Delete the retained succeeded jobs of ``queues`` whose retention
        has passed, their dead jobs that finished ``dead_max_age`` or more
        seconds ago, the oldest dead jobs beyond ``dead_max_count`` per
        queue (``dead_max_count`` 0: every dead job; aborted jobs count as
        dead jobs here), and, beyond ``keep_succeeded`` retained succeeded
        jobs per queue, those whose retention ends first, retention left or
        not (with one retention period for every job: the oldest; 0: every
        retained one). A job kept only for its result or its waiters is not
        retained here (it goes when they are done, and is not counted).
        None turns a limit off.
        Returns how many jobs were deleted (:attr:`CountResult.count`: only a
        record in the state of its index is deleted; others are set aside,
        in its ``aside``, see the conventions).

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

    def locate(self, placement: Placement | None) -> tuple[int, int] | None:
        """The ``(version, partition)`` a placement this store made names
        (``Job.placement``, ``EnqueueResult.placement``, a handle's), for
        display and topology tools; None when it names none (None: not
        known). The one way to read a placement above the store."""
        return locate(placement)

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


class ScheduleStoreRole(StoreRole):
    """Schedules kept in the store (added, changed, paused, resumed and
    removed at run time), under a leadership ``name`` beside its trigger
    bookkeeping (:class:`LeadershipRole`), so the leader of ``name`` fires
    them. The store keeps each schedule's definition as opaque text; the
    runtime validates it before it is stored.

    Every applied edit is atomic and moves the name's ``version`` up by one,
    so a leader checks one number per tick (:meth:`schedules_version`) and
    reads the schedules (:meth:`stored_schedules`) only when it moved.
    """

    @abc.abstractmethod
    async def edit_schedule(
        self, name: str, edit: ScheduleEdit, schedule_id: str, definition: str | None = None
    ) -> int | None:
        """Apply one ``edit`` to schedule ``schedule_id`` of ``name`` in one
        atomic step, stamping it with the store's now; the name's new
        version, or None, changing nothing, when refused: ADD of an id that
        is stored, any other edit of an id that is not.

        ADD stores ``definition`` (not paused); CHANGE replaces it and keeps
        the paused flag; PAUSE and RESUME set the flag (also when it was
        set already); REMOVE forgets the schedule. A schedule's last fired
        time (:meth:`LeadershipRole.schedule_last_fired`) is not touched by
        any edit: a changed (or removed and added again) schedule of the
        same id never fires a trigger time at or before it again.

        Raises ``ValueError`` when ``definition`` is missing for ADD and
        CHANGE (or given for the others), or ``schedule_id`` is empty;
        StoreError when the store cannot be reached (the edit may have been
        applied: read the schedules to see).
        """

    @abc.abstractmethod
    async def schedules_version(self, name: str) -> int:
        """The version of ``name``'s stored schedules: 0 before any edit,
        then one more per applied edit (never reused, also when every
        schedule is removed). Raises StoreError when the store cannot be
        reached."""

    @abc.abstractmethod
    async def stored_schedules(self, name: str) -> StoredSchedules:
        """Every stored schedule of ``name`` (by id) and the version they
        are at, read in one atomic step. Raises StoreError when the store
        cannot be reached."""


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
    ``records._workflow``) and its result (None: none kept); or one that
    went dead (``failed``) whose continuation holds failure handling, with
    its ``kind``, the ``error`` recorded and its ``attempts``."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    queue: str
    #: Where the store keeps the job (opaque, see ``records._placement``).
    placement: Placement
    then: str
    result: bytes | None
    failed: bool = False
    kind: str = ""
    error: str = ""
    attempts: int = 0
    #: The entry of a deleted job, kept by the store beside its outbox entry
    #: until :meth:`FlowRole.finish_continuations` (store-specific bookkeeping).
    kept: bool = False


@attrs.frozen
class GroupStatus:
    """How far a workflow group is: how many members ``arrived`` (of a group
    that allows failures: succeeded or failed for good), and the indexes of
    those that ``failed`` (in order)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    arrived: int = 0
    failed: tuple[int, ...] = ()


class FlowRole(StoreRole):
    """Workflow continuations: the outbox the fenced success settle fills
    (a job enqueued with ``NewJob.then`` that succeeds is put there in the
    same atomic step, and is kept :data:`~chronos_trio.records._workflow.
    WORKFLOW_KEEP` seconds), and group arrivals. The fenced dead settle (and
    a recovery that dead-letters an expired lease) puts a job there too when
    its continuation holds failure handling (it starts with
    :data:`~chronos_trio.records._workflow.FAILURE_MARK`); a dead job
    without it, a retry and a stale token's settle never do. So does, for
    such a job, the step that aborts it (``abort`` of a waiting job, the
    fenced ABORTED settle or a retry an abort overrides, a recovery of a
    flagged lease): a failed entry, error the abort's; and the fenced
    DISCARD settle: a failed entry kept beside the outbox as a deleted
    job's, error ``discarded_error(<its error>)``
    (``records._flow_outcomes``). An entry whose job is neither succeeded,
    dead nor aborted when read (re-run meanwhile) leaves the outbox unread:
    its next end puts it back.

    Deleting a workflow job (``delete_job``, ``purge_queue``, ``trim``) keeps its
    place in its flow, in the same atomic step: an end of it still in the
    outbox stays readable, whole (``Continuation.kept``: the store keeps it
    beside the outbox until :meth:`finish_continuations`); a job that had
    not ended (scheduled, ready, retry_wait) whose continuation holds
    failure handling goes to the outbox as failed, with
    :data:`~chronos_trio.records._flow_outcomes.DELETED_ERROR` and its
    attempts. Any other deleted job leaves no entry."""

    @abc.abstractmethod
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        """Up to ``limit`` outbox entries of ``queues`` (oldest first within a
        partition; a Redis store reads ``limit`` of each partition), left in
        the outbox until :meth:`finish_continuations`: a continuer that dies
        before then leaves them for the next. Raises StoreError."""

    @abc.abstractmethod
    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        """Remove handled outbox entries (an entry already gone is fine)."""

    async def next_continuations(
        self, queues: Sequence[str], limit: int, *, finished: Sequence[Continuation]
    ) -> list[Continuation]:
        """:meth:`finish_continuations` of ``finished``, then
        :meth:`continuations` (none of ``finished`` is among them): a
        continuer's next pass and the end of its last in as few round trips
        as the store can (this default makes the two calls; a Redis store
        makes one). If it raises, nothing of ``finished`` is lost: handling
        an entry twice is harmless. Raises StoreError."""
        await self.finish_continuations(finished)
        return await self.continuations(queues, limit)

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

    @abc.abstractmethod
    async def group_status(self, group_ids: Sequence[str]) -> list[GroupStatus]:
        """Per group, in order, how many members arrived and which of them
        failed (a result starting with
        :data:`~chronos_trio.records._workflow.FAILED_OUTCOME`): one atomic
        read per group; a group unknown or past its ttl has none arrived.
        Read-only. Raises StoreError."""


class WorkflowRole(StoreRole):
    """Workflow records: each started workflow's definition, kept under its
    ID (``records._flow_control.WorkflowRecord``), and its cancel mark.

    A record is saved when the workflow starts, before its first jobs; it
    lists every job the flow has or will have (their IDs follow from the
    tree), so cancelling and viewing need no index of jobs. A record lasts
    the ``ttl`` it was saved with (``records._flow_keep.record_keep``:
    ``WORKFLOW_KEEP`` plus the flow's delays), or longer when kept alive
    (:meth:`keep_workflows`), its mark with it. On Redis a record is one hash in the
    workflow's own slot (``{ns:wf:<id>}:w``)."""

    @abc.abstractmethod
    async def save_workflow(self, workflow_id: str, tree: str, first_kind: str, ttl: float) -> bool:
        """Save the record of workflow ``workflow_id`` (``tree``: its
        encoded definition), created now (store clock), kept ``ttl``
        seconds. True when saved now; False when a record of that ID exists
        (starting the same workflow again is the same run: the stored record
        stands, unchanged). Atomic. Raises StoreError."""

    async def start_workflow(
        self,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """Start a workflow: save its record (as :meth:`save_workflow`),
        then enqueue its first ``jobs`` (as ``enqueue_many``: one result per
        job, in order). A job of ``jobs`` is never left to run without the
        record saved: when the record cannot be saved this raises StoreError
        and no job of this call is left to run (a store that writes both in
        one round trip aborts the jobs it created then). A StoreError for
        any other reason is the enqueue's (the record may be saved; starting
        the same ID again is the same run). What ``enqueue_many`` raises.

        This default makes the two calls, one after the other (a store of
        the core roles and this one needs nothing more); Redis sends both in
        one round trip."""
        await self.save_workflow(workflow_id, tree, first_kind, ttl)
        core = cast("WorkerRole", self)  # WorkflowRole is offered beside the core
        return await core.enqueue_many(jobs)

    @abc.abstractmethod
    async def workflow_record(self, workflow_id: str) -> WorkflowRecord | None:
        """The record of ``workflow_id``, None when there is none (never
        started with a record, or expired). Raises StoreError."""

    @abc.abstractmethod
    async def cancel_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """Mark ``workflow_id`` cancelled, now (store clock), atomically
        with reading its record; a mark set before stands (idempotent).
        Returns the record with its mark; None when there is none (nothing
        is marked then). Continuers check the mark before and after they
        enqueue a flow's next jobs. Raises StoreError."""

    @abc.abstractmethod
    async def cancelled(self, workflow_ids: Sequence[str]) -> set[str]:
        """Those of ``workflow_ids`` that are marked cancelled (one round
        trip per store node). Raises StoreError."""

    async def keep_workflows(self, keeps: Mapping[str, float]) -> dict[str, float]:
        """Make the record of each workflow ID of ``keeps`` last at least
        that many seconds from now (store clock; never shortened), each
        atomically: what keeps a running flow's record alive (the
        continuer calls it as the flow advances). Returns, per record found,
        how many seconds it lasts now; a workflow without a record is left
        out (nothing is made). One round trip per store node. Raises
        StoreError. This default keeps nothing and returns {} (a store whose
        records never lapse while their flows run)."""
        return {}


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


class NotesRole(StoreRole):
    """A running job's notes: its latest progress and its log lines
    (``records._notes``), written by the job's lease holder in batches off
    the settle path (the worker's notes flusher) and read by job handles,
    the command line and the dashboard.

    Notes live and die with the job's record: kept while it is (retained
    successes and dead jobs included, across retries, requeues and
    ``run_now``), gone when it goes (dropped after success, trimmed,
    deleted). Log lines of every attempt are kept, each with its attempt,
    up to :data:`~chronos_trio.records._notes.MAX_NOTE_LINES` (the newest).
    """

    @abc.abstractmethod
    async def write_notes(self, writes: Sequence[NoteWrite]) -> NotesResult:
        """Apply each write whose lease is still held: the job is leased
        with the write's token and its lease has not expired (store clock).
        Its ``progress`` (when given) replaces the job's, its ``lines`` are
        appended after the job's, each stamped with the job's ``attempts``
        and the store's now; past ``MAX_NOTE_LINES`` the oldest lines are
        dropped (counted in the job's ``dropped`` and the result's). A write
        whose lease was lost changes nothing and is listed in ``refused``;
        a record the store cannot read is treated so, and left as it is.
        Each job's write is atomic; the batch costs one round trip (per
        partition at most). Writes are applied in order (two of one job:
        both, in order). An empty batch does nothing.

        Raises ``ValueError`` (or ``TypeError``), before writing anything,
        when a write breaks the bounds of ``records._notes`` (see
        :func:`~chronos_trio.records._notes.check_write`). Raises
        StoreError when the store cannot be reached: some writes may have
        been applied then, and sending the batch again may append its lines
        twice (progress is only replaced).
        """

    @abc.abstractmethod
    async def job_notes(self, ref: JobRef) -> JobNotes | None:
        """The notes of the job of ``ref``: ``progress`` None and no lines
        when it has none yet; None when no such job exists (see
        :meth:`ResultRole.outcome`). Raises StoreError when the store cannot
        be reached."""


class SearchRole(StoreRole):
    """Searching jobs by what an operator knows of them (the dashboard's
    search page, ``python -m chronos_trio search``, ``Inspector.search``).

    Not the hot path, and it adds nothing to it: a search reads what the
    other operations already keep (no index is written for it).
    """

    @abc.abstractmethod
    async def search_jobs(
        self,
        query: JobQuery,
        *,
        cursor: str | None = None,
        limit: int = 50,
        scan_limit: int = SCAN_LIMIT,
    ) -> SearchPage:
        """Jobs that match ``query`` (see ``store._search``: every filter
        given must hold; what is searched is what :meth:`AdminRole.list_jobs`
        lists, a due scheduled job shown ready where the store shows it so),
        at most ``limit`` (1 to 1000) per call, reading at most
        ``scan_limit`` (>= 1) records: the page's ``cursor`` goes on from
        where this call stopped (None: every job was looked at), and its
        ``partial`` says the scan bound stopped it before the page was full.
        Jobs of a query's ``worker`` filter are read with their history.
        Calls are not one snapshot: a job that moves between two calls may
        be skipped or found twice.

        Raises ``ValueError`` for a bad ``limit``/``scan_limit`` or a cursor
        this store did not give (search again without it), and StoreError
        when the store cannot be reached.
        """


class AggregatesRole(StoreRole):
    """Per-minute aggregates of what the workers ran (``records._aggregates``):
    per (queue, kind, minute of the store's clock) the outcomes succeeded,
    failed (dead-lettered) and retried, and a run-time histogram. Workers add
    to them off the settle path (the ``aggregator`` actor, one call per flush
    interval); the dashboard reads the last hours.

    Memory is bounded: each (queue, kind, minute) is one small record (see
    ``docs/metrics.md`` for the bytes per backend), kept ``keep`` seconds
    after its minute ends, then expired or trimmed by the store.
    """

    @abc.abstractmethod
    async def add_aggregates(self, counts: Sequence[KindCounts], *, keep: float) -> None:
        """Add each of ``counts`` to its (queue, kind) in the current minute
        of the store's clock (one minute for the whole batch), creating it
        at zero when absent; the minute is kept at least ``keep`` seconds
        after it ends and may then go (minutes older than ``keep`` are
        removed by the store, by expiry or by this call). Several counts of
        one (queue, kind) in a batch add up. Each (queue, minute)'s additions
        are atomic; the batch costs one round trip (per node at most). An
        empty batch does nothing.

        Raises ``ValueError`` or ``TypeError``, before adding anything, for
        counts :func:`~chronos_trio.records._aggregates.check_counts` refuses
        or a ``keep`` outside [``MIN_KEEP``, ``MAX_KEEP``]. Raises StoreError
        when the store cannot be reached: some queues' counts may have been
        added then (adding them again counts them twice; a worker puts them
        back and adds them with its next write, so a lost reply may count a
        few runs twice, never lose them).
        """

    @abc.abstractmethod
    async def aggregates(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        """The aggregates of ``queues`` from the minute holding ``since``
        (epoch seconds, store clock) on, ordered by queue (as given), minute,
        then kind; minutes nobody added to are absent. Unknown queues have
        none. Raises StoreError when the store cannot be reached."""


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
    NotesRole,
    ScheduleStoreRole,
    SearchRole,
    WorkflowRole,
    AggregatesRole,
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
    NotesRole,
    ScheduleStoreRole,
    SearchRole,
    WorkflowRole,
    AggregatesRole,
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
