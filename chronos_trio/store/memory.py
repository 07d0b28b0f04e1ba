"""In-memory store: tests, the embedded default and local development.

Every operation runs synchronously between two Trio checkpoints, so each is
atomic with respect to every other task of the process. Its clock defaults to
Trio's clock anchored to the wall clock, so under ``autojump_clock`` due times
and lease expiry advance with virtual time and timing tests run instantly.

It lives in one process: it cannot be shared by several worker processes.
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from ..records import _control, _jobs, _unique
from ..records._jobs import (
    FINISHED_STATES,
    EnqueueResult,
    Job,
    JobOutcome,
    JobRef,
    JobState,
    LeasedJob,
    LeaseRef,
    NewJob,
)
from ..records._unique import Unique
from ..records._workers import WorkerInfo
from ..records._workflow import WORKFLOW_KEEP, Arrival
from . import (
    _memory_check,
    _memory_control,
    _memory_damage,
    _memory_unclaimed,
    _memory_unique,
    _memory_workers,
    _partitioning,
)
from ._partitioning import partition_of, share_by_weight, share_strictly
from ._roles import (
    LEASE_GRACE,
    NOTHING_SET_ASIDE,
    AbortResult,
    CheckReport,
    Continuation,
    CountResult,
    Leadership,
    LeaseResult,
    LimitUsage,
    PromoteResult,
    QueueStats,
    QueueTopology,
    QueueVersion,
    QueueWeight,
    RecoverResult,
    RenewResult,
    SetAside,
    SettleKind,
    Settlement,
    SettleResult,
    Store,
    TopologyError,
    TriggerResult,
    VersionState,
)

#: ``(due-or-expiry time, sequence, job id, record version)`` — a heap entry is
#: valid only while the record still has that version (lazy deletion).
_HeapEntry = tuple[float, int, str, int]


#: States whose records have a current heap entry.
_INDEXED = frozenset({JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT})


@attrs.frozen
class _Index:
    """One kind of heap: its name and the states of the records it holds."""

    name: str
    states: frozenset[JobState]


def _indexed(state: object) -> bool:
    """True for a state whose records have a heap entry (False for a damaged one)."""
    return isinstance(state, JobState) and state in _INDEXED


_DUE = _Index("due", frozenset({JobState.SCHEDULED, JobState.RETRY_WAIT}))
_READY = _Index("ready", frozenset({JobState.READY}))
_LEASED = _Index("leased", frozenset({JobState.LEASED}))


@attrs.define
class _Record:
    job: Job
    version: int = 0
    #: The queue the record was first stored in: whose heaps index it. A job
    #: never changes queue, so this is where a record whose ``queue`` field
    #: was damaged belongs.
    home: str = attrs.field(default=attrs.Factory(lambda rec: rec.job.queue, takes_self=True))
    #: A succeeded job's end of retention (its record, and result, go then).
    retain_until: float = 0.0
    #: A unique job's key and mode (see ``_memory_unique``).
    unique: Unique | None = None
    #: A succeeded job retained for inspection (or a workflow's): what the
    #: RedisStore indexes as succeeded, and ``keep_succeeded`` caps.
    retained: bool = False
    #: A discarded job kept only for its waiters (until ``retain_until``):
    #: dead, but in no dead index (not listed, counted, requeued or run).
    discarded: bool = False
    #: Set by an abort of the leased job: the ``last_error`` it ends with
    #: (renewals report it; its settle or recovery makes the job aborted).
    abort: str = ""


#: How long a finished job nothing keeps stays readable for its waiters (s).
WAITED_KEEP = 60.0

#: Settle kinds that would run the job again: an abort asked for it wins.
_RUNS_AGAIN = frozenset(
    {SettleKind.RETRY, SettleKind.RELEASE, SettleKind.DEFER, SettleKind.UNCLAIMED}
)


@attrs.define
class _Aside:
    """What one operation set aside so far (see :class:`SetAside`)."""

    dead: list[Job] = attrs.field(factory=list)

    def report(self) -> SetAside:
        return SetAside(tuple(self.dead)) if self.dead else NOTHING_SET_ASIDE


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
    """A :class:`Store` held in this process's memory.

    ``clock`` returns the store's time in epoch seconds; by default it is
    Trio's clock anchored to the wall clock (see module docstring).

    Damaged records (see :mod:`._memory_damage`): every operation judges a
    record before it uses it, so none raises on one and none loses the rest
    of its batch. A record it cannot use is dead-lettered (``last_error``
    "damaged record: <field and value>") and reported in its result's
    ``aside``, like the RedisStore's. Admin reads show a damaged record with
    defaults in its damaged fields, named in ``Job.damage``. (A heap entry
    whose record is gone is stale, as after any deletion: the heaps delete
    lazily, so a record removed behind the store's back cannot be told from
    one it deleted, and is dropped with its entries; nothing is quarantined.)
    """

    shared_across_processes = False

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
        #: Result waiters: job ID -> the event its finishing (or deletion) sets.
        self._done: dict[str, trio.Event] = {}
        self._unique = _memory_unique.UniqueLocks()
        self._control = _memory_control.ControlState()
        #: Workflow outbox: job ID -> queue, oldest first (see FlowRole).
        self._outbox: dict[str, str] = {}
        self._outbox_filled = trio.Event()
        #: Groups: ID -> (expiry, size, results by member index).
        self._groups: dict[str, tuple[float, int, dict[int, bytes | None]]] = {}
        #: The worker registry (see ``_memory_workers``).
        self._workers = _memory_workers.WorkerRegistry()

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
            score = job.run_at
            control = job.control
            if isinstance(control, _control.JobControl):  # not a damaged one (judged later)
                score = _control.ready_score(job.run_at, control.priority)
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
        of a current record (sound or damaged): for reads that only ask
        whether something waits, and when (its score)."""
        while heap:
            if self._valid(heap[0]) is not None:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _peek(
        self, heap: list[_HeapEntry], index: _Index, aside: _Aside
    ) -> tuple[_HeapEntry, Job] | None:
        """Drop stale entries from the top of ``heap`` (an ``index`` heap),
        dead-lettering into ``aside`` records that cannot be used; return the
        usable top entry and its job."""
        while (entry := self._top(heap)) is not None:
            rec = self._records[entry[2]]
            if self._set_aside(entry[2], rec, aside, index) is None:
                return entry, rec.job
            heapq.heappop(heap)  # dead-lettered: the entry is stale now
        return None

    def _set_aside(
        self, job_id: str, rec: _Record, aside: _Aside, index: _Index | None = None
    ) -> str | None:
        """None when ``rec`` can be used (and, found in ``index``, is in one
        of its states); otherwise dead-letter it into ``aside`` and say why."""
        job = rec.job
        problems = _memory_damage.record_damage(job, job_id, rec.home)
        if not problems and index is not None and job.state not in index.states:
            problems = [
                f"field 'state' holds {job.state!r}, but the job is in the {index.name} index"
            ]
        if not problems:
            return None
        reason = "; ".join(problems)
        dead = _memory_damage.dead_lettered(job, job_id, rec.home, reason, self._clock())
        self._put(dead)
        self._release_unique(job_id)
        aside.dead.append(_memory_damage.shown(dead, job_id, rec.home))
        return reason

    def _release_unique(self, job_id: str) -> None:
        """The record ``job_id`` went dead or aborted: it gives back the
        unique key it holds (none: nothing happens)."""
        rec = self._records.get(job_id)
        if rec is not None:
            self._unique.release(rec.home, rec.unique, job_id)

    def _set_aside_held(self, leases: Sequence[LeaseRef]) -> _Aside:
        """Judge the records ``leases`` hold (their token matches; records
        not held are not the caller's, damaged or not): dead-letter the ones
        that cannot be used, so the fenced operation then finds them not held."""
        aside = _Aside()
        for ref in leases:
            rec = self._records.get(ref.job_id)
            if rec is not None and ref.token and rec.job.lease_token == ref.token:
                self._set_aside(ref.job_id, rec, aside)
        return aside

    def _set_aside_finished(self, queues: Sequence[str]) -> _Aside:
        """Judge the records of ``queues`` in no heap (succeeded, dead, or of
        an unreadable state): dead-letter the ones that cannot be used."""
        aside = _Aside()
        wanted = set(queues)
        for job_id, rec in list(self._records.items()):
            if rec.home in wanted and not _indexed(rec.job.state):
                self._set_aside(job_id, rec, aside)
        return aside

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
        results = []
        # unique jobs' IDs first: a refused one must not follow stored ones
        ids = [
            _partitioning.routed_job_id(new, self._active(new.queue).partitions)
            if new.unique is not None or new.control is not None
            else new.id
            for new in jobs
        ]
        for new, job_id in zip(jobs, ids, strict=True):
            existing = self._records.get(job_id)
            if existing is not None:
                ex = _memory_damage.shown(existing.job, job_id, existing.home)
                results.append(
                    EnqueueResult(job_id, False, ex.run_at, ex.queue_version, ex.partition)
                )
                continue
            active = self._active(new.queue)
            run_at = new.run_at if new.run_at is not None else now + max(0.0, new.delay)
            if new.unique is not None:
                claim, holder_id, holder = self._unique.claim(new, now, self._job_of)
                if claim is _memory_unique.Claim.DUPLICATE:
                    results.append(self._held_result(new, holder_id, holder, active))
                    continue
                if claim is _memory_unique.Claim.REPLACE:
                    assert holder is not None
                    replaced = attrs.evolve(
                        holder,
                        payload=new.payload,
                        headers=new.headers,
                        run_at=run_at,
                        state=JobState.READY if run_at <= now else JobState.SCHEDULED,
                    )
                    self._put(replaced)
                    results.append(
                        EnqueueResult(
                            holder.id, False, run_at, holder.queue_version, holder.partition
                        )
                    )
                    continue
            job = Job(
                id=job_id,
                queue=new.queue,
                kind=new.kind,
                payload=new.payload,
                run_at=run_at,
                state=JobState.READY if run_at <= now else JobState.SCHEDULED,
                max_retries=new.max_retries,
                timeout=new.timeout,
                queue_version=active.version,
                partition=partition_of(job_id, active.partitions),
                created_at=now,
                headers=new.headers,
                then=new.then,
                control=_stored_control(new, now),
            )
            self._put(job)
            if new.unique is not None:
                self._records[job_id].unique = new.unique
                self._unique.take(new.queue, new.unique, job_id, now)
            results.append(EnqueueResult(job.id, True, run_at, job.queue_version, job.partition))
        return results

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
            return EnqueueResult(
                holder.id, False, holder.run_at, holder.queue_version, holder.partition
            )
        assert new.unique is not None and new.unique.key is not None
        home = partition_of(new.unique.key, active.partitions)
        return EnqueueResult(holder_id, False, 0.0, active.version, home)

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
            rec = self._records.get(job_id)
            if rec is None or rec.job.then is None:
                del self._outbox[job_id]  # trimmed or deleted meanwhile: nothing to continue
                continue
            job = rec.job
            assert job.then is not None
            out.append(
                Continuation(job_id, queue, job.queue_version, job.partition, job.then, job.result)
            )
        return out

    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        await trio.lowlevel.checkpoint()
        for c in done:
            self._outbox.pop(c.job_id, None)

    async def wait_continuations(self, timeout: float) -> None:
        if not self._outbox_filled.is_set():
            with trio.move_on_after(timeout):
                await self._outbox_filled.wait()
        # reset before the caller reads the outbox: a settle after this sets it again
        self._outbox_filled = trio.Event()
        await trio.lowlevel.checkpoint()

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
        await trio.lowlevel.checkpoint()
        now = self._clock()
        aside = _Aside()
        active = [q for q in queues if q.name not in self._paused]
        available = {q.name: self._ready_count(q.name, count) for q in active}
        shares = (share_strictly if strict else share_by_weight)(active, count, available)
        leased: list[LeasedJob] = []
        expired: list[Job] = []
        held_until: float | None = None
        capped = False
        for queue, share in shares.items():
            heap = self._ready.get(queue, [])
            # what flow control held back goes back after the batch; as on
            # Redis, at most share + 256 ready jobs are looked at
            held: list[_HeapEntry] = []
            looked, got = 0, 0
            while got < share and looked < share + 256:
                top = self._peek(heap, _READY, aside)
                if top is None:
                    break
                heapq.heappop(heap)
                looked += 1
                entry, ready = top
                if ready.control is not None:
                    verdict = self._control.admit(ready, ready.control, now, self._job_of)
                    if verdict.verdict is _memory_control.Verdict.EXPIRED:
                        expired.append(self._expire(ready, now))
                        continue
                    if verdict.verdict is _memory_control.Verdict.HELD:
                        held.append(entry)
                        if verdict.until is None:
                            capped = True
                        elif held_until is None or verdict.until < held_until:
                            held_until = verdict.until
                        continue
                token = f"{self._token_prefix}-{next(self._tokens)}"
                job = attrs.evolve(
                    ready,
                    state=JobState.LEASED,
                    attempts=ready.attempts + 1,
                    lease_token=token,
                    lease_owner=worker_id,
                    lease_expires_at=now + lease_duration,
                )
                self._put(job)
                leased.append(LeasedJob(job, token, now + lease_duration, now))
                got += 1
            for entry in held:
                heapq.heappush(heap, entry)
        return LeaseResult(
            tuple(leased),
            aside.report(),
            tuple(expired),
            None if held_until is None else max(0.0, held_until - now),
            capped,
        )

    def _expire(self, job: Job, now: float) -> Job:
        """Dead-letter a ready job whose expiry passed before it started."""
        assert job.control is not None and job.control.expires_at is not None
        dead = attrs.evolve(
            job,
            state=JobState.DEAD,
            finished_at=now,
            last_error=_control.expired_error(job.control.expires_at),
        )
        self._put(dead)
        rec = self._records[job.id]
        self._unique.release(rec.home, rec.unique, job.id)
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
        await trio.lowlevel.checkpoint()
        aside = self._set_aside_held(leases)
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
        return RenewResult(tuple(results), aside.report(), frozenset(flagged))

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        await trio.lowlevel.checkpoint()
        aside = self._set_aside_held([s.lease for s in settlements])
        now = self._clock()
        results = []
        aborted = []
        unclaimed_dead: list[int] = []
        for i, s in enumerate(settlements):
            job = self._held(s.lease, now)
            if job is None:
                results.append(False)
                continue
            cleared = attrs.evolve(job, lease_token="", lease_owner="", lease_expires_at=None)
            rec = self._records[job.id]
            if job.control is not None and self._control.release(rec.home, job.control, job.id):
                self._notify_ready()  # a slot came back: leasers held by it look again
            kind = s.kind
            if rec.abort and kind in _RUNS_AGAIN:
                kind = SettleKind.ABORTED  # the abort wins over running it again
            if kind is SettleKind.ABORTED:
                self._unique.release(rec.home, rec.unique, job.id)
                self._put(
                    attrs.evolve(
                        cleared,
                        state=JobState.ABORTED,
                        last_error=rec.abort or s.error or _jobs.abort_error(),
                        finished_at=now,
                    )
                )
                aborted.append(i)
                results.append(True)
                continue
            if rec.unique is not None:
                if s.kind is SettleKind.SUCCEEDED:
                    self._unique.succeeded(rec.home, rec.unique, job.id, now)
                elif s.kind is SettleKind.DEAD or s.kind is SettleKind.DISCARD:
                    self._unique.release(rec.home, rec.unique, job.id)
            if s.kind is SettleKind.SUCCEEDED:
                # the record stays while it is retained or its result lives
                keeps_result = s.result is not None and s.result_ttl > 0
                keep = max(s.retain_for, s.result_ttl if keeps_result else 0.0)
                if job.then is not None:
                    # a workflow job: kept, so its continuation's IDs stay taken
                    keep = max(keep, WORKFLOW_KEEP)
                    self._outbox[job.id] = rec.home
                    self._outbox_filled.set()
                if keep <= 0 and job.id in self._done:
                    keep = WAITED_KEEP  # its waiters read the outcome after the wake-up
                if keep > 0:
                    self._put(
                        attrs.evolve(
                            cleared,
                            state=JobState.SUCCEEDED,
                            finished_at=now,
                            result=s.result if keeps_result else None,
                            result_until=now + s.result_ttl if keeps_result else None,
                        )
                    )
                    self._records[job.id].retain_until = now + keep
                    self._records[job.id].retained = s.retain_for > 0 or job.then is not None
                else:
                    self._delete(job.id)
            elif s.kind is SettleKind.RETRY:
                self._put(
                    attrs.evolve(
                        cleared,
                        state=JobState.RETRY_WAIT,
                        run_at=now + max(0.0, s.retry_delay),
                        last_error=s.error,
                        unclaimed_since=None,  # it ran: no longer unclaimed
                    )
                )
            elif s.kind is SettleKind.DEAD:
                self._put(
                    attrs.evolve(cleared, state=JobState.DEAD, last_error=s.error, finished_at=now)
                )
            elif s.kind is SettleKind.DISCARD:
                if job.id in self._done:
                    # its waiters read the failure after the wake-up
                    rec.discarded = True
                    rec.retain_until = now + WAITED_KEEP
                    self._put(
                        attrs.evolve(
                            cleared, state=JobState.DEAD, last_error=s.error, finished_at=now
                        )
                    )
                else:
                    self._delete(job.id)
            elif s.kind is SettleKind.DEFER:
                delay = max(0.0, s.retry_delay)
                if job.control is not None:
                    self._control.hold_back(rec.home, job.control, now, delay)
                self._put(
                    attrs.evolve(
                        cleared,
                        state=JobState.RETRY_WAIT,
                        run_at=now + delay,
                        last_error=s.error,
                        attempts=max(0, job.attempts - 1),
                        unclaimed_since=None,  # a worker with its handler took it
                    )
                )
            elif s.kind is SettleKind.UNCLAIMED:
                after = _memory_unclaimed.unclaimed(cleared, s, now)
                if after.state is JobState.DEAD:
                    self._unique.release(rec.home, rec.unique, job.id)
                    unclaimed_dead.append(i)
                self._put(after)
            else:  # RELEASE
                self._put(
                    attrs.evolve(cleared, state=JobState.READY, attempts=max(0, job.attempts - 1))
                )
            results.append(True)
        return SettleResult(
            tuple(results), aside.report(), frozenset(aborted), frozenset(unclaimed_dead)
        )

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        aside = _Aside()
        requeued: list[str] = []
        dead: list[Job] = []
        aborted: list[Job] = []
        for queue in queues:
            heap = self._leased.get(queue, [])
            while len(requeued) + len(dead) + len(aborted) < limit:
                top = self._peek(heap, _LEASED, aside)
                if top is None or top[0][0] > now:
                    break
                heapq.heappop(heap)
                job = attrs.evolve(top[1], lease_token="", lease_owner="", lease_expires_at=None)
                rec = self._records[job.id]
                if rec.abort:
                    # its worker died (or hung) after an abort was asked
                    job = attrs.evolve(
                        job, state=JobState.ABORTED, finished_at=now, last_error=rec.abort
                    )
                    aborted.append(job)
                    self._unique.release(rec.home, rec.unique, job.id)
                elif job.attempts > job.max_retries:
                    job = attrs.evolve(
                        job,
                        state=JobState.DEAD,
                        finished_at=now,
                        last_error=(
                            f"lease expired on attempt {job.attempts} of "
                            f"{job.max_retries + 1} (worker lost); retries exhausted"
                        ),
                    )
                    dead.append(job)
                    self._unique.release(rec.home, rec.unique, job.id)
                else:
                    # its worker may have had the handler: no longer unclaimed
                    job = attrs.evolve(job, state=JobState.READY, run_at=now, unclaimed_since=None)
                    requeued.append(job.id)
                self._put(job)
        return RecoverResult(tuple(requeued), tuple(dead), aside.report(), tuple(aborted))

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        await trio.lowlevel.checkpoint()
        aside = self._set_aside_finished(queues)
        now = self._clock()
        wanted = set(queues)
        deleted = 0
        dead_by_queue: dict[str, list[Job]] = {}
        retained: dict[str, list[_Record]] = {}
        for rec in list(self._records.values()):
            job = rec.job
            if rec.home not in wanted:
                continue
            if rec.discarded:
                if rec.retain_until <= now:
                    self._delete(job.id)  # expired, as the RedisStore's record would
            elif job.state is JobState.SUCCEEDED and rec.retain_until <= now:
                self._delete(job.id)
                deleted += 1
            elif job.state is JobState.SUCCEEDED and rec.retained:
                retained.setdefault(rec.home, []).append(rec)
            elif job.state in (JobState.DEAD, JobState.ABORTED):
                # aborted jobs are kept, and trimmed, as dead ones are
                finished = job.finished_at or 0.0
                if dead_max_age is not None and finished + dead_max_age <= now:
                    self._delete(job.id)
                    deleted += 1
                else:
                    dead_by_queue.setdefault(job.queue, []).append(job)
        if dead_max_count is not None:
            for dead in dead_by_queue.values():
                dead.sort(key=lambda j: (j.finished_at or 0.0, j.id))
                for job in dead[: max(0, len(dead) - dead_max_count)]:
                    self._delete(job.id)
                    deleted += 1
        if keep_succeeded is not None:
            for recs in retained.values():
                # those whose retention ends first go first (the RedisStore's index order)
                recs.sort(key=lambda r: (r.retain_until, r.job.id))
                for rec in recs[: max(0, len(recs) - keep_succeeded)]:
                    self._delete(rec.job.id)
                    deleted += 1
        return CountResult(deleted, aside.report())

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
            if rec.home in counts and not rec.discarded:
                job = _memory_damage.shown(rec.job, job_id, rec.home)
                counts[job.queue][job.state] += 1
                key = (job.queue_version, job.partition)
                parts[job.queue][key] = parts[job.queue].get(key, 0) + 1
        return [QueueStats(q, counts[q], q in self._paused, parts[q]) for q in names]

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        """A damaged record is shown with defaults in its damaged fields,
        named in ``Job.damage``."""
        await trio.lowlevel.checkpoint()
        rec = self._records.get(job_id)
        if rec is None or (queue is not None and rec.home != queue):
            return None
        return _memory_damage.shown(rec.job, job_id, rec.home)

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        await trio.lowlevel.checkpoint()
        jobs = [
            _memory_damage.shown(r.job, i, r.home)
            for i, r in self._records.items()
            if r.home == queue and not r.discarded
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
            return False  # damaged: dead-lettered (it cannot be run)
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
        self._delete(job_id)
        return True

    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        """A record that cannot be used is dead-lettered (FINISHED), as
        ``run_now`` does."""
        await trio.lowlevel.checkpoint()
        job = self._find(job_id, queue)
        if job is None:
            return AbortResult.NOT_FOUND
        rec = self._records[job_id]
        if self._set_aside(job_id, rec, _Aside()):
            return AbortResult.FINISHED  # damaged: dead-lettered
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
            return AbortResult.ABORTED
        if job.state is JobState.LEASED:
            rec.abort = rec.abort or _jobs.abort_error(reason)  # the first one's reason stands
            return AbortResult.FLAGGED
        return AbortResult.FINISHED

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        """Dead records that cannot be used are dead-lettered again (finished
        now, ``last_error`` naming the damage) instead of requeued; those
        already dead-lettered as damaged are requeued as they are (the next
        lease sets them aside again if they still cannot be run)."""
        await trio.lowlevel.checkpoint()
        aside = _Aside()
        dead: list[tuple[float, str, _Record]] = []
        for job_id, rec in list(self._records.items()):
            if rec.home == queue and rec.job.state is JobState.DEAD and not rec.discarded:
                if self._set_aside(job_id, rec, aside) is None:
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
            if r.job.queue == queue and r.job.queue_version == version
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
        :mod:`._memory_check`); never reports NO_RECORD."""
        return await _memory_check.check_memory(
            self, queues, repair=repair, batch=batch, lease_grace=lease_grace
        )


def open_memory_store(url: str) -> MemoryStore:
    """A new MemoryStore for ``memory://`` (the scheme registry's opener)."""
    if url.strip().lower() not in ("memory", "memory://"):
        raise ValueError(f"the in-memory store takes no options: use 'memory://', not {url!r}")
    return MemoryStore()
