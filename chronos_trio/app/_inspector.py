"""The inspector: what an operator sees and does, on any store.

``app.inspector()`` (or ``Inspector(store)`` for a bare store URL) lists
queues with their counts, pages through jobs, shows one job, and runs the
admin actions: run-now, delete, abort, requeue dead jobs, pause/resume a queue,
queue topology (promote a new version, complete a drained one), and the
store checker (find, and repair, what no correct operation leaves behind). The command
line (``python -m chronos_trio queues|jobs|job|...``) is a thin layer on it.

Every method checks its input against the store first and raises a precise
error: :class:`UnknownQueue`, :class:`UnknownJob`, ``ValueError`` for a bad
state name, :class:`ActionRefused` for an action the job's state forbids,
``TopologyError`` for a refused topology change, ``StoreError`` when the
store is unreachable.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import attrs

from ..records._errors import ActionRefused, InspectorError, UnknownJob, UnknownQueue
from ..records._jobs import Job, JobRef, JobState
from ..records._notes import JobNotes
from ..records._options import check_queue
from ..records._placement import Placement
from ..records._workers import WorkerInfo, worker_order
from ..runtime._registry import WorkerHost
from ..runtime._schedule import Schedule
from ..runtime._stored_schedules import StoredEntry, entries
from ..store import (
    LEASE_GRACE,
    AbortResult,
    AdminRole,
    Capability,
    CheckReport,
    CheckRole,
    JobQuery,
    LeadershipRole,
    NotesRole,
    QueueTopology,
    ScheduleStoreRole,
    SearchPage,
    Store,
    StoreRole,
    TopologyRole,
    VersionState,
    require_capabilities,
    require_roles,
)
from ..store._search import SCAN_LIMIT
from ._batch import BatchStatus, batch_status
from ._bulk import BULK_BATCH, BulkAction, BulkProgress, BulkResult, act_on_ids, act_on_matching

#: States from which ``run_now`` makes a job ready at once.
RUN_NOW_STATES = frozenset({JobState.SCHEDULED, JobState.RETRY_WAIT, JobState.DEAD})


@attrs.frozen
class VersionInfo:
    """One topology version of a queue and how many jobs each partition holds."""

    version: int
    partitions: int
    state: VersionState
    by_partition: dict[int, int]

    @property
    def jobs(self) -> int:
        return sum(self.by_partition.values())


@attrs.frozen
class QueueInfo:
    """A queue's counts per state and per (version, partition)."""

    name: str
    paused: bool
    counts: dict[JobState, int]
    versions: tuple[VersionInfo, ...]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@attrs.frozen
class JobPage:
    """``jobs`` of ``queue`` in ``state`` from ``offset``; ``total`` is how many
    jobs that state holds in all (so a caller knows whether more pages exist)."""

    queue: str
    state: JobState
    offset: int
    limit: int
    total: int
    jobs: tuple[Job, ...]

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.jobs)
        return end if end < self.total and self.jobs else None


def payload_view(job: Job) -> Any:
    """The payload for display: the decoded JSON value when it is JSON, else
    ``{"base64": ...}`` (raw bytes payloads)."""
    try:
        return json.loads(job.payload)
    except ValueError:
        return {"base64": base64.b64encode(job.payload).decode()}


def result_view(job: Job) -> Any:
    """A succeeded job's stored result for display (JSON value, or
    ``{"base64": ...}`` for bytes), or None when none is kept."""
    if job.result is None:
        return None
    try:
        return json.loads(job.result)
    except ValueError:
        return {"base64": base64.b64encode(job.result).decode()}


