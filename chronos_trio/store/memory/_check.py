"""The store checker on the MemoryStore: its records and its three heaps.

The MemoryStore indexes waiting jobs in per-queue heaps with lazy deletion:
``due`` (scheduled and retry_wait), ``ready`` and ``leased``; an entry counts
only while its record still has the entry's version, so a stale entry is
normal and an entry without a record cannot be a problem (NO_RECORD is
never reported; nor is QUARANTINED: nothing is quarantined). Succeeded and
dead jobs are in no heap. A record is DAMAGED when the store's judgement
seam (``MemoryStore._damage``) names something in it: never on the typed
store itself, whose transitions write every record; on the test support's
``DamageableMemoryStore``, what a test damaged. The check runs in one
synchronous step (no checkpoint inside), so it is atomic with respect to
every other task of the process: no job can move while it is judged or
repaired. ``batch`` is accepted for the role's signature and checked
(:func:`._checking.asked_queues`); one step over an in-process store blocks
nothing else. A repair still applies only to the record judged, unchanged
since (:func:`repair_all`), as on Redis: the guard that keeps a repair from
acting on a job a worker moved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ...records._jobs import Job, JobState
from .._roles import (
    CheckReport,
    Finding,
    Problem,
    QueueVersion,
    Repair,
    finding_order,
)


class _Record(Protocol):
    @property
    def job(self) -> Job: ...
    @property
    def version(self) -> int: ...
    @property
    def home(self) -> str: ...
    @property
    def abort(self) -> str: ...


class MemoryStore(Protocol):
    """What the checker reads of a MemoryStore's internals (it is the store's
    own checker, kept in a module of its own; a protocol, not an import, as
    the store imports this module)."""

    @property
    def _records(self) -> Mapping[str, _Record]: ...
    @property
    def _due(self) -> Mapping[str, list[tuple[float, int, str, int]]]: ...
    @property
    def _ready(self) -> Mapping[str, list[tuple[float, int, str, int]]]: ...
    @property
    def _leased(self) -> Mapping[str, list[tuple[float, int, str, int]]]: ...
    @property
    def _known_queues(self) -> set[str]: ...
    @property
    def _topology(self) -> Mapping[str, list[QueueVersion]]: ...
    @property
    def _default_partitions(self) -> int: ...
    @property
    def _clock(self) -> Callable[[], float]: ...
    def _put(self, job: Job) -> None: ...
    def _release_unique(self, job_id: str) -> None: ...
    def _damage(self, job_id: str, rec: Any, index: None) -> str: ...
    def _shown(self, job_id: str, rec: Any) -> Job: ...
    def _dead_letter_damaged(self, job_id: str, rec: Any, reason: str) -> Job: ...


#: The heap each state's jobs belong in (None: no heap).
HEAP_OF = {
    JobState.SCHEDULED: "due",
    JobState.RETRY_WAIT: "due",
    JobState.READY: "ready",
    JobState.LEASED: "leased",
    JobState.SUCCEEDED: None,
    JobState.DEAD: None,
    JobState.ABORTED: None,
}


def check(
    store: MemoryStore, names: Sequence[str] | None, *, repair: bool, lease_grace: float
) -> CheckReport:
    """See :meth:`~chronos_trio.store.CheckRole.check`, for the queues
    ``names`` (None: every queue the store knows); one synchronous step."""
    if names is None:
        names = sorted(store._known_queues | set(store._topology))
    now = store._clock()
    inspection = inspect(store, names, now, lease_grace)
    judged = inspection.judged
    findings = repair_all(store, judged, now) if repair else [j.finding for j in judged]
    return CheckReport(
        queues=tuple(names),
        repair=repair,
        lease_grace=lease_grace,
        now=now,
        findings=tuple(sorted(findings, key=finding_order)),
        partitions=sum(_partitions(store, q) for q in names),
        records=inspection.records,
        index_entries=inspection.index_entries,
    )


@attrs.frozen
class Inspection:
    """What judging the records of some queues found (see :func:`inspect`)."""

    judged: tuple[Judged, ...]
    records: int
    index_entries: int


def inspect(store: MemoryStore, names: Sequence[str], now: float, grace: float) -> Inspection:
    """Judge every record of the queues ``names`` and its heap entries at
    ``now``; changes nothing."""
    wanted = set(names)
    held: dict[str, list[str]] = {}
    entries = 0
    heaps_by_name = (("due", store._due), ("ready", store._ready), ("leased", store._leased))
    for heap_name, heaps in heaps_by_name:
        for queue, heap in heaps.items():
            for _score, _seq, job_id, version in heap:
                rec = store._records.get(job_id)
                if rec is None or rec.version != version or rec.home not in wanted:
                    continue  # a stale entry (lazy deletion), or another queue's job
                entries += 1
                place = heap_name if queue == rec.home else f"{heap_name} of queue {queue!r}"
                held.setdefault(job_id, []).append(place)
    judged: list[Judged] = []
    records = 0
    for job_id, rec in list(store._records.items()):
        if rec.home not in wanted:
            continue
        records += 1
        found = _judge(store, job_id, rec, tuple(held.get(job_id, ())), now, grace)
        if found is not None:
            judged.append(Judged(rec, rec.version, rec.job, found))
    return Inspection(tuple(judged), records, entries)


@attrs.frozen
class Judged:
    """A finding and the record it was made on, as it was then (its
    version, and the job it held: a record replaced in place is another)."""

    rec: _Record
    version: int
    job: Job
    finding: Finding


_SKIPPED = "the job changed since it was inspected: left alone (check again)"


def repair_all(store: MemoryStore, judged: Sequence[Judged], now: float) -> list[Finding]:
    """Repair each finding whose record is still the one judged, at the
    version judged; leave any other alone (SKIPPED), as the RedisStore's
    check_repair.lua does. Within one check nothing can move a record
    between its judging and its repair (the check is one step), so this
    guard holds the repair to what was judged should the check ever be
    split into steps."""
    out = []
    for j in judged:
        job_id = j.finding.job_id
        rec = j.rec
        if (
            store._records.get(job_id) is not rec
            or rec.version != j.version
            or rec.job is not j.job
        ):
            out.append(attrs.evolve(j.finding, repair=Repair.SKIPPED, repair_detail=_SKIPPED))
        else:
            out.append(_repair(store, job_id, rec, j.finding, now))
    return out


def _partitions(store: MemoryStore, queue: str) -> int:
    """How many partitions ``queue`` has (0 when unknown), without registering it."""
    versions = store._topology.get(queue)
    if versions is not None:
        return sum(v.partitions for v in versions)
    return store._default_partitions if queue in store._known_queues else 0


def _judge(
    store: MemoryStore, job_id: str, rec: _Record, held: tuple[str, ...], now: float, grace: float
) -> Finding | None:
    """What is wrong with record ``rec`` (in the heaps ``held``), or None."""
    damage = store._damage(job_id, rec, None)
    job = store._shown(job_id, rec) if damage else rec.job
    finding = Finding(
        problem=Problem.DAMAGED,
        job_id=job_id,
        queue=rec.home,
        placement=job.placement,
        detail=damage,
        state=job.state.value,
        indexes=held,
    )
    if damage:
        return finding
    expected = HEAP_OF[job.state]
    if held != ((expected,) if expected else ()):
        if not held:
            detail = f"{job.state} record in no index"
            return attrs.evolve(finding, problem=Problem.NO_INDEX, detail=detail)
        if len(held) > 1:
            detail = f"{job.state} record in {' and '.join(held)}"
            return attrs.evolve(finding, problem=Problem.TWO_INDEXES, detail=detail)
        detail = f"{job.state} record in the {held[0]} index"
        return attrs.evolve(finding, problem=Problem.WRONG_INDEX, detail=detail)
    if job.state is JobState.LEASED and job.lease_expires_at is not None:
        late = now - job.lease_expires_at
        if late >= grace:
            owner = job.lease_owner or "a worker"
            detail = f"lease of {owner} expired {late:.0f}s ago and was not recovered"
            return attrs.evolve(finding, problem=Problem.EXPIRED_LEASE, detail=detail)
    return None


def _repair(store: MemoryStore, job_id: str, rec: _Record, finding: Finding, now: float) -> Finding:
    """Repair one finding (its record unchanged since it was judged: see
    :func:`repair_all`)."""
    job = rec.job
    if finding.problem is Problem.DAMAGED:
        dead = store._dead_letter_damaged(job_id, rec, finding.detail)
        return attrs.evolve(finding, repair=Repair.DEAD_LETTERED, repair_detail=dead.last_error)
    cleared = attrs.evolve(job, lease_token="", lease_owner="", lease_expires_at=None)
    if finding.problem is Problem.EXPIRED_LEASE:
        if rec.abort:
            # an abort had been asked for it: taken back as aborted, as recovery does
            store._put(
                attrs.evolve(cleared, state=JobState.ABORTED, last_error=rec.abort, finished_at=now)
            )
            store._release_unique(job_id)
            detail = f"aborted (an abort was asked): {rec.abort}"
            return attrs.evolve(finding, repair=Repair.RECOVERED, repair_detail=detail)
        if job.attempts > job.max_retries:
            reason = (
                f"lease expired on attempt {job.attempts} of {job.max_retries + 1} "
                "(worker lost); retries exhausted"
            )
            store._put(
                attrs.evolve(cleared, state=JobState.DEAD, last_error=reason, finished_at=now)
            )
            store._release_unique(job_id)
            return attrs.evolve(finding, repair=Repair.DEAD_LETTERED, repair_detail=reason)
        store._put(attrs.evolve(cleared, state=JobState.READY, run_at=now))
        return attrs.evolve(finding, repair=Repair.RECOVERED, repair_detail="ready again (due now)")
    # an index problem: a new version of the record makes every old entry
    # stale, and _put indexes it where its state says
    store._put(job)
    where = HEAP_OF[job.state]
    detail = f"put in the {where} index" if where else "taken out of every index"
    return attrs.evolve(finding, repair=Repair.REINDEXED, repair_detail=detail)
