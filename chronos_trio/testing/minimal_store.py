"""A store with only the core: what a worker needs to run jobs, and nothing
else. It shows how small a backend can start (see docs/stores.md), and the
test suite runs a real worker and the core conformance checks on it.

:class:`MinimalStore` keeps its jobs in one dict, in this process, on Trio's
clock (``autojump_clock`` works). It offers :class:`WorkerRole` and no
capability: no promoter (it judges due times in its lease: a scheduled or
retry_wait job whose time has come is leased as a ready one is, and
``wait_ready`` returns by then), no registry, no admin or retention (dead
jobs stay until the store goes), no leadership, results, workflows, checker
or features; it refuses (:class:`~chronos_trio.store.MissingCapability`) a
new job that carries one. It meets no damaged record, so it sets nothing
aside.
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections.abc import Iterator, Sequence

import attrs
import trio

from ..records._jobs import EnqueueResult, Job, JobState, LeasedJob, LeaseRef, NewJob
from ..store._offers import check_jobs
from ..store._partitioning import share_by_weight, share_strictly
from ..store._results import (
    NOTHING_SET_ASIDE,
    LeaseResult,
    QueueWeight,
    RecoverResult,
    RenewResult,
    SettleKind,
    Settlement,
    SettleResult,
)
from ..store._roles import WorkerRole

#: States a job waits in; one whose due time has come is leased.
WAITING = frozenset({JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT})


class MinimalStore(WorkerRole):
    """The core only, in memory (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}  # one ID space for every queue
        self._order: dict[str, int] = {}  # enqueue order: ties of due time
        self._retained: dict[str, float] = {}  # succeeded job -> kept until
        self._seq = itertools.count()
        self._wake = trio.Event()
        self._offset: float | None = None

    async def now(self) -> float:
        return self._now()

    def _now(self) -> float:
        """Trio's clock read as Unix time (anchored at first use)."""
        if self._offset is None:
            self._offset = time.time() - trio.current_time()
        return self._offset + trio.current_time()

    def _wake_all(self) -> None:
        self._wake.set()
        self._wake = trio.Event()

    def _held(self, ref: LeaseRef, now: float) -> Job | None:
        """The job of ``ref`` if its lease is held with that token and unexpired."""
        job = self._jobs.get(ref.job_id)
        if job is None or job.state is not JobState.LEASED or job.lease_token != ref.token:
            return None
        expires = job.lease_expires_at
        return job if expires is not None and expires > now else None

    def _due(self, queue: str, now: float) -> Iterator[Job]:
        """The jobs of ``queue`` whose due time has come: leasable."""
        for job in self._jobs.values():
            if job.queue == queue and job.state in WAITING and job.run_at <= now:
                yield job

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        check_jobs(self, jobs)  # refuse, before storing any, a feature it lacks
        now = self._now()
        results = []
        for new in jobs:
            old = self._jobs.get(new.id)
            if old is not None and self._retained.get(new.id, math.inf) <= now:
                self._drop(new.id)  # its retention ended: the ID is free again
                old = None
            if old is not None:
                results.append(EnqueueResult(new.id, False, old.run_at))
                continue
            due = new.run_at if new.run_at is not None else now + max(0.0, new.delay)
            state = JobState.READY if due <= now else JobState.SCHEDULED
            self._jobs[new.id] = Job(
                id=new.id, queue=new.queue, kind=new.kind, payload=new.payload,
                run_at=due, state=state, max_retries=new.max_retries,
                timeout=new.timeout, created_at=now, headers=new.headers,
            )  # fmt: skip
            self._order[new.id] = next(self._seq)
            results.append(EnqueueResult(new.id, True, due))
        if results:
            self._wake_all()
        return results

    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> LeaseResult:
        now = self._now()
        due = {
            q.name: sorted(self._due(q.name, now), key=lambda j: (j.run_at, self._order[j.id]))
            for q in queues
        }
        share = share_strictly if strict else share_by_weight
        shares = share(queues, count, {name: len(jobs) for name, jobs in due.items()})
        leased: list[LeasedJob] = []
        for name, n in shares.items():
            for job in due[name][:n]:
                token, expires = uuid.uuid4().hex, now + lease_duration
                job = attrs.evolve(
                    job, state=JobState.LEASED, attempts=job.attempts + 1,
                    lease_token=token, lease_owner=worker_id, lease_expires_at=expires,
                )  # fmt: skip
                self._jobs[job.id] = job
                leased.append(LeasedJob(job, token, expires, now))
        # no flow control, nothing set aside: the core has neither
        return LeaseResult(tuple(leased), NOTHING_SET_ASIDE, (), None, False)

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        now = self._now()
        renewed = []
        for ref in leases:
            job = self._held(ref, now)
            if job is not None:
                self._jobs[job.id] = attrs.evolve(job, lease_expires_at=now + lease_duration)
            renewed.append(job is not None)
        return RenewResult(tuple(renewed), NOTHING_SET_ASIDE, frozenset())

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        now = self._now()
        applied, aborted, unclaimed_dead = [], set(), set()
        for index, s in enumerate(settlements):
            job = self._held(s.lease, now)
            applied.append(job is not None)
            if job is None:
                continue
            job = attrs.evolve(job, lease_token="", lease_owner="", lease_expires_at=None)
            later = now + max(0.0, s.retry_delay)
            given_back = max(0, job.attempts - 1)  # the attempt its lease took
            kind = s.kind
            if kind is SettleKind.UNCLAIMED:
                since = job.unclaimed_since
                if since is None or not math.isfinite(since) or since > now:
                    since = now
                job = attrs.evolve(job, attempts=given_back, unclaimed_since=since)
                if now - since < s.unclaimed_grace:
                    self._jobs[job.id] = attrs.evolve(job, state=JobState.RETRY_WAIT, run_at=later)
                    continue
                unclaimed_dead.add(index)
                kind = SettleKind.DEAD
            if kind is SettleKind.SUCCEEDED and s.retain_for > 0:
                self._jobs[job.id] = attrs.evolve(job, state=JobState.SUCCEEDED, finished_at=now)
                self._retained[job.id] = now + s.retain_for
            elif kind in (SettleKind.SUCCEEDED, SettleKind.DISCARD):
                self._drop(job.id)
            elif kind is SettleKind.RETRY:
                self._jobs[job.id] = attrs.evolve(
                    job, state=JobState.RETRY_WAIT, run_at=later, last_error=s.error,
                    unclaimed_since=None,
                )  # fmt: skip
            elif kind is SettleKind.DEFER:
                self._jobs[job.id] = attrs.evolve(
                    job, state=JobState.RETRY_WAIT, run_at=later, last_error=s.error,
                    attempts=given_back, unclaimed_since=None,
                )  # fmt: skip
            elif kind is SettleKind.RELEASE:
                self._jobs[job.id] = attrs.evolve(job, state=JobState.READY, attempts=given_back)
            else:  # DEAD, ABORTED
                state = JobState.DEAD if kind is SettleKind.DEAD else JobState.ABORTED
                if state is JobState.ABORTED:
                    aborted.add(index)
                error = s.error or ("aborted" if state is JobState.ABORTED else "")
                self._jobs[job.id] = attrs.evolve(
                    job, state=state, finished_at=now, last_error=error or job.last_error
                )
        if any(applied):
            self._wake_all()
        return SettleResult(
            tuple(applied), NOTHING_SET_ASIDE, frozenset(aborted), frozenset(unclaimed_dead)
        )

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        now = self._now()
        requeued: list[str] = []
        dead: list[Job] = []
        for queue in queues:
            expired = sorted(
                (j for j in self._jobs.values() if j.queue == queue and j.state is JobState.LEASED
                 and (j.lease_expires_at or 0.0) <= now),
                key=lambda j: j.lease_expires_at or 0.0,
            )  # fmt: skip
            for job in expired[: max(0, limit - len(requeued) - len(dead))]:
                job = attrs.evolve(
                    job, lease_token="", lease_owner="", lease_expires_at=None,
                    unclaimed_since=None,
                )  # fmt: skip
                if job.attempts > job.max_retries:
                    job = attrs.evolve(
                        job, state=JobState.DEAD, finished_at=now,
                        last_error=f"lease expired on attempt {job.attempts} of "
                        f"{job.max_retries + 1} (worker lost); retries exhausted",
                    )  # fmt: skip
                    dead.append(job)
                else:
                    job = attrs.evolve(job, state=JobState.READY, run_at=now)
                    requeued.append(job.id)
                self._jobs[job.id] = job
        if requeued:
            self._wake_all()
        return RecoverResult(requeued=tuple(requeued), dead=tuple(dead))

    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0, got {timeout!r}")
        now = self._now()
        if not held and any(next(self._due(q, now), None) for q in queues):
            return
        # No promoter: the next due time of a waiting job is a wake-up too.
        wait = timeout
        for job in self._jobs.values():
            if job.queue in queues and job.state in WAITING and job.run_at > now:
                wait = min(wait, job.run_at - now)
        with trio.move_on_after(wait):
            await self._wake.wait()

    def _drop(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._order.pop(job_id, None)
        self._retained.pop(job_id, None)


__all__ = ["MinimalStore"]
