"""In-memory store: the typed reference model of the store contract.

The MemoryStore is the contract (:mod:`chronos_trio.store`) written out in
plain Python, to be read: each operation is one transition of the job
lifecycle (``docs/architecture.md``: scheduled -> ready -> leased ->
succeeded, retry_wait or dead), applied to typed ``Job`` records. It is the
embedded default and what tests run on, and the reference every other
backend is compared with (``chronos_trio.testing.differential``).

Every operation runs synchronously between two Trio checkpoints, so each is
atomic with respect to every other task of the process. Its clock defaults to
Trio's clock anchored to the wall clock, so under ``autojump_clock`` due times
and lease expiry advance with virtual time and timing tests run instantly.

It lives in one process: it cannot be shared by several worker processes.

Its records are written only by its own typed transitions, so each one is
usable and none is judged. The one seam where a record is judged before it
is used is :meth:`MemoryStore._damage` (with :meth:`MemoryStore._shown`
for reads): test support plugs the field checks of the one record judgement
(``store/_record_rules.py``) in there, to test what a store does with a
record damaged behind its back (``chronos_trio.testing.DamageableMemoryStore``).
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs
import trio

from ...records import _attempts, _control, _jobs, _unique
from ...records._aggregates import KindCounts, MinuteCounts, check_add
from ...records._attempts import Attempt
from ...records._flow_control import WorkflowRecord
from ...records._flow_outcomes import DELETED_ERROR, discarded_error
from ...records._jobs import (
    FINISHED_STATES,
    EnqueueResult,
    Job,
    JobOutcome,
    JobRef,
    JobState,
    LeasedJob,
    LeaseRef,
    NewJob,
    with_history,
)
from ...records._notes import JobNotes, NoteWrite, check_write
from ...records._placement import Placement
from ...records._unique import Unique
from ...records._workers import WorkerInfo
from ...records._workflow import (
    FAILED_OUTCOME,
    WORKFLOW_KEEP,
    Arrival,
    holds_failure_handling,
    nothing_follows,
)
from .. import _checking, _flag, _partitioning
from .._admission import Verdict
from .._attempt_ends import recovered_attempt, settled_attempt
from .._partitioning import partition_of, share_by_weight, share_strictly
from .._results import Successor
from .._roles import (
    DAMAGED_RECORD,
    LEASE_GRACE,
    NOTHING_SET_ASIDE,
    AbortResult,
    CheckReport,
    Continuation,
    CountResult,
    GroupStatus,
    Leadership,
    LeaseResult,
    LimitUsage,
    NotesResult,
    PromoteResult,
    QueueStats,
    QueueTopology,
    QueueVersion,
    QueueWeight,
    RecoverResult,
    RenewResult,
    ScheduleEdit,
    SetAside,
    SettleKind,
    Settlement,
    SettleResult,
    Store,
    StoredSchedules,
    TopologyError,
    TriggerResult,
    VersionState,
)
from .._search import SCAN_LIMIT, JobQuery, SearchPage, check_search, collect, page_of
from .._search import decode_cursor as _decode_cursor
from .._settling import WAITED_KEEP, SettleTally, settled_kind, unclaimed
from .._topology_placement import locate as _locate
from .._topology_placement import topology_placement as _placement_of
from . import _aggregates as _memory_aggregates
from . import _check as _memory_check
from . import _control as _memory_control
from . import _notes as _memory_notes
from . import _schedules as _memory_schedules
from . import _unique as _memory_unique
from . import _workers as _memory_workers
from . import _workflows as _memory_workflows

#: ``(due-or-expiry time, sequence, job id, record version)`` — a heap entry is
#: valid only while the record still has that version (lazy deletion).
_HeapEntry = tuple[float, int, str, int]


@attrs.frozen
class _Index:
    """One kind of heap: its name and the states of the records it holds."""

    name: str
    states: frozenset[JobState]


_DUE = _Index("due", frozenset({JobState.SCHEDULED, JobState.RETRY_WAIT}))
_READY = _Index("ready", frozenset({JobState.READY}))
_LEASED = _Index("leased", frozenset({JobState.LEASED}))
#: States of a workflow job whose end may be in the outbox: a success, or a
#: failure (dead, aborted) whose continuation holds failure handling.
_OUTBOXED = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.ABORTED})
#: States of a job that has not ended (nor is running).
_UNENDED = frozenset({JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT})


def _outbox_entry(job: Job, queue: str) -> Continuation:
    """The outbox entry of ``job`` (succeeded, or dead or aborted: failed),
    which has a continuation."""
    assert job.then is not None
    if job.state is not JobState.SUCCEEDED:
        return Continuation(
            job.id, queue, job.placement, job.then, None,
            failed=True, kind=job.kind, error=job.last_error, attempts=job.attempts,
        )  # fmt: skip
    return Continuation(job.id, queue, job.placement, job.then, job.result)


@attrs.define
class _Record:
    job: Job
    version: int = 0
    #: The queue whose heaps index the record (a job never changes queue):
    #: what the store reads, never the record's own ``queue`` field.
    home: str = attrs.field(default=attrs.Factory(lambda rec: rec.job.queue, takes_self=True))
    #: A succeeded job's end of retention (its record, and result, go then).
    retain_until: float = 0.0
    #: A unique job's key and mode (see ``memory._unique``).
    unique: Unique | None = None
    #: A succeeded job retained for inspection (or a workflow's): what the
    #: RedisStore indexes as succeeded, and ``keep_succeeded`` caps.
    retained: bool = False
    #: Stored marked as waited on (``NewJob.keep_outcome``): it ends as if a
    #: result waiter were registered (the RedisStore's field ``w``).
    keep_outcome: bool = False
    #: A discarded job kept only for its waiters (until ``retain_until``):
    #: dead, but in no dead index (not listed, counted, requeued or run).
    discarded: bool = False
    #: Set by an abort of the leased job: the ``last_error`` it ends with
    #: (renewals report it; its settle or recovery makes the job aborted).
    abort: str = ""
    #: Its attempts that ended without success (``Job.history``), kept
    #: beside the job: only reads that show the whole record attach them.
    history: tuple[Attempt, ...] = ()
    #: The job's progress and log lines (None: none yet), kept with the
    #: record (see ``memory._notes``).
    notes: _memory_notes.Notes | None = None

    @property
    def indexed(self) -> bool:
        """Whether the record is in a state index, so listed and counted: not
        a discarded job, nor a success kept only for its result or its
        waiters (the RedisStore keeps those in no index either)."""
        if self.discarded:
            return False
        return self.retained or self.job.state is not JobState.SUCCEEDED


@attrs.define
class _Aside:
    """What one operation set aside so far (see :class:`SetAside`)."""

    dead: list[Job] = attrs.field(factory=list)

    def report(self) -> SetAside:
        return SetAside(tuple(self.dead)) if self.dead else NOTHING_SET_ASIDE


_LEASE = Verdict.LEASE


@attrs.define
class _LeaseBatch:
    """What one lease call did so far (see :class:`LeaseResult`)."""

    worker_id: str
    now: float
    #: When the leases it hands out end.
    expires_at: float
    aside: _Aside = attrs.field(factory=_Aside)
    leased: list[LeasedJob] = attrs.field(factory=list)
    expired: list[Job] = attrs.field(factory=list)
    #: The earliest next permit of a rate limit that held a job back.
    held_until: float | None = None
    #: Whether a concurrency limit held a job back.
    capped: bool = False

    def held_back(self, until: float | None) -> None:
        """Flow control held a job back until ``until`` (None: a
        concurrency limit, with no time to wait for)."""
        if until is None:
            self.capped = True
        elif self.held_until is None or until < self.held_until:
            self.held_until = until

    def result(self) -> LeaseResult:
        held_for = None if self.held_until is None else max(0.0, self.held_until - self.now)
        return LeaseResult(
            tuple(self.leased), self.aside.report(), tuple(self.expired), held_for, self.capped
        )


class _TrioAnchoredClock:
    """Trio's clock shifted to read as Unix time; re-anchored per ``trio.run``."""

    def __init__(self) -> None:
        self._token: object = None
        self._offset = 0.0

    def __call__(self) -> float:
        token = trio.lowlevel.current_trio_token()
        if token is not self._token:
            self._token = token
            self._offset = time.time() - trio.current_time()
        return self._offset + trio.current_time()