def duration_text(seconds: float) -> str:
    """A span of seconds for people: ``4.2s``, ``3m05s``, ``2h03m``, ``3d04h``
    (the sign dropped; :func:`relative_text` says which way)."""
    s = abs(seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def relative_text(ts: float | None, now: float) -> str:
    """``in 4.2s`` / ``3m05s ago`` from the store's ``now`` (``-`` for None):
    what the CLI and the dashboard show beside a store-clock time."""
    if ts is None:
        return "-"
    delta = ts - now
    return f"in {duration_text(delta)}" if delta >= 0 else f"{duration_text(delta)} ago"


def _refuse_damaged(job: Job, action: str) -> None:
    """A damaged record would only be dead-lettered again by the next lease
    (or, of a newer format, is not this version's to move): say so at once."""
    if job.damage:
        raise ActionRefused(
            f"job {job.id} cannot be run: its stored record is damaged ({job.damage}); "
            f"{action} refused (delete it, or repair the record)"
        )


def next_run_at(job: Job) -> float | None:
    """When the job runs next: its due time while it waits, None otherwise."""
    if job.state in (JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT):
        return job.run_at
    return None


@attrs.frozen
class ScheduleInfo:
    """One schedule as the inspector shows it. Times are epoch seconds on the
    store's clock; ``leader``/``epoch`` describe the current leadership (None
    when nobody leads, e.g. no worker is running)."""

    id: str
    kind: str
    spec: str
    tz: str
    misfire: str
    queue: str
    next_run: float | None
    last_run: float | None
    leader: str | None
    epoch: int | None
    #: Where it is declared: "code" (``app.cron``/``app.every``) or "stored"
    #: (``app.dynamic_schedules``).
    source: str = "code"
    #: A stored schedule that is paused (no trigger fires), or one that the
    #: leader ignores (``ignored`` says why: a code schedule has its id, or
    #: its definition cannot be read).
    paused: bool = False
    ignored: str = ""
    #: Its next trigger times (up to :data:`NEXT_FIRES`), epoch seconds;
    #: shown in ``tz`` beside UTC (``runtime._schedule.zoned_time``).
    next_runs: tuple[float, ...] = ()


@attrs.frozen
class LimitInfo:
    """One rate or concurrency limit key of a queue (see ``records._control``)
    as the inspector shows it: what the store holds now and, when the app's
    tasks declare a limit under this key, that limit.

    ``in_use``: concurrency slots held now (0 for a rate limit).
    ``booked_until``: a rate limit's permits are booked up to this time
    (store clock; past or None: a permit is free now). ``declared``: the
    limit as the app declares it ("50/1s burst 5", "4"); '' when the key
    is made per job (a key function) or no task of the app names it."""

    queue: str
    key: str
    kind: str
    in_use: int
    booked_until: float | None
    declared: str


def declared_limits(app: WorkerHost | None, queue: str) -> dict[tuple[str, str], str]:
    """(kind, key) -> the limit as ``app``'s tasks of ``queue`` declare it,
    for the keys known without a payload (text, or the task's kind)."""
    out: dict[tuple[str, str], str] = {}
    if app is None:
        return out
    for spec in app.registry.tasks.values():
        control = spec.control
        if control is None or spec.queue != queue:
            continue
        for r in control.rate_limits:
            if r.key is None or isinstance(r.key, str):
                out[("rate", r.key or spec.kind)] = f"{r.count}/{r.per:g}s burst {r.burst}"
        for c in control.concurrency_limits:
            if c.key is None or isinstance(c.key, str):
                out[("concurrency", c.key or spec.kind)] = str(c.limit)
    return out


#: How many next trigger times a schedule row lists.
NEXT_FIRES = 3


async def schedule_rows(app: WorkerHost) -> list[ScheduleInfo]:
    """Every schedule of ``app``, declared in code and (when its store keeps
    them, :class:`ScheduleStoreRole`) stored, with its next runs (from the
    store's now; none for a paused or ignored one), last run (the store's
    trigger bookkeeping) and the current leader. ``TypeError`` if the app's
    store does not offer :class:`LeadershipRole`."""
    store, registry = app.store, app.registry
    require_roles(store, LeadershipRole, what="listing schedules")
    name = registry.leadership_name
    now = await store.now()
    last = await store.schedule_last_fired(name)
    lead = await store.current_leader(name)
    stored: list[StoredEntry] = []
    if isinstance(store, ScheduleStoreRole):
        stored = entries(await store.stored_schedules(name), registry.schedules)
    rows = []
    listed: list[tuple[Schedule, str, bool, str]] = [
        (s, "code", False, "") for s in registry.schedules
    ]
    for e in stored:
        if e.schedule is None:  # an unreadable definition: its id and why
            rows.append(ScheduleInfo(e.id, "", "", "UTC", "", "", None, last.get(e.id),
                                     None, None, "stored", e.paused, e.error))  # fmt: skip
            continue
        ignored = "a schedule declared in code has its id" if e.shadowed else ""
        listed.append((e.schedule, "stored", e.paused, ignored))
    for s, source, paused, ignored in listed:
        fires = () if paused or ignored else tuple(s.next_fires(now, NEXT_FIRES))
        rows.append(
            ScheduleInfo(
                id=s.id,
                kind=s.kind,
                spec=s.spec,
                tz=s.tz,
                misfire=s.misfire,
                queue=s.resolved_queue(registry.tasks.get(s.kind)),
                next_run=fires[0] if fires else None,
                last_run=last.get(s.id),
                leader=lead.holder if lead is not None else None,
                epoch=lead.epoch if lead is not None else None,
                source=source,
                paused=paused,
                ignored=ignored,
                next_runs=fires,
            )
        )
    return rows


#: Jobs one :meth:`Inspector.purge` round deletes (one store call per partition).
PURGE_BATCH = 1000


class Inspector:
    """Inspection and administration of the jobs in ``store``.

    ``store`` must offer :class:`AdminRole` and :class:`TopologyRole`
    (``TypeError`` naming what it lacks otherwise), and
    :class:`LeadershipRole` for :meth:`schedules`. ``app`` (optional) adds
    the queues its tasks use to the known queues, so a queue can be paused or
    given a topology before its first job, and gives :meth:`schedules` the
    app's schedules.
    """

    #: The roles every inspector needs of its store.
    ROLES: tuple[type[StoreRole], ...] = (AdminRole, TopologyRole)

    def __init__(self, store: Store, *, app: WorkerHost | None = None) -> None:
        # Checked here, so a store without a role fails when the inspector is
        # made, not with an AttributeError in the middle of a command.
        require_roles(store, *self.ROLES, what="the inspector")
        self.store = store
        self.app = app

    async def aclose(self) -> None:
        await self.store.aclose()

    async def now(self) -> float:
        """The store's clock (times in jobs are on it)."""
        return await self.store.now()

    def locate(self, placement: Placement | None) -> tuple[int, int] | None:
        """The ``(version, partition)`` where a job of ``placement``
        (``Job.placement``, ``Finding.placement``) lives, for display; None
        when the store has no topology (:class:`TopologyRole`) or the
        placement names none."""
        store = self.store
        return store.locate(placement) if isinstance(store, TopologyRole) else None

    # -- queues ------------------------------------------------------------------
    async def queue_names(self) -> list[str]:
        """Every queue the store knows, plus the queues of the app's tasks."""
        names = set(await self.store.queues())
        if self.app is not None:
            names.update(task.queue for task in self.app.registry.tasks.values())
        return sorted(names)

    async def check_queue(self, queue: str) -> str:
        """``queue`` if it is known, else :class:`UnknownQueue` naming the known ones."""
        names = await self.queue_names()
        if queue not in names:
            known = ", ".join(names) if names else "none yet"
            raise UnknownQueue(f"unknown queue {queue!r} (known queues: {known})")
        return queue

    async def queues(self, names: Sequence[str] | None = None) -> list[QueueInfo]:
        """Counts per state and per version/partition of ``names`` (all known
        queues when None)."""
        if names is None:
            names = await self.queue_names()
        else:
            for name in names:
                await self.check_queue(name)
        infos = []
        for stats in await self.store.stats(list(names)):
            topology = await self.store.topology(stats.queue)
            parts: dict[int, dict[int, int]] = {}
            for (version, partition), count in stats.by_partition.items():
                parts.setdefault(version, {})[partition] = count
            versions = tuple(
                VersionInfo(
                    v.version,
                    v.partitions,
                    v.state,
                    {p: parts.get(v.version, {}).get(p, 0) for p in range(v.partitions)},
                )
                for v in topology.versions
            )
            infos.append(QueueInfo(stats.queue, stats.paused, dict(stats.counts), versions))
        return infos

    async def queue(self, name: str) -> QueueInfo:
        [info] = await self.queues([name])
        return info

    # -- jobs --------------------------------------------------------------------
    async def jobs(
        self, queue: str, state: JobState | str, *, offset: int = 0, limit: int = 50
    ) -> JobPage:
        """A page of ``queue``'s jobs in ``state`` (a ``JobState`` or its name),
        in the store's order (due time, lease expiry, or finish time)."""
        state = JobState.parse(state) if isinstance(state, str) else state
        if offset < 0 or limit < 1:
            raise ValueError(f"need offset >= 0 and limit >= 1, got offset={offset} limit={limit}")
        info = await self.queue(queue)
        jobs = await self.store.list_jobs(queue, state, offset=offset, limit=limit)
        return JobPage(queue, state, offset, limit, info.counts[state], tuple(jobs))

    async def job(self, job_id: str, *, queue: str | None = None) -> Job:
        """The job with ``job_id`` (in ``queue``, if given)."""
        if queue is not None:
            await self.check_queue(queue)
        job = await self.store.get_job(job_id, queue=queue)
        if job is None:
            where = f" in queue {queue!r}" if queue is not None else ""
            raise UnknownJob(f"no job with id {job_id!r}{where}")
        return job

    async def search(
        self,
        query: JobQuery | None = None,
        *,
        cursor: str | None = None,
        limit: int = 50,
        scan_limit: int = SCAN_LIMIT,
    ) -> SearchPage:
        """A page of the jobs matching ``query`` (every job when None) and
        the cursor of the next (see :meth:`~chronos_trio.store.SearchRole.search_jobs`:
        at most ``scan_limit`` records read per call; a ``partial`` page
        stopped at that bound, follow its cursor to keep searching).

        Raises :class:`UnknownQueue` for a queue the store does not know,
        ``ValueError`` for bad bounds or a cursor the store did not give,
        ``MissingCapability`` (a TypeError) on a store without search, and
        StoreError when the store cannot be reached."""
        require_capabilities(self.store, [Capability.SEARCH], what="searching jobs")
        query = JobQuery() if query is None else query
        for name in query.queues:
            await self.check_queue(name)
        return await self.store.search_jobs(
            query, cursor=cursor, limit=limit, scan_limit=scan_limit
        )

    async def bulk(
        self, action: BulkAction | str, jobs: Sequence[tuple[str, str]], *, reason: str = ""
    ) -> BulkResult:
        """``action`` (a :class:`BulkAction` or its name: requeue, run-now,
        delete, abort) on each of ``jobs`` ((queue, job id) pairs), each the
        store's atomic admin operation: a job the action does not apply to,
        or that changed state meanwhile, is skipped and counted, one that is
        gone counted missing (see ``app._bulk``). ``ValueError`` for an
        unknown action; ``MissingCapability`` for an abort on a store without it."""
        action = BulkAction.parse(action) if isinstance(action, str) else action
        if action is BulkAction.ABORT:
            require_capabilities(self.store, [Capability.ABORT], what="aborting jobs")
        return await act_on_ids(self.store, action, jobs, reason)

    async def bulk_matching(
        self,
        action: BulkAction | str,
        query: JobQuery,
        *,
        cursor: str | None = None,
        batch: int = BULK_BATCH,
        scan_limit: int = SCAN_LIMIT,
        reason: str = "",
    ) -> BulkProgress:
        """One step of ``action`` on every job matching ``query``: at most
        ``batch`` jobs; pass the returned ``cursor`` back until it is None
        (see ``app._bulk`` for how steps go on and what they count).
        Raises as :meth:`search` and :meth:`bulk`."""
        action = BulkAction.parse(action) if isinstance(action, str) else action
        require_capabilities(self.store, [Capability.SEARCH], what="bulk actions on a search")
        if action is BulkAction.ABORT:
            require_capabilities(self.store, [Capability.ABORT], what="aborting jobs")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 1000:
            raise ValueError(f"batch must be between 1 and 1000, got {batch!r}")
        for name in query.queues:
            await self.check_queue(name)
        return await act_on_matching(
            self.store,
            action,
            query,
            cursor=cursor,
            batch=batch,
            scan_limit=scan_limit,
            reason=reason,
        )

    async def batch(self, batch_id: str) -> BatchStatus:
        """A batch's live counts (``App.enqueue_batch``): members succeeded,
        failed and pending, the failed ones' IDs, its callback's state.
        Raises UnknownJob for a batch not found, StoreError when the store
        cannot be reached."""
        return await batch_status(self.store, batch_id)

    async def notes(self, job: Job) -> JobNotes | None:
        """The progress and log lines of ``job`` (as :meth:`job` read it);
        None when the store keeps no notes (``NotesRole``) or the job is
        gone meanwhile. Raises StoreError when the store cannot be reached."""
        if not isinstance(self.store, NotesRole):
            return None
        return await self.store.job_notes(JobRef(job.id, job.queue, job.placement))

    async def run_now(self, job_id: str, *, queue: str | None = None) -> Job:
        """Make a scheduled, retry_wait or dead job ready at once (a dead job
        starts over with its attempts reset); returns it as it is now."""
        job = await self.job(job_id, queue=queue)
        _refuse_damaged(job, "run-now")
        if job.state not in RUN_NOW_STATES:
            raise ActionRefused(
                f"job {job_id} is {job.state}: run-now applies to scheduled, "
                "retry_wait and dead jobs"
            )
        if not await self.store.run_now(job_id, queue=job.queue):
            raise ActionRefused(f"job {job_id} changed state meanwhile; nothing done")
        return await self.job(job_id, queue=job.queue)

    async def delete(self, job_id: str, *, queue: str | None = None) -> Job:
        """Delete a job that is not leased; returns the deleted job."""
        job = await self.job(job_id, queue=queue)
        if job.state is JobState.LEASED:
            raise ActionRefused(
                f"job {job_id} is leased by {job.lease_owner or 'a worker'}: "
                "a running job cannot be deleted"
            )
        if not await self.store.delete_job(job_id, queue=job.queue):
            raise ActionRefused(f"job {job_id} changed state meanwhile; nothing deleted")
        return job

    async def abort(self, job_id: str, *, queue: str | None = None, reason: str = "") -> Job:
        """Abort a job (see :meth:`~chronos_trio.store.AdminRole.abort`):
        one that waits is ``aborted`` at once; a leased one is flagged and
        its worker cancels it at its next lease renewal (within one
        heartbeat interval), then settles it aborted. Returns the job as it
        is now: ``aborted``, or still ``leased`` while its worker has not
        settled the abort. ``reason`` is kept in its ``last_error``.

        Raises UnknownJob, ActionRefused for a job already finished
        (succeeded, dead or aborted), and ``MissingCapability`` (a
        TypeError) on a store without abort."""
        require_capabilities(self.store, [Capability.ABORT], what="aborting a job")
        job = await self.job(job_id, queue=queue)
        done = await self.store.abort(job_id, queue=job.queue, reason=reason)
        if done is AbortResult.NOT_FOUND:
            raise UnknownJob(f"no job with id {job_id!r} in queue {job.queue!r} (gone meanwhile)")
        if done is AbortResult.FINISHED:
            now = await self.store.get_job(job_id, queue=job.queue)
            state = now.state if now is not None else job.state
            raise ActionRefused(f"job {job_id} is {state}: it has finished, nothing to abort")
        return await self.job(job_id, queue=job.queue)

    async def dead_count(self, queue: str) -> int:
        return (await self.queue(queue)).counts[JobState.DEAD]

    async def requeue_dead(
        self, queue: str, *, job_id: str | None = None, limit: int | None = None
    ) -> int:
        """Make dead jobs of ``queue`` ready again with their attempts reset:
        only ``job_id`` when given, else all of them (at most ``limit``).
        Returns how many were requeued."""
        await self.check_queue(queue)
        if job_id is not None:
            job = await self.job(job_id, queue=queue)
            _refuse_damaged(job, "requeue")
            if job.state is not JobState.DEAD:
                raise ActionRefused(f"job {job_id} is {job.state}, not dead")
            if not await self.store.run_now(job_id, queue=queue):
                raise ActionRefused(f"job {job_id} changed state meanwhile; nothing done")
            return 1
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        return (await self.store.requeue_dead(queue, limit=limit)).count

    async def purge(self, queue: str, *, batch: int = PURGE_BATCH) -> int:
        """Delete every job of ``queue`` that is not leased (scheduled,
        ready, retry_wait, retained succeeded, dead, aborted), ``batch`` at
        a time (see :meth:`~chronos_trio.store.AdminRole.purge_queue`: each
        job goes whole; a batch is one store call per partition). Leased
        jobs are left to finish (abort them first to stop them); the queue
        stays known, with its topology and pause state. Safe with live
        workers; jobs enqueued while it runs may be deleted too. Returns how
        many jobs were deleted.

        Raises UnknownQueue for a queue the store does not know,
        ``ValueError`` for a ``batch`` that is not an int >= 1, and
        StoreError when the store cannot be reached (some batches may have
        been deleted: purging again is harmless)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        await self.check_queue(queue)
        total = 0
        while True:
            done = (await self.store.purge_queue(queue, limit=batch)).count
            total += done
            if done < batch:
                return total

    async def pause(self, queue: str) -> bool:
        """Stop workers leasing from ``queue`` (at their next lease); jobs
        already leased run to completion. A queue that never held a job can
        be paused too, before its first one (it is registered then), so a
        new queue's jobs wait until it is resumed.

        Returns whether the queue was known before (it held a job, was
        paused or given a topology, or is an app task's queue): False says
        it is new, which a caller may show (a misspelled name, say).
        ``ValueError`` for a name that is not a non-empty string."""
        return await self._set_paused(queue, True)

    async def resume(self, queue: str) -> bool:
        """Let workers lease from ``queue`` again (idle ones are woken).
        Returns and raises as :meth:`pause`."""
        return await self._set_paused(queue, False)

    async def _set_paused(self, queue: str, paused: bool) -> bool:
        known = check_queue(queue) in await self.queue_names()
        await self.store.set_paused(queue, paused)
        return known

    # -- schedules ---------------------------------------------------------------
    async def schedules(self) -> list[ScheduleInfo]:
        """The app's cron/interval schedules with next and last run and the
        current leader. Needs the app (schedules are declared in code) and a
        store offering :class:`LeadershipRole` (``TypeError`` otherwise)."""
        if self.app is None:
            raise InspectorError("schedules are declared in the app: inspect it via the app")
        return await schedule_rows(self.app)

    # -- flow control ------------------------------------------------------------
    async def limits(self, queue: str | None = None) -> list[LimitInfo]:
        """The rate and concurrency limits of ``queue`` (every known queue
        when None): each key the store holds state for, with its use now,
        and each limit the app's tasks declare (in use or not)."""
        names = [await self.check_queue(queue)] if queue is not None else await self.queue_names()
        out: list[LimitInfo] = []
        for name in names:
            declared = declared_limits(self.app, name)
            seen: set[tuple[str, str]] = set()
            for u in await self.store.limit_usage(name):
                seen.add((u.kind, u.key))
                out.append(
                    LimitInfo(
                        name,
                        u.key,
                        u.kind,
                        u.in_use,
                        u.booked_until,
                        declared.get((u.kind, u.key), ""),
                    )
                )
            for (kind, key), text in sorted(declared.items()):
                if (kind, key) not in seen:
                    out.append(LimitInfo(name, key, kind, 0, None, text))
        return out

    # -- workers -------------------------------------------------------------------
    async def workers(self) -> list[WorkerInfo]:
        """Every live worker process (each records itself in the store and
        refreshes its entry every heartbeat interval): id, host, pid,
        queues, concurrency, when it started and last beat (store clock),
        and the jobs it was running at that beat. Sorted by host, then
        pid. A worker that stopped cleanly is gone at once; one that died
        without unregistering drops out when its entry's ttl (a few beats)
        passes. Raises StoreError when the store cannot be reached, and
        ``MissingCapability`` (a TypeError) on a store without the registry."""
        require_capabilities(self.store, [Capability.REGISTRY], what="listing workers")
        return sorted(await self.store.workers(), key=worker_order)

    # -- the store checker -------------------------------------------------------
    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """Walk the store (``queues``, else every queue it knows) and report
        what no correct operation leaves behind; with ``repair``, put each job
        back where it belongs or dead-letter it with a reason (see
        :meth:`~chronos_trio.store.CheckRole.check`). Safe while workers run.

        Raises :class:`UnknownQueue` for a name the store does not know,
        ``ValueError`` for ``batch`` < 1 or a negative ``lease_grace``,
        ``TypeError`` if the store does not offer :class:`CheckRole`, and
        StoreError when it cannot be reached.
        """
        require_roles(self.store, CheckRole, what="checking the store")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if not lease_grace >= 0:
            raise ValueError(f"lease grace must be >= 0 seconds, got {lease_grace}")
        if queues is not None:
            for queue in queues:
                await self.check_queue(queue)
        return await self.store.check(queues, repair=repair, batch=batch, lease_grace=lease_grace)

    # -- topology ----------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        return await self.store.topology(await self.check_queue(queue))

    async def promote(
        self, queue: str, *, partitions: int, version: int | None = None
    ) -> QueueTopology:
        """Route new jobs of ``queue`` to a new ``version`` (default: one above
        the highest) with ``partitions`` partitions; the old active version
        drains. ``TopologyError`` if the store refuses."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        current = await self.topology(queue)
        if version is None:
            version = max(v.version for v in current.versions) + 1
        return await self.store.promote_queue_version(queue, version, partitions)

    async def complete(self, queue: str, *, version: int | None = None) -> QueueTopology:
        """Remove a drained version (default: the only draining one).
        ``TopologyError`` if it still holds jobs or is active."""
        current = await self.topology(queue)
        if version is None:
            draining = [v.version for v in current.versions if v.state is VersionState.DRAINING]
            if len(draining) != 1:
                raise ActionRefused(
                    f"queue {queue!r} has {len(draining)} draining versions "
                    f"{draining}: name the one to complete"
                    if draining
                    else f"queue {queue!r} has no draining version to complete"
                )
            version = draining[0]
        return await self.store.complete_draining_version(queue, version)


__all__ = [
    "Inspector",
    "JobPage",
    "QueueInfo",
    "ScheduleInfo",
    "VersionInfo",
    "next_run_at",
    "payload_view",
    "schedule_rows",
]