def _stored_control(new: NewJob, now: float) -> _control.JobControl | None:
    """A new job's flow control as stored: a unique job's with its key's run
    slot (see ``records._unique.with_run_slot``), expiry made absolute."""
    control = new.control if new.unique is None else _unique.with_run_slot(new.control, new.unique)
    return None if control is None else control.stored(now)


class MemoryStore(Store):
    """A :class:`Store` held in this process's memory: the typed reference
    model of the contract (see the module docstring).

    ``clock`` returns the store's time in epoch seconds; by default it is
    Trio's clock anchored to the wall clock (see module docstring).

    Every record is a typed ``Job`` written by the store's own transitions,
    so every record is usable: no operation sets one aside, and every
    result's ``aside`` is empty. (A heap entry whose record is gone or was
    rewritten is stale, as after any deletion: the heaps delete lazily.)
    """

    shared_across_processes = False
    #: A chain link's success enqueues its successor in the settle itself
    #: (``Settlement.successor``; see :meth:`_continue_chain`).
    continues_in_settle = True
    #: ... and leases it at once to the settling worker when it asks
    #: (``Successor.lease_to``; ``SettleResult.leased``).
    leases_in_settle = True

    def __init__(
        self, *, clock: Callable[[], float] | None = None, default_partitions: int = 1
    ) -> None:
        self._clock: Callable[[], float] = clock or _TrioAnchoredClock()
        self._default_partitions = default_partitions
        self._records: dict[str, _Record] = {}
        self._due: dict[str, list[_HeapEntry]] = {}
        self._ready: dict[str, list[_HeapEntry]] = {}
        self._leased: dict[str, list[_HeapEntry]] = {}
        self._known_queues: set[str] = set()
        self._paused: set[str] = set()
        self._topology: dict[str, list[QueueVersion]] = {}
        self._seq = itertools.count()
        self._token_prefix = secrets.token_hex(4)
        self._tokens = itertools.count(1)
        self._ready_changed = trio.Event()
        self._scheduled_changed = trio.Event()
        self._leaders: dict[str, Leadership] = {}
        self._epochs: dict[str, int] = {}
        self._last_fired: dict[str, dict[str, float]] = {}
        self._schedules = _memory_schedules.ScheduleTables()
        #: Result waiters: job ID -> the event its finishing (or deletion) sets.
        self._done: dict[str, trio.Event] = {}
        self._unique = _memory_unique.UniqueLocks()
        self._control = _memory_control.ControlState()
        self._aggregates = _memory_aggregates.Aggregates()
        #: Workflow outbox: job ID -> queue, oldest first (see FlowRole).
        self._outbox: dict[str, str] = {}
        #: Outbox entries of deleted jobs, kept whole (see ``_keep_flow_place``).
        self._gone: dict[str, Continuation] = {}
        self._outbox_filled = _flag.Flag()
        #: Groups: ID -> (expiry, size, results by member index).
        self._groups: dict[str, tuple[float, int, dict[int, bytes | None]]] = {}
        #: The worker registry (see ``memory._workers``).
        self._workers = _memory_workers.WorkerRegistry()
        #: Chain links whose successor a settle enqueued (no outbox entry),
        #: and whether the settlement being applied did (see ``settle``).
        self.chain_settles = 0
        self._chain_continued = False
        self._chain_leased: LeasedJob | None = None
        #: Workflow records and cancel marks (see ``memory._workflows``).
        self._workflows = _memory_workflows.WorkflowRecords()

    # -- the judgement seam ------------------------------------------------------------
    def _damage(self, job_id: str, rec: _Record, index: _Index | None) -> str:
        """Why record ``rec`` (stored under ``job_id``; met at the top of
        ``index``, or None when reached otherwise) cannot be used, or "" when
        it can. Always "": the store writes its typed records only through its
        own transitions. The one seam where a record is judged: test support
        overrides it to judge records it damaged behind the store's back
        (``chronos_trio.testing.DamageableMemoryStore``); whatever it names
        is dead-lettered and reported in the operation's ``aside``."""
        return ""

    def _shown(self, job_id: str, rec: _Record) -> Job:
        """Record ``rec`` as reads (``get_job``, ``list_jobs``, ``stats``, an
        enqueue that finds it) show it: as it is (see :meth:`_damage`)."""
        return rec.job

    def _set_aside(
        self, job_id: str, rec: _Record, aside: _Aside, index: _Index | None = None
    ) -> str:
        """Empty when :meth:`_damage` finds nothing in ``rec``; otherwise
        dead-letter it into ``aside`` and say why."""
        reason = self._damage(job_id, rec, index)
        if reason:
            self._dead_letter_damaged(job_id, rec, reason)
            aside.dead.append(self._shown(job_id, rec))
        return reason

    def _dead_letter_damaged(self, job_id: str, rec: _Record, reason: str) -> Job:
        """Set aside a record that cannot be used: dead, ``last_error``
        DAMAGED_RECORD + ``reason``, finished now, its lease cleared, stored
        under the ID and queue the store keeps it under (so it stays listed
        and trimmed with its queue); its other fields kept as they are, for
        an operator to see. Its unique key is given back."""
        dead = attrs.evolve(
            rec.job,
            id=job_id,
            queue=rec.home,
            state=JobState.DEAD,
            last_error=DAMAGED_RECORD + reason,
            finished_at=self._clock(),
            lease_token="",
            lease_owner="",
            lease_expires_at=None,
            damage="",
        )
        self._put(dead)
        self._release_unique(job_id)
        return dead

    # -- helpers -----------------------------------------------------------------
    def _put(self, job: Job) -> None:
        """Store ``job`` as the new version of its record and index it."""
        rec = self._records.get(job.id)
        if rec is None:
            rec = self._records[job.id] = _Record(job)
        rec.version += 1
        rec.job = job
        self._known_queues.add(job.queue)
        entry: _HeapEntry
        if job.state in (JobState.SCHEDULED, JobState.RETRY_WAIT):
            entry = (job.run_at, next(self._seq), job.id, rec.version)
            heapq.heappush(self._due.setdefault(job.queue, []), entry)
            self._notify_scheduled()
        elif job.state is JobState.READY:
            # highest priority first, due order within a level
            control = job.control
            score = (
                job.run_at
                if control is None
                else _control.ready_score(job.run_at, control.priority)
            )
            entry = (score, next(self._seq), job.id, rec.version)
            heapq.heappush(self._ready.setdefault(job.queue, []), entry)
            self._notify_ready()
        elif job.state is JobState.LEASED:
            assert job.lease_expires_at is not None
            entry = (job.lease_expires_at, next(self._seq), job.id, rec.version)
            heapq.heappush(self._leased.setdefault(job.queue, []), entry)
        elif self._done and job.state in FINISHED_STATES:
            self._wake_waiters(job.id)

    def _delete(self, job_id: str) -> None:
        self._records.pop(job_id, None)
        if self._done:
            self._wake_waiters(job_id)

    def _wake_waiters(self, job_id: str) -> None:
        event = self._done.pop(job_id, None)
        if event is not None:
            event.set()

    def _valid(self, entry: _HeapEntry) -> Job | None:
        rec = self._records.get(entry[2])
        if rec is None or rec.version != entry[3]:
            return None
        return rec.job

    def _top(self, heap: list[_HeapEntry]) -> _HeapEntry | None:
        """Drop stale entries from the top of ``heap``; return the top entry
        of a current record: for reads that only ask whether something
        waits, and when (its score)."""
        while heap:
            if self._valid(heap[0]) is not None:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _peek(
        self, heap: list[_HeapEntry], index: _Index, aside: _Aside
    ) -> tuple[_HeapEntry, Job] | None:
        """Drop stale entries from the top of ``heap`` (an ``index`` heap),
        setting aside into ``aside`` records that cannot be used (see
        :meth:`_damage`); return the usable top entry and its job."""
        while (entry := self._top(heap)) is not None:
            rec = self._records[entry[2]]
            if not self._set_aside(entry[2], rec, aside, index):
                return entry, rec.job
            heapq.heappop(heap)  # dead-lettered: the entry is stale now
        return None

    def _release_unique(self, job_id: str) -> None:
        """The record ``job_id`` went dead or aborted: it gives back the
        unique key it holds (none: nothing happens)."""
        rec = self._records.get(job_id)
        if rec is not None:
            self._unique.release(rec.home, rec.unique, job_id)

    def _notify_ready(self) -> None:
        # Every waiter holds the same Event, so this wakes them all, and a
        # waiter cancelled meanwhile takes nothing from the others (the
        # contract: every waiter sees every wake-up).
        self._ready_changed.set()
        self._ready_changed = trio.Event()

    def _notify_scheduled(self) -> None:
        self._scheduled_changed.set()
        self._scheduled_changed = trio.Event()

    def _held(self, ref: LeaseRef, now: float) -> Job | None:
        """The job if ``ref`` still holds its lease (token matches, not expired)."""
        rec = self._records.get(ref.job_id)
        if rec is None:
            return None
        job = rec.job
        if job.state is not JobState.LEASED or job.lease_token != ref.token or not ref.token:
            return None
        if job.lease_expires_at is None or job.lease_expires_at <= now:
            return None
        return job

    def _versions(self, queue: str) -> list[QueueVersion]:
        versions = self._topology.get(queue)
        if versions is None:
            versions = [QueueVersion(1, self._default_partitions, VersionState.ACTIVE)]
            self._topology[queue] = versions
        return versions

    def _find(self, job_id: str, queue: str | None) -> Job | None:
        rec = self._records.get(job_id)
        if rec is None or (queue is not None and rec.home != queue):
            return None
        return rec.job

    # -- producing ---------------------------------------------------------------
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        await trio.lowlevel.checkpoint()
        return self._enqueue(jobs)

    def _enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """``enqueue_many`` without its checkpoint, for use inside another
        operation's single step. ValueError (nothing stored) for a unique
        job whose given ID does not route to its key's partition."""
        now = self._clock()
        # unique jobs' IDs first: a refused one must not follow stored ones
        ids = [
            _partitioning.routed_job_id(new, self._active(new.queue).partitions)
            if new.unique is not None or new.control is not None
            else new.id
            for new in jobs
        ]
        results = []  # a loop, not a comprehension: the enqueue hot path
        for new, job_id in zip(jobs, ids, strict=True):
            results.append(self._enqueue_one(new, job_id, now))
        return results

    def _enqueue_one(self, new: NewJob, job_id: str, now: float) -> EnqueueResult:
        """-> scheduled (due later) or ready (due now): a new record, unless
        one has ``job_id`` (nothing changes) or ``new`` is unique and its key
        is held (a duplicate: nothing changes; a debounce: the waiting holder
        takes the new payload and due time)."""
        existing = self._records.get(job_id)
        if existing is not None:
            ex = self._shown(job_id, existing)
            return EnqueueResult(job_id, False, ex.run_at, ex.placement)
        active = self._active(new.queue)
        run_at = new.run_at if new.run_at is not None else now + max(0.0, new.delay)
        state = JobState.READY if run_at <= now else JobState.SCHEDULED
        if new.unique is not None:
            claim, holder_id, holder = self._unique.claim(new, now, self._job_of)
            if claim is _memory_unique.Claim.DUPLICATE:
                return self._held_result(new, holder_id, holder, active)
            if claim is _memory_unique.Claim.REPLACE:
                assert holder is not None
                self._put(
                    attrs.evolve(
                        holder, payload=new.payload, headers=new.headers, run_at=run_at, state=state
                    )
                )
                return EnqueueResult(holder.id, False, run_at, holder.placement)
        job = Job(
            id=job_id,
            queue=new.queue,
            kind=new.kind,
            payload=new.payload,
            run_at=run_at,
            state=state,
            max_retries=new.max_retries,
            timeout=new.timeout,
            placement=_placement_of(active.version, partition_of(job_id, active.partitions)),
            created_at=now,
            headers=new.headers,
            then=new.then,
            control=_stored_control(new, now),
        )
        self._put(job)
        if new.keep_outcome:
            self._records[job_id].keep_outcome = True
        if new.unique is not None:
            self._records[job_id].unique = new.unique
            self._unique.take(new.queue, new.unique, job_id, now)
        return EnqueueResult(job.id, True, run_at, job.placement)

    def _active(self, queue: str) -> QueueVersion:
        return next(v for v in self._versions(queue) if v.state is VersionState.ACTIVE)

    def _job_of(self, job_id: str) -> Job | None:
        rec = self._records.get(job_id)
        return None if rec is None else rec.job

    @staticmethod
    def _held_result(
        new: NewJob, holder_id: str, holder: Job | None, active: QueueVersion
    ) -> EnqueueResult:
        """The result of a unique job whose key ``holder_id`` holds."""
        if holder is not None:
            return EnqueueResult(holder.id, False, holder.run_at, holder.placement)
        assert new.unique is not None and new.unique.key is not None
        home = partition_of(new.unique.key, active.partitions)
        return EnqueueResult(holder_id, False, 0.0, _placement_of(active.version, home))

    # -- workflows -------------------------------------------------------------------
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        await trio.lowlevel.checkpoint()
        wanted = set(queues)
        out: list[Continuation] = []
        for job_id, queue in list(self._outbox.items()):
            if len(out) >= limit:
                break
            if queue not in wanted:
                continue
            gone = self._gone.get(job_id)
            if gone is not None:
                out.append(gone)  # a deleted job's end, kept with its entry
                continue
            rec = self._records.get(job_id)
            if rec is None or rec.job.then is None or rec.job.state not in _OUTBOXED:
                # trimmed, deleted or re-run meanwhile: nothing to continue now
                del self._outbox[job_id]
                continue
            job = rec.job
            assert job.then is not None
            out.append(_outbox_entry(job, queue))
        return out

    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        await trio.lowlevel.checkpoint()
        for c in done:
            self._outbox.pop(c.job_id, None)
            self._gone.pop(c.job_id, None)

    def _keep_flow_place(self, rec: _Record) -> None:
        """Before workflow job ``rec`` is deleted (``delete_job``,
        ``purge_queue``, ``trim``), in the same step: an end of it still in
        the outbox keeps what the continuer reads; a job that never ended
        (scheduled, ready, retry_wait) whose flow handles failures ends
        failed (:data:`DELETED_ERROR`) into the outbox, so the group that
        allows failures around it (a batch) still completes and its
        ``on_failure`` is called. Anything else: its flow stops there."""
        job = rec.job
        if job.then is None or job.id in self._gone:
            return  # no flow, or its place is kept already (a discarded job's)
        if job.id in self._outbox and job.state in _OUTBOXED:
            self._gone[job.id] = _outbox_entry(job, self._outbox[job.id])
        elif job.state in _UNENDED and holds_failure_handling(job.then):
            self._gone[job.id] = Continuation(
                job.id, rec.home, job.placement, job.then, None,
                failed=True, kind=job.kind, error=DELETED_ERROR, attempts=job.attempts,
            )  # fmt: skip
            self._outbox[job.id] = rec.home
            self._outbox_filled.set()

    async def wait_continuations(self, timeout: float) -> None:
        await self._outbox_filled.take(timeout)

    async def group_arrive(
        self, arrivals: Sequence[Arrival], ttl: float
    ) -> list[list[bytes | None] | None]:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        out: list[list[bytes | None] | None] = []
        for a in arrivals:
            entry = self._groups.get(a.group_id)
            if entry is None or entry[0] <= now:
                entry = (now + ttl, a.size, {})
            # every arrival keeps the group another ttl (a member re-run late)
            entry = self._groups[a.group_id] = (now + ttl, entry[1], entry[2])
            results = entry[2]
            results.setdefault(a.index, a.result)
            done = len(results) >= entry[1]
            out.append([results.get(k) for k in range(entry[1])] if done else None)
        return out

    # -- workflow records (WorkflowRole) -------------------------------------------------
    async def save_workflow(self, workflow_id: str, tree: str, first_kind: str, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        record = WorkflowRecord(workflow_id, tree, now, first_kind)
        return self._workflows.save(record, ttl, now)

    async def workflow_record(self, workflow_id: str) -> WorkflowRecord | None:
        await trio.lowlevel.checkpoint()
        return self._workflows.get(workflow_id, self._clock())

    async def cancel_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        await trio.lowlevel.checkpoint()
        return self._workflows.cancel(workflow_id, self._clock())

    async def cancelled(self, workflow_ids: Sequence[str]) -> set[str]:
        await trio.lowlevel.checkpoint()
        return self._workflows.cancelled(workflow_ids, self._clock())

    async def keep_workflows(self, keeps: Mapping[str, float]) -> dict[str, float]:
        await trio.lowlevel.checkpoint()
        return self._workflows.keep(keeps, self._clock())

    async def group_status(self, group_ids: Sequence[str]) -> list[GroupStatus]:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        out: list[GroupStatus] = []
        for group_id in group_ids:
            entry = self._groups.get(group_id)
            if entry is None or entry[0] <= now:
                out.append(GroupStatus())
                continue
            results = entry[2]
            failed = sorted(
                k for k, r in results.items() if r is not None and r.startswith(FAILED_OUTCOME)
            )
            out.append(GroupStatus(len(results), tuple(failed)))
        return out

    # -- hot path ----------------------------------------------------------------------
    async def promote_due(self, queues: Sequence[str], limit: int) -> PromoteResult:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        aside = _Aside()
        promoted = 0
        next_due: float | None = None
        for queue in queues:
            heap = self._due.get(queue, [])
            # due times are read from the heap entries (the record's run_at
            # when it was stored), never from a record before it is judged
            while promoted < limit:
                top = self._peek(heap, _DUE, aside)
                if top is None or top[0][0] > now:
                    break
                heapq.heappop(heap)
                self._put(attrs.evolve(top[1], state=JobState.READY))
                promoted += 1
            top = self._peek(heap, _DUE, aside)
            if top is not None and (next_due is None or top[0][0] < next_due):
                next_due = top[0][0]
        return PromoteResult(promoted, next_due, now, aside.report())

    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> LeaseResult:
        """ready --lease--> leased, at most ``count`` jobs shared among
        ``queues`` (see :meth:`Store.lease`); flow control may expire a job
        (-> dead) or hold it back (it stays ready)."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        batch = _LeaseBatch(worker_id, now, now + lease_duration)
        active = [q for q in queues if q.name not in self._paused]
        available = {q.name: self._ready_count(q.name, count) for q in active}
        shares = (share_strictly if strict else share_by_weight)(active, count, available)
        for queue, share in shares.items():
            self._lease_from(self._ready.get(queue, []), share, batch)
        return batch.result()

    def _lease_from(self, heap: list[_HeapEntry], share: int, batch: _LeaseBatch) -> None:
        """Lease up to ``share`` jobs of one queue's ready ``heap`` into
        ``batch``. What flow control held back goes back after the batch;
        as on Redis, at most share + 256 ready jobs are looked at."""
        held: list[_HeapEntry] = []
        looked, got = 0, 0
        while got < share and looked < share + 256:
            top = self._peek(heap, _READY, batch.aside)
            if top is None:
                break
            heapq.heappop(heap)
            looked += 1
            entry, ready = top
            verdict = _LEASE if ready.control is None else self._admit(ready, ready.control, batch)
            if verdict is Verdict.HELD:
                held.append(entry)  # still ready: its entry goes back
            elif verdict is Verdict.LEASE:
                batch.leased.append(self._lease_one(ready, batch))
                got += 1
        for entry in held:
            heapq.heappush(heap, entry)

    def _admit(self, job: Job, control: _control.JobControl, batch: _LeaseBatch) -> Verdict:
        """What flow control does with ``job`` now: LEASE it (its permits
        and slots taken), EXPIRED (ready --expired--> dead, in
        ``batch.expired``) or HELD back (it stays ready; ``batch`` notes
        until when)."""
        admission = self._control.admit(job, control, batch.now, self._job_of)
        if admission.verdict is Verdict.EXPIRED:
            batch.expired.append(self._expire(job, batch.now))
        elif admission.verdict is Verdict.HELD:
            batch.held_back(admission.until)
        return admission.verdict

    def _lease_one(self, ready: Job, batch: _LeaseBatch) -> LeasedJob:
        """ready -> leased: one more attempt, a fresh fencing token, the
        lease ending at ``batch.expires_at``."""
        token = f"{self._token_prefix}-{next(self._tokens)}"
        job = attrs.evolve(
            ready,
            state=JobState.LEASED,
            attempts=ready.attempts + 1,
            lease_token=token,
            lease_owner=batch.worker_id,
            lease_expires_at=batch.expires_at,
        )
        self._put(job)
        return LeasedJob(job, token, batch.expires_at, batch.now)

    def _expire(self, job: Job, now: float) -> Job:
        """ready --expired--> dead: its expiry passed before it started."""
        assert job.control is not None and job.control.expires_at is not None
        dead = attrs.evolve(
            job,
            state=JobState.DEAD,
            finished_at=now,
            last_error=_control.expired_error(job.control.expires_at),
        )
        self._put(dead)
        self._release_unique(job.id)
        return dead

    def _ready_count(self, queue: str, cap: int) -> int:
        """How many live ready jobs ``queue`` has, counting at most ``cap``."""
        heap = self._ready.get(queue, [])
        if self._top(heap) is None:
            return 0
        n = 0
        for entry in heap:
            if self._valid(entry) is not None:
                n += 1
                if n >= cap:
                    break
        return n

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        """leased -> leased, its lease ending ``lease_duration`` from now, for
        each of ``leases`` still held (fenced by its token); a renewed lease
        whose job an abort flagged is reported in ``aborted``."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        results = []
        flagged = []
        for i, ref in enumerate(leases):
            job = self._held(ref, now)
            if job is None:
                results.append(False)
                continue
            self._put(attrs.evolve(job, lease_expires_at=now + lease_duration))
            rec = self._records[job.id]
            if rec.unique is not None:
                self._unique.renewed(rec.home, rec.unique, job.id, now + lease_duration)
            if rec.abort:
                flagged.append(i)
            results.append(True)
        return RenewResult(tuple(results), NOTHING_SET_ASIDE, frozenset(flagged))

    # -- settling: one transition per SettleKind (the table _SETTLE) --------------------
    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        """Each settlement whose lease is still held (fenced by its token)
        moves its job out of leased by the transition of its kind
        (:data:`_SETTLE`); its concurrency slots come back. An abort asked
        for the job turns a settle that would run it again into ABORTED."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        tally = SettleTally()
        for s in settlements:
            job = self._held(s.lease, now)
            if job is None:
                tally.refused()
                continue
            rec = self._records[job.id]
            if job.control is not None and self._control.release(rec.home, job.control, job.id):
                self._notify_ready()  # a slot came back: leasers held by it look again
            kind = settled_kind(s, bool(rec.abort))
            cleared = attrs.evolve(job, lease_token="", lease_owner="", lease_expires_at=None)
            end = _SETTLE[kind](self, rec, cleared, s, now)
            if kind is not SettleKind.SUCCEEDED and end is not None:
                ended = settled_attempt(job, kind, s, rec.job, now)
                rec.history = _attempts.added(rec.history, ended)
            tally.applied(kind, end)
            if s.successor is not None and self._chain_continued:
                self._chain_continued = False
                tally.continued_last(self._chain_leased)
                self._chain_leased = None
        return tally.result()

    def _continue_chain(self, successor: Successor, now: float) -> bool:
        """In a chain link's success settle: enqueue its successor under its
        deterministic ID (an existing job of that ID is left alone), as an
        ordinary waiting job (a new one leased at once to the worker it
        names in ``lease_to``, unless its queue is paused), unless its
        workflow is marked cancelled (then False: the outbox path, whose
        continuer aborts what it would make).
        The mark is read in this same step, so a cancel either comes after
        the successor exists (its sweep finds it) or stops it here."""
        wid = successor.workflow
        if wid is not None:
            if self._workflows.cancelled([wid], now):
                return False
            self._workflows.keep({wid: WORKFLOW_KEEP}, now)  # its flow runs on
        new = successor.job
        created = self._enqueue_one(new, new.id, now).created
        self.chain_settles += 1
        self._chain_continued = True
        if created and successor.lease_to and new.queue not in self._paused:
            # leased at once to the settling worker, as a lease would (its
            # ready entry is left stale): see Successor.lease_to
            batch = _LeaseBatch(successor.lease_to, now, now + successor.lease_duration)
            self._chain_leased = self._lease_one(self._records[new.id].job, batch)
        return True

    # Each takes the job as it was leased, its lease cleared (``job``), and
    # returns the state it ends in (None: the record is gone).
    def _settle_succeeded(
        self, rec: _Record, job: Job, s: Settlement, now: float
    ) -> JobState | None:
        """leased --ok--> succeeded, kept for the longest of ``retain_for``,
        its result's ttl, a workflow's keep (its continuation's IDs stay
        taken) and, with result waiters (or marked as waited on), :data:`WAITED_KEEP`; otherwise
        dropped at once. A throttle's unique key stays taken its ttl more,
        any other is given back."""
        self._unique.succeeded(rec.home, rec.unique, job.id, now)
        keeps_result = s.result is not None and s.result_ttl > 0
        keep = max(s.retain_for, s.result_ttl if keeps_result else 0.0)
        if job.then is not None:
            keep = max(keep, WORKFLOW_KEEP)
            if nothing_follows(job.then):
                pass  # a flow's last step: its continuer would have nothing to do
            elif s.successor is None or not self._continue_chain(s.successor, now):
                self._outbox[job.id] = rec.home
                self._outbox_filled.set()
        if keep <= 0 and (job.id in self._done or rec.keep_outcome):
            keep = WAITED_KEEP  # its waiters read the outcome after the wake-up
        if keep <= 0:
            self._delete(job.id)
            return None
        self._put(
            attrs.evolve(
                job,
                state=JobState.SUCCEEDED,
                finished_at=now,
                result=s.result if keeps_result else None,
                result_until=now + s.result_ttl if keeps_result else None,
            )
        )
        rec.retain_until = now + keep
        rec.retained = s.retain_for > 0 or job.then is not None
        return JobState.SUCCEEDED

    def _settle_retry(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --error, retries left--> retry_wait, due ``retry_delay``
        from now; the attempt counts."""
        self._put(
            attrs.evolve(
                job,
                state=JobState.RETRY_WAIT,
                run_at=now + max(0.0, s.retry_delay),
                last_error=s.error,
                unclaimed_since=None,  # it ran: no longer unclaimed
            )
        )
        return JobState.RETRY_WAIT

    def _settle_dead(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --retries exhausted / SkipRetry / bad payload--> dead; its
        unique key is given back; a workflow job with failure handling goes
        to the outbox in the same step."""
        self._unique.release(rec.home, rec.unique, job.id)
        self._put(attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now))
        self._outbox_failed(rec)
        return JobState.DEAD

    def _outbox_failed(self, rec: _Record) -> None:
        """A dead or aborted workflow job whose continuation holds failure
        handling goes to the outbox (see FlowRole): an abort ends its step
        failed, so a batch around it completes."""
        if holds_failure_handling(rec.job.then):
            self._outbox[rec.job.id] = rec.home
            self._outbox_filled.set()

    def _settle_discard(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState | None:
        """leased --failed for good--> gone (not dead-lettered); with result
        waiters, dead for :data:`WAITED_KEEP` seconds but listed nowhere, for
        them to read. Its unique key is given back. A workflow job whose
        continuation holds failure handling keeps its place in its flow,
        failed (:func:`discarded_error`), as a deleted one does."""
        self._unique.release(rec.home, rec.unique, job.id)
        if holds_failure_handling(job.then):
            assert job.then is not None
            self._gone[job.id] = Continuation(
                job.id, rec.home, job.placement, job.then, None, failed=True,
                kind=job.kind, error=discarded_error(s.error), attempts=job.attempts,
            )  # fmt: skip
            self._outbox[job.id] = rec.home
            self._outbox_filled.set()
        if job.id not in self._done and not rec.keep_outcome:
            self._delete(job.id)
            return None
        rec.discarded = True
        rec.retain_until = now + WAITED_KEEP
        self._put(attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now))
        return JobState.DEAD

    def _settle_defer(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --rate limited upstream--> retry_wait, due ``retry_delay``
        from now, the attempt given back; its rate limits hold back as long."""
        delay = max(0.0, s.retry_delay)
        if job.control is not None:
            self._control.hold_back(rec.home, job.control, now, delay)
        self._put(
            attrs.evolve(
                job,
                state=JobState.RETRY_WAIT,
                run_at=now + delay,
                last_error=s.error,
                attempts=max(0, job.attempts - 1),
                unclaimed_since=None,  # a worker with its handler took it
            )
        )
        return JobState.RETRY_WAIT

    def _settle_release(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --not run (shutdown)--> ready at once, the attempt given back."""
        self._put(attrs.evolve(job, state=JobState.READY, attempts=max(0, job.attempts - 1)))
        return JobState.READY

    def _settle_unclaimed(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --no handler for its kind--> retry_wait for a worker that
        has one, or dead once unclaimed for ``unclaimed_grace`` (see
        ``store._settling``); the attempt given back."""
        after = unclaimed(job, s, now)
        if after.state is JobState.DEAD:
            self._unique.release(rec.home, rec.unique, job.id)
        self._put(after)
        return after.state

    def _settle_aborted(self, rec: _Record, job: Job, s: Settlement, now: float) -> JobState:
        """leased --abort asked--> aborted, never run again, ``last_error``
        the abort's reason; its unique key is given back; a workflow job
        with failure handling goes to the outbox, failed, in the same step."""
        self._unique.release(rec.home, rec.unique, job.id)
        error = rec.abort or s.error or _jobs.abort_error()
        self._put(attrs.evolve(job, state=JobState.ABORTED, last_error=error, finished_at=now))
        self._outbox_failed(rec)
        return JobState.ABORTED

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        """leased --lease expired--> ready (due now), dead (retries
        exhausted) or aborted (an abort was asked), at most ``limit`` jobs."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        aside = _Aside()
        recovered: dict[JobState, list[Job]] = {
            JobState.READY: [],
            JobState.DEAD: [],
            JobState.ABORTED: [],
        }
        for queue in queues:
            heap = self._leased.get(queue, [])
            while sum(map(len, recovered.values())) < limit:
                top = self._peek(heap, _LEASED, aside)
                if top is None or top[0][0] > now:
                    break
                heapq.heappop(heap)
                job = self._recovered(top[1], now)
                recovered[job.state].append(job)
        return RecoverResult(
            tuple(j.id for j in recovered[JobState.READY]),
            tuple(recovered[JobState.DEAD]),
            aside.report(),
            tuple(recovered[JobState.ABORTED]),
        )

    def _recovered(self, leased: Job, now: float) -> Job:
        """One expired lease taken back: the job as it is stored now."""
        job = attrs.evolve(leased, lease_token="", lease_owner="", lease_expires_at=None)
        rec = self._records[job.id]
        if rec.abort:
            # its worker died (or hung) after an abort was asked
            job = attrs.evolve(job, state=JobState.ABORTED, finished_at=now, last_error=rec.abort)
            self._unique.release(rec.home, rec.unique, job.id)
        elif job.attempts > job.max_retries:
            reason = (
                f"lease expired on attempt {job.attempts} of "
                f"{job.max_retries + 1} (worker lost); retries exhausted"
            )
            job = attrs.evolve(job, state=JobState.DEAD, finished_at=now, last_error=reason)
            self._unique.release(rec.home, rec.unique, job.id)
        else:
            # its worker may have had the handler: no longer unclaimed
            job = attrs.evolve(job, state=JobState.READY, run_at=now, unclaimed_since=None)
        self._put(job)
        if job.state is not JobState.READY:
            self._outbox_failed(rec)
        rec.history = _attempts.added(rec.history, recovered_attempt(leased, job, now))
        return job

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        """Drop the finished records of ``queues`` whose time is over: a
        succeeded one past its retention, a dead or aborted one older than
        ``dead_max_age``, then the oldest beyond ``dead_max_count`` dead
        (and aborted) and ``keep_succeeded`` retained succeeded per queue.
        A discarded record kept for its waiters, and a success kept only for
        its result or its waiters, go when their time is over, uncounted (a
        RedisStore's such records expire by themselves)."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        wanted = set(queues)
        mine = [rec for rec in self._records.values() if rec.home in wanted]
        deleted = sum(self._trim_lapsed(rec, now, dead_max_age) for rec in mine)
        kept = [rec for rec in mine if self._records.get(rec.job.id) is rec and not rec.discarded]
        if dead_max_count is not None:
            dead = [r for r in kept if r.job.state in (JobState.DEAD, JobState.ABORTED)]
            deleted += self._trim_beyond(dead, dead_max_count, _finished_order)
        if keep_succeeded is not None:
            retained = [r for r in kept if r.job.state is JobState.SUCCEEDED and r.retained]
            # those whose retention ends first go first (the RedisStore's index order)
            deleted += self._trim_beyond(retained, keep_succeeded, _retention_order)
        return CountResult(deleted, NOTHING_SET_ASIDE)

    def _trim_lapsed(self, rec: _Record, now: float, dead_max_age: float | None) -> int:
        """Drop ``rec`` if its time is over; 1 when that counts as trimmed."""
        job = rec.job
        if rec.discarded:
            lapsed, counted = rec.retain_until <= now, 0  # gone, as a Redis record expires
        elif job.state is JobState.SUCCEEDED:
            # one kept only for its result or its waiters goes uncounted, too
            lapsed, counted = rec.retain_until <= now, int(rec.retained)
        elif job.state in (JobState.DEAD, JobState.ABORTED):
            # aborted jobs are kept, and trimmed, as dead ones are
            finished = job.finished_at or 0.0
            lapsed, counted = dead_max_age is not None and finished + dead_max_age <= now, 1
        else:
            return 0
        if not lapsed:
            return 0
        self._keep_flow_place(rec)
        self._delete(job.id)
        return counted

    def _trim_beyond(
        self, recs: list[_Record], keep: int, order: Callable[[_Record], tuple[float, str]]
    ) -> int:
        """Drop the first of ``recs`` in ``order`` beyond ``keep`` per queue."""
        by_queue: dict[str, list[_Record]] = {}
        for rec in recs:
            by_queue.setdefault(rec.home, []).append(rec)
        deleted = 0
        for group in by_queue.values():
            group.sort(key=order)
            for rec in group[: max(0, len(group) - keep)]:
                self._keep_flow_place(rec)
                self._delete(rec.job.id)
                deleted += 1
        return deleted

    async def limit_usage(self, queue: str) -> list[LimitUsage]:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        out = [
            LimitUsage(queue, key, "concurrency", n)
            for key, n in self._control.usage(queue, now, self._job_of).items()
        ]
        out += [
            LimitUsage(queue, key, "rate", 0, tat)
            for key, tat in self._control.next_permits(queue, now).items()
        ]
        return sorted(out, key=lambda u: (u.kind, u.key))

    # -- waiting -------------------------------------------------------------------
    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        # a top entry to set aside counts too: the lease that follows sets it aside
        if not held and any(
            q not in self._paused and self._top(self._ready.get(q, [])) for q in queues
        ):
            await trio.lowlevel.checkpoint()
            return
        event = self._ready_changed
        with trio.move_on_after(timeout):
            await event.wait()

    async def wait_scheduled(
        self, queues: Sequence[str], *, earlier_than: float | None, timeout: float
    ) -> None:
        for q in queues:
            top = self._top(self._due.get(q, []))
            if top is not None and (earlier_than is None or top[0] < earlier_than):
                await trio.lowlevel.checkpoint()
                return
        event = self._scheduled_changed
        with trio.move_on_after(timeout):
            await event.wait()

    async def now(self) -> float:
        await trio.lowlevel.checkpoint()
        return self._clock()

    # -- the worker registry -------------------------------------------------------------
    async def beat_worker(self, worker: WorkerInfo, ttl: float) -> None:
        await trio.lowlevel.checkpoint()
        self._workers.beat(worker, ttl, self._clock())

    async def unregister_worker(self, worker_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self._workers.unregister(worker_id)

    async def workers(self) -> list[WorkerInfo]:
        await trio.lowlevel.checkpoint()
        return self._workers.live(self._clock())

    # -- inspection ----------------------------------------------------------------------
    async def queues(self) -> list[str]:
        await trio.lowlevel.checkpoint()
        return sorted(self._known_queues | set(self._topology))

    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        await trio.lowlevel.checkpoint()
        names = (
            list(queues) if queues is not None else sorted(self._known_queues | set(self._topology))
        )
        counts: dict[str, dict[JobState, int]] = {q: dict.fromkeys(JobState, 0) for q in names}
        parts: dict[str, dict[tuple[int, int], int]] = {q: {} for q in names}
        for job_id, rec in self._records.items():
            if rec.home in counts and rec.indexed:
                job = self._shown(job_id, rec)
                counts[job.queue][job.state] += 1
                key = _where(job.placement)
                parts[job.queue][key] = parts[job.queue].get(key, 0) + 1
        return [QueueStats(q, counts[q], q in self._paused, parts[q]) for q in names]

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        await trio.lowlevel.checkpoint()
        rec = self._records.get(job_id)
        if rec is None or (queue is not None and rec.home != queue):
            return None
        job = self._shown(job_id, rec)
        return with_history(job, rec.history)

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        await trio.lowlevel.checkpoint()
        jobs = [
            self._shown(i, r) for i, r in self._records.items() if r.home == queue and r.indexed
        ]
        jobs = [j for j in jobs if j.state is state]

        def order(job: Job) -> tuple[float, str]:
            if state is JobState.READY:  # lease order: priority, due time (one score)
                return (_control.ready_score(job.run_at, job.priority), job.id)
            if state is JobState.LEASED:
                return (job.lease_expires_at or 0.0, job.id)
            if state in FINISHED_STATES:
                return (job.finished_at or 0.0, job.id)
            return (job.run_at, job.id)

        jobs.sort(key=order)
        return jobs[offset : offset + limit]

    # -- search ----------------------------------------------------------------------------
    async def search_jobs(
        self,
        query: JobQuery,
        *,
        cursor: str | None = None,
        limit: int = 50,
        scan_limit: int = SCAN_LIMIT,
    ) -> SearchPage:
        # Search order: queue, then job ID; the position is the last (queue, id) read.
        check_search(limit, scan_limit)
        after: tuple[str, str] | None = None
        if cursor is not None:
            position = _decode_cursor(cursor)
            if not (
                isinstance(position, list)
                and len(position) == 2
                and all(isinstance(p, str) for p in position)
            ):
                raise ValueError(
                    f"search cursor {cursor[:40]!r} is not one this store gave; "
                    "search again without a cursor"
                )
            after = (position[0], position[1])
        await trio.lowlevel.checkpoint()
        keys = sorted(
            (rec.home, job_id)
            for job_id, rec in self._records.items()
            if rec.indexed
            and query.in_queues(rec.home)
            and (after is None or (rec.home, job_id) > after)
        )

        def candidates() -> Iterator[tuple[list[str], Job]]:
            for home, job_id in keys:
                rec = self._records[job_id]
                job = self._shown(job_id, rec)
                if query.in_states(job.state):
                    yield [home, job_id], with_history(job, rec.history)

        return page_of(*collect(candidates(), query, limit, scan_limit), limit)

    # -- aggregates ----------------------------------------------------------------------
    async def add_aggregates(self, counts: Sequence[KindCounts], *, keep: float) -> None:
        keep = check_add(counts, keep)
        await trio.lowlevel.checkpoint()
        if counts:
            self._aggregates.add(counts, keep, self._clock())

    async def aggregates(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        await trio.lowlevel.checkpoint()
        return self._aggregates.read(queues, since)

    # -- notes ---------------------------------------------------------------------------
    async def write_notes(self, writes: Sequence[NoteWrite]) -> NotesResult:
        for write in writes:
            check_write(write)
        await trio.lowlevel.checkpoint()
        now = self._clock()
        written: list[str] = []
        refused: list[str] = []
        dropped = 0
        for write in writes:
            job = self._held(write.lease, now)
            if job is None:
                refused.append(write.lease.job_id)
                continue
            rec = self._records[job.id]
            if rec.notes is None:
                rec.notes = _memory_notes.Notes()
            dropped += rec.notes.write(write, job.attempts, now)
            written.append(job.id)
        return NotesResult(tuple(written), tuple(refused), dropped)

    async def job_notes(self, ref: JobRef) -> JobNotes | None:
        await trio.lowlevel.checkpoint()
        job = self._find(ref.job_id, ref.queue)
        if job is None:
            return None
        notes = self._records[job.id].notes
        if notes is None:
            return JobNotes(job.id, job.queue, None)
        return notes.shown(job.id, job.queue)

    # -- results -------------------------------------------------------------------------
    async def outcome(self, ref: JobRef) -> JobOutcome | None:
        await trio.lowlevel.checkpoint()
        job = self._find(ref.job_id, ref.queue)
        return None if job is None else JobOutcome.of(job, self._clock())

    async def wait_outcome(self, ref: JobRef, *, timeout: float) -> JobOutcome | None:
        # Looking and registering happen in one step (no checkpoint between),
        # so a finish can never slip in between them.
        with trio.move_on_after(timeout):
            while True:
                job = self._find(ref.job_id, ref.queue)
                if job is None or job.state in FINISHED_STATES:
                    break
                event = self._done.get(job.id)
                if event is None:
                    event = self._done[job.id] = trio.Event()
                await event.wait()
        return await self.outcome(ref)

    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        await trio.lowlevel.checkpoint()
        job = self._find(job_id, queue)
        if job is None or self._records[job_id].discarded:
            return False  # absent, or discarded (kept for its waiters only)
        if self._set_aside(job_id, self._records[job_id], _Aside()):
            return False  # it cannot be used: set aside (see _damage)
        if job.state not in (JobState.SCHEDULED, JobState.RETRY_WAIT, JobState.DEAD):
            return False
        attempts = 0 if job.state is JobState.DEAD else job.attempts
        self._put(
            attrs.evolve(
                job,
                state=JobState.READY,
                run_at=self._clock(),
                attempts=attempts,
                finished_at=None,
            )
        )
        return True

    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        await trio.lowlevel.checkpoint()
        job = self._find(job_id, queue)
        if job is None or job.state is JobState.LEASED:
            return False
        rec = self._records[job_id]
        self._unique.release(rec.home, rec.unique, job_id)
        self._keep_flow_place(rec)
        self._delete(job_id)
        return True

    async def purge_queue(self, queue: str, *, limit: int) -> CountResult:
        """Every listed job of ``queue`` but the leased ones goes as
        :meth:`delete_job` deletes one, up to ``limit``, in one step."""
        await trio.lowlevel.checkpoint()
        doomed = list(
            itertools.islice(
                (
                    job_id
                    for job_id, rec in self._records.items()
                    if rec.home == queue and rec.indexed and rec.job.state is not JobState.LEASED
                ),
                max(0, limit),
            )
        )
        for job_id in doomed:
            rec = self._records[job_id]
            self._unique.release(rec.home, rec.unique, job_id)
            self._keep_flow_place(rec)
            self._delete(job_id)
        return CountResult(len(doomed), NOTHING_SET_ASIDE)

    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        """A record that cannot be used (see :meth:`_damage`) is set aside
        (FINISHED), as ``run_now`` does."""
        await trio.lowlevel.checkpoint()
        job = self._find(job_id, queue)
        if job is None:
            return AbortResult.NOT_FOUND
        rec = self._records[job_id]
        if self._set_aside(job_id, rec, _Aside()):
            return AbortResult.FINISHED  # it cannot be used: set aside
        if job.state in (JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT):
            self._unique.release(rec.home, rec.unique, job_id)
            self._put(
                attrs.evolve(
                    job,
                    state=JobState.ABORTED,
                    last_error=_jobs.abort_error(reason),
                    finished_at=self._clock(),
                )
            )
            self._outbox_failed(rec)  # a step that ends failed in its flow
            return AbortResult.ABORTED
        if job.state is JobState.LEASED:
            rec.abort = rec.abort or _jobs.abort_error(reason)  # the first one's reason stands
            return AbortResult.FLAGGED
        return AbortResult.FINISHED

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        """dead --requeued--> ready (due now, attempts from 0), oldest first,
        at most ``limit``. A record that cannot be used (see :meth:`_damage`)
        is set aside instead."""
        await trio.lowlevel.checkpoint()
        aside = _Aside()
        dead: list[tuple[float, str, _Record]] = []
        for job_id, rec in list(self._records.items()):
            if rec.home == queue and rec.job.state is JobState.DEAD and not rec.discarded:
                if not self._set_aside(job_id, rec, aside):
                    dead.append((rec.job.finished_at or 0.0, job_id, rec))
        dead.sort(key=lambda d: d[:2])
        now = self._clock()
        moved = dead[: limit or len(dead)]
        for _, _, rec in moved:
            self._put(
                attrs.evolve(
                    rec.job,
                    state=JobState.READY,
                    run_at=now,
                    attempts=0,
                    finished_at=None,
                    unclaimed_since=None,
                )
            )
        return CountResult(len(moved), aside.report())

    async def set_paused(self, queue: str, paused: bool) -> None:
        await trio.lowlevel.checkpoint()
        self._known_queues.add(queue)
        if paused:
            self._paused.add(queue)
        else:
            self._paused.discard(queue)
            self._notify_ready()

    # -- topology ------------------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        await trio.lowlevel.checkpoint()
        return QueueTopology(queue, tuple(self._versions(queue)))

    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        await trio.lowlevel.checkpoint()
        if partitions < 1:
            raise TopologyError(f"partitions must be >= 1, got {partitions}")
        versions = self._versions(queue)
        highest = max(v.version for v in versions)
        if version <= highest:
            raise TopologyError(
                f"queue {queue!r}: new version {version} must be greater than {highest}"
            )
        versions[:] = [
            attrs.evolve(v, state=VersionState.DRAINING) if v.state is VersionState.ACTIVE else v
            for v in versions
        ] + [QueueVersion(version, partitions, VersionState.ACTIVE)]
        return QueueTopology(queue, tuple(versions))

    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        await trio.lowlevel.checkpoint()
        versions = self._versions(queue)
        match = [v for v in versions if v.version == version]
        if not match:
            raise TopologyError(f"queue {queue!r} has no version {version}")
        if match[0].state is VersionState.ACTIVE:
            raise TopologyError(f"queue {queue!r}: version {version} is active, not draining")
        left = sum(
            1
            for r in self._records.values()
            if r.job.queue == queue and _where(r.job.placement)[0] == version
        )
        if left:
            raise TopologyError(
                f"queue {queue!r}: version {version} still holds {left} job(s); "
                "let workers drain it first"
            )
        versions[:] = [v for v in versions if v.version != version]
        return QueueTopology(queue, tuple(versions))

    # -- leadership ---------------------------------------------------------------------
    def _live_leader(self, name: str, now: float) -> Leadership | None:
        lead = self._leaders.get(name)
        if lead is None or lead.expires_at <= now:
            return None
        return lead

    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        lead = self._live_leader(name, now)
        if lead is not None:
            if lead.holder != holder:
                return None
            lead = attrs.evolve(lead, expires_at=now + ttl)
        else:
            epoch = self._epochs.get(name, 0) + 1
            self._epochs[name] = epoch
            lead = Leadership(name, holder, epoch, now + ttl)
        self._leaders[name] = lead
        return lead

    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        lead = self._live_leader(name, now)
        if lead is None or lead.holder != holder or lead.epoch != epoch:
            return False
        self._leaders[name] = attrs.evolve(lead, expires_at=now + ttl)
        return True

    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        await trio.lowlevel.checkpoint()
        lead = self._live_leader(name, self._clock())
        if lead is None or lead.holder != holder or lead.epoch != epoch:
            return False
        del self._leaders[name]
        return True

    async def current_leader(self, name: str) -> Leadership | None:
        await trio.lowlevel.checkpoint()
        return self._live_leader(name, self._clock())

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        await trio.lowlevel.checkpoint()
        lead = self._live_leader(name, self._clock())
        if lead is None or lead.epoch != epoch:
            return TriggerResult.STALE_EPOCH
        fired = self._last_fired.setdefault(name, {})
        if fired.get(schedule_id, float("-inf")) >= fire_at:
            return TriggerResult.ALREADY_FIRED
        fired[schedule_id] = fire_at
        # Recorded and enqueued in one step, with no checkpoint in between: a
        # cancellation there would leave the trigger fired with no job, and
        # this store has no pending-trigger log to enqueue it later.
        self._enqueue([job])
        return TriggerResult.ENQUEUED

    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        await trio.lowlevel.checkpoint()
        return dict(self._last_fired.get(name, {}))

    # -- stored schedules (ScheduleStoreRole) ----------------------------------------------
    async def edit_schedule(
        self, name: str, edit: ScheduleEdit, schedule_id: str, definition: str | None = None
    ) -> int | None:
        await trio.lowlevel.checkpoint()
        return self._schedules.edit(name, edit, schedule_id, definition, self._clock())

    async def schedules_version(self, name: str) -> int:
        await trio.lowlevel.checkpoint()
        return self._schedules.version(name)

    async def stored_schedules(self, name: str) -> StoredSchedules:
        await trio.lowlevel.checkpoint()
        return self._schedules.read(name)

    # -- the store checker ----------------------------------------------------------------
    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """Judges every record and heap entry in one step (see
        :mod:`._check`); never reports NO_RECORD."""
        await trio.lowlevel.checkpoint()
        names = _checking.asked_queues(queues, batch=batch, lease_grace=lease_grace)
        return _memory_check.check(self, names, repair=repair, lease_grace=lease_grace)


_Transition = Callable[[MemoryStore, _Record, Job, Settlement, float], JobState | None]

#: The transition each settle kind applies to a held lease's job.
_SETTLE: dict[SettleKind, _Transition] = {
    SettleKind.SUCCEEDED: MemoryStore._settle_succeeded,
    SettleKind.RETRY: MemoryStore._settle_retry,
    SettleKind.DEAD: MemoryStore._settle_dead,
    SettleKind.RELEASE: MemoryStore._settle_release,
    SettleKind.DISCARD: MemoryStore._settle_discard,
    SettleKind.DEFER: MemoryStore._settle_defer,
    SettleKind.ABORTED: MemoryStore._settle_aborted,
    SettleKind.UNCLAIMED: MemoryStore._settle_unclaimed,
}


def _where(placement: Placement) -> tuple[int, int]:
    """The (version, partition) of a placement this store made (the only
    placements it makes: its topology is the Redis store's)."""
    where = _locate(placement)
    assert where is not None, f"not a placement of this store: {placement!r}"
    return where


def _finished_order(rec: _Record) -> tuple[float, str]:
    """Dead and aborted jobs, oldest first."""
    return (rec.job.finished_at or 0.0, rec.job.id)


def _retention_order(rec: _Record) -> tuple[float, str]:
    """Retained succeeded jobs, those whose retention ends first first."""
    return (rec.retain_until, rec.job.id)


def open_memory_store(url: str) -> MemoryStore:
    """A new MemoryStore for ``memory://`` (the scheme registry's opener)."""
    if url.strip().lower() not in ("memory", "memory://"):
        raise ValueError(f"the in-memory store takes no options: use 'memory://', not {url!r}")
    return MemoryStore()
