"""The differential test: one seeded sequence of store operations run
against a reference store (the MemoryStore, the contract's typed model) and
a candidate store, comparing what every call answers and what the admin
API then shows.

::

    clock = FrozenClock()                     # testing.faketime
    reference = MemoryStore(clock=clock.now, default_partitions=8)
    candidate = RedisStore.from_url(url_of_a_server_reading(clock), default_partitions=8)
    report = await run_differential(reference, candidate, clock, seed=7, steps=300)

Both stores must read one clock that only :meth:`Clock.advance` moves (a
:class:`~chronos_trio.testing.faketime.FrozenClock`: a MemoryStore takes
its ``now`` as ``clock``, servers read it through libfaketime), and start
empty, with the same default partition count (partitions are compared:
``enqueue_many`` routes "by job-ID hash").

Each step moves the clock one :data:`TICK` (a :class:`Jump` moves it
further), applies the operation to the reference, then to the candidate,
and compares the two normalised results (``_differential_results``); every
``snapshot_every`` steps it also compares ``stats`` and ``list_jobs`` of
every state of every queue. The first difference raises :class:`Divergence`
naming the seed, the step, the operation, both answers and the steps that
led there.

Where an operation takes a prefix of an order that has ties (jobs with the
same due time, lease expiry or finish time: e.g. leases recovered by one
call, which all become ready "now"), the contract leaves open which of the
tied jobs come first, so the runner widens the operation, from what the
reference's admin API shows, to take every tied job (``widened`` in the
report); and before a lease where tied ready jobs share a flow-control key
(only one of them may start), it aborts all but the lowest job ID of them
on both stores (``tie_aborts``). Only the public store contract is used,
so any backend can be the candidate.

A candidate without :class:`~chronos_trio.store.PromotionRole` judges due
times in its claim (a due scheduled or retry_wait job is leased, and
listed, as ready). Against such a candidate the runner keeps the reference
promoted: at every step, once the clock moved and again after the
operation, it promotes every due job of the reference (``promoted`` in the
report), and a ``Promote`` operation
goes to the reference alone (its answer is not compared). Against a
candidate with promotion nothing changes.
"""

from __future__ import annotations

import pprint
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import attrs

from ..records._control import JobControl, ready_score
from ..records._jobs import Job, JobState, LeaseRef, NewJob
from ..records._unique import Unique
from ..records._workflow import Arrival
from ..store._roles import PromotionRole, QueueWeight, Store
from . import _differential_results as normal
from ._differential_ops import (
    QUEUES,
    TICK,
    Abort,
    Continue,
    Delete,
    Enqueue,
    GroupArrive,
    JobSpec,
    Jump,
    Lease,
    LeasePick,
    Mix,
    Operation,
    Promote,
    Recover,
    Renew,
    RequeueDead,
    RunNow,
    Settle,
    describe,
    generate,
)

__all__ = [
    "TICK",
    "Clock",
    "Divergence",
    "Mix",
    "Report",
    "generate",
    "run_differential",
    "run_operations",
]

#: Steps of context a divergence report lists before the one that differed.
_CONTEXT = 12
#: A page large enough to list every job of a sequence.
_PAGE = 100_000


class Clock(Protocol):
    """The clock both stores read; only the runner moves it."""

    def advance(self, seconds: float) -> None: ...


class Divergence(AssertionError):
    """The stores answered one step differently (or their admin views
    differ after it). ``str()`` says where, how to replay it, and both answers."""

    def __init__(
        self,
        *,
        seed: int | str,
        step: int,
        op: str,
        what: str,
        reference: object,
        candidate: object,
        context: Sequence[str],
    ) -> None:
        self.seed, self.step, self.op, self.what = seed, step, op, what
        self.reference, self.candidate = reference, candidate
        lines = [
            f"stores diverge: seed={seed} (CHRONOS_DIFF_SEED={seed}) step={step}: {what}",
            f"operation: {op}",
            "steps before it:",
            *(f"  {c}" for c in context),
            *_difference(reference, candidate),
        ]
        super().__init__("\n".join(lines))


def _difference(reference: object, candidate: object) -> list[str]:
    """Both answers, the differing items first when both are tuples of items."""
    out = []
    if isinstance(reference, tuple) and isinstance(candidate, tuple):
        ref_items, cand_items = set(map(repr, reference)), set(map(repr, candidate))
        out += ["only the reference has:", *(f"  {i}" for i in sorted(ref_items - cand_items))]
        out += ["only the candidate has:", *(f"  {i}" for i in sorted(cand_items - ref_items))]
    out += ["reference answered:", pprint.pformat(reference, width=110)]
    out += ["candidate answered:", pprint.pformat(candidate, width=110)]
    return out


@attrs.define
class Report:
    """What one run did: per operation type how many steps, how many
    operations were widened over ties, and the wall time."""

    seed: int | str
    steps: int = 0
    ops: Counter[str] = attrs.field(factory=Counter)
    widened: int = 0
    tie_aborts: int = 0
    #: Jobs the runner promoted on the reference for a candidate without promotion.
    promoted: int = 0
    snapshots: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.ops.items()))
        return (
            f"seed={self.seed}: {self.steps} steps in {self.seconds:.1f}s, "
            f"{self.snapshots} snapshots, {self.widened} widened, "
            f"{self.tie_aborts} tie aborts, {self.promoted} promoted ({kinds})"
        )


class _Side:
    """One store and the leases it issued (job ID -> refs, oldest first)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.leases: dict[str, list[LeaseRef]] = {}

    def ref(self, pick: LeasePick) -> LeaseRef:
        refs = self.leases.get(pick.job_id, [])
        if pick.current and refs:
            return refs[-1]
        if not pick.current and len(refs) >= 2:
            return refs[-2]
        if refs:  # stale, and only one issued: the same lease with a token never issued
            return attrs.evolve(refs[-1], token=refs[-1].token + "-stale")
        queue = pick.job_id.partition("-")[0]
        return LeaseRef(pick.job_id, queue if queue in QUEUES else QUEUES[0], "never-issued")

    async def apply(self, op: Operation, now: float) -> normal.Normal:
        try:
            return await self._apply(op, now)
        except Exception as exc:  # a store's refusal is an answer to compare
            return normal.raised(exc)

    async def _apply(self, op: Operation, now: float) -> normal.Normal:
        store = self.store
        if isinstance(op, Enqueue):
            return normal.enqueued(await store.enqueue_many([_new_job(s, now) for s in op.jobs]))
        if isinstance(op, Lease):
            batch = await store.lease(
                [QueueWeight(q, w) for q, w in op.queues],
                op.count,
                worker_id=op.worker,
                lease_duration=op.duration,
                strict=op.strict,
            )
            for ref in normal.leases_of(batch):
                self.leases.setdefault(ref.job_id, []).append(ref)
            return normal.leased(batch)
        if isinstance(op, Renew):
            return normal.renewed(await store.renew([self.ref(p) for p in op.picks], op.duration))
        if isinstance(op, Settle):
            settlements = [attrs.evolve(i.outcome, lease=self.ref(i.pick)) for i in op.items]
            return normal.settled(await store.settle(settlements))
        if isinstance(op, Recover):
            return normal.recovered(await store.recover_expired(list(op.queues), op.limit))
        if isinstance(op, Promote):
            return normal.promoted(await store.promote_due(list(op.queues), op.limit))
        if isinstance(op, Abort):
            return normal.aborted(await store.abort(op.job_id, queue=op.queue, reason=op.reason))
        if isinstance(op, RunNow):
            return await store.run_now(op.job_id, queue=op.queue)
        if isinstance(op, Delete):
            return await store.delete_job(op.job_id, queue=op.queue)
        if isinstance(op, RequeueDead):
            return normal.counted(await store.requeue_dead(op.queue, limit=op.limit))
        if isinstance(op, GroupArrive):
            arrivals = [Arrival(g, i, size, result, None) for g, i, size, result in op.arrivals]
            return normal.arrived(await store.group_arrive(arrivals, op.ttl))
        if isinstance(op, Continue):
            entries = await store.continuations(list(op.queues), _PAGE)
            if op.finish:
                await store.finish_continuations(
                    [c for c in entries if zlib.crc32(c.job_id.encode()) % 2 == 0]
                )
            return normal.continuations(entries)
        assert isinstance(op, Jump)
        return None

    async def snapshot(self) -> normal.Normal:
        """Every job of every queue as the admin API shows it, and the stats."""
        store = self.store
        views: list[normal.Normal] = [normal.stats(await store.stats(list(QUEUES)))]
        for queue in QUEUES:
            for state in JobState:
                jobs = await store.list_jobs(queue, state, limit=_PAGE)
                views.append((queue, state.value, normal.listed(state, jobs)))
        return tuple(views)


def _new_job(spec: JobSpec, now: float) -> NewJob:
    """The NewJob a spec stands for, at store time ``now``."""
    control: JobControl | None = None
    if spec.priority or spec.expires_in is not None or spec.rate or spec.cap:
        control = JobControl(
            priority=spec.priority,
            expires_in=spec.expires_in,
            rates=(spec.rate,) if spec.rate else (),
            caps=(spec.cap,) if spec.cap else (),
        )
    unique = None
    if spec.unique is not None:
        key, mode, ttl = spec.unique
        unique = Unique(key=key, ttl=ttl, mode=mode)  # type: ignore[arg-type]
    return NewJob(
        id=spec.id,
        queue=spec.queue,
        kind=spec.kind,
        payload=spec.payload,
        run_at=None if spec.run_at_offset is None else now + spec.run_at_offset,
        delay=spec.delay,
        max_retries=spec.max_retries,
        unique=unique,
        then=spec.then,
        control=control,
    )


# -- ties: widen an operation so the contract fixes its outcome ---------------------------
def _has_tie(keys: Sequence[tuple[float, ...]]) -> bool:
    return len(set(keys)) < len(keys)


def _lease_order(job: Job) -> tuple[float]:
    """Where a ready job stands in lease order (priority and due time are
    one number: ``list_jobs``), ties left open."""
    return (ready_score(job.run_at, job.priority),)


def _limit_keys(job: Job) -> set[str]:
    """The flow-control keys a job's start takes (its unique key's run slot too)."""
    control = job.control
    if control is None:
        return set()
    return {key for key, _ in control.caps} | {key for key, *_ in control.rates}


async def _listed(store: Store, queues: Sequence[str], state: JobState) -> dict[str, list[Job]]:
    return {q: await store.list_jobs(q, state, limit=_PAGE) for q in queues}


async def _widen(op: Operation, reference: Store, report: Report) -> Operation:
    """``op``, widened where ties would leave its outcome open (see the
    module docstring); ``op`` itself when nothing ties."""
    now = await reference.now()
    if isinstance(op, Lease):
        ready = await _listed(reference, [q for q, _ in op.queues], JobState.READY)
        if any(_has_tie([_lease_order(j) for j in jobs]) for jobs in ready.values()):
            report.widened += 1
            return attrs.evolve(op, count=max(1, sum(len(jobs) for jobs in ready.values())))
    elif isinstance(op, Recover):
        leased = await _listed(reference, op.queues, JobState.LEASED)
        expired = [
            [j for j in jobs if (j.lease_expires_at or 0.0) <= now] for jobs in leased.values()
        ]
        total = sum(map(len, expired))
        ties = any(_has_tie([(j.lease_expires_at or 0.0,) for j in e]) for e in expired)
        if ties and total > op.limit:
            report.widened += 1
            return attrs.evolve(op, limit=total)
    elif isinstance(op, Promote):
        due: list[list[Job]] = []
        for state in (JobState.SCHEDULED, JobState.RETRY_WAIT):
            for jobs in (await _listed(reference, op.queues, state)).values():
                due.append([j for j in jobs if j.run_at <= now])
        total = sum(map(len, due))
        if total > op.limit and _has_tie([(j.run_at,) for d in due for j in d]):
            report.widened += 1
            return attrs.evolve(op, limit=total)
    elif isinstance(op, RequeueDead) and op.limit is not None:
        dead = await reference.list_jobs(op.queue, JobState.DEAD, limit=_PAGE)
        if len(dead) > op.limit and _has_tie([(j.finished_at or 0.0,) for j in dead]):
            report.widened += 1
            return attrs.evolve(op, limit=None)
    return op


async def _tie_aborts(op: Lease, reference: Store) -> list[Abort]:
    """Aborts that leave at most one of each group of tied ready jobs that
    share a flow-control key (which of them a limit admits is open)."""
    aborts: list[Abort] = []
    ready = await _listed(reference, [q for q, _ in op.queues], JobState.READY)
    for queue, jobs in ready.items():
        groups: dict[tuple[float], list[Job]] = {}
        for j in jobs:
            groups.setdefault(_lease_order(j), []).append(j)
        for group in groups.values():
            kept: list[Job] = []
            for j in sorted(group, key=lambda j: j.id):
                if any(_limit_keys(j) & _limit_keys(k) for k in kept):
                    aborts.append(Abort(j.id, queue, "tie"))
                else:
                    kept.append(j)
    return aborts


# -- the runner --------------------------------------------------------------------------
async def run_operations(
    reference: Store,
    candidate: Store,
    clock: Clock,
    ops: Sequence[Operation],
    *,
    seed: int | str,
    snapshot_every: int = 1,
) -> Report:
    """Run ``ops`` on both stores, comparing as the module docstring says.
    Raises :class:`Divergence` at the first difference; returns the report."""
    report = Report(seed)
    started = time.monotonic()
    ref, cand = _Side(reference), _Side(candidate)
    done: list[str] = []
    #: The candidate judges due times in its claim: keep the reference promoted.
    self_promoting = not isinstance(candidate, PromotionRole)

    async def compare_step(step: int, op: Operation) -> None:
        now = await reference.now()
        expected = await ref.apply(op, now)
        if self_promoting and isinstance(op, Promote):
            return  # the reference alone: the candidate has nothing to promote
        got = await cand.apply(op, now)
        if expected != got:
            raise Divergence(
                seed=seed,
                step=step,
                op=describe(op),
                what="the call answered differently",
                reference=expected,
                candidate=got,
                context=done[-_CONTEXT:],
            )

    for step, op in enumerate(ops):
        clock.advance(TICK)
        if isinstance(op, Jump):
            clock.advance(op.seconds)
        if self_promoting:
            report.promoted += await _promote_all(reference)
        if not isinstance(op, Jump):
            if isinstance(op, Lease):
                for abort in await _tie_aborts(op, reference):
                    report.tie_aborts += 1
                    await compare_step(step, abort)
                    done.append(f"{step}: (tie) {describe(abort)}")
            op = await _widen(op, reference, report)
            await compare_step(step, op)
        if self_promoting:  # what the step made due (a retry due now) is ready there
            report.promoted += await _promote_all(reference)
        done.append(f"{step}: {describe(op)}")
        report.ops[type(op).__name__] += 1
        report.steps += 1
        if snapshot_every and (step % snapshot_every == 0 or step == len(ops) - 1):
            report.snapshots += 1
            expected, got = await ref.snapshot(), await cand.snapshot()
            if expected != got:
                raise Divergence(
                    seed=seed,
                    step=step,
                    op=describe(op),
                    what="the admin views (stats, list_jobs) differ after it",
                    reference=expected,
                    candidate=got,
                    context=done[-_CONTEXT - 1 : -1],
                )
    report.seconds = time.monotonic() - started
    return report


async def _promote_all(store: Store) -> int:
    """Promote every due job of ``store``'s queues; how many moved."""
    moved = 0
    while True:
        promoted = (await store.promote_due(list(QUEUES), _PAGE)).promoted
        moved += promoted
        if promoted < _PAGE:
            return moved


async def run_differential(
    reference: Store,
    candidate: Store,
    clock: Clock,
    *,
    seed: int | str,
    steps: int,
    mix: Mix | None = None,
    snapshot_every: int = 1,
) -> Report:
    """Generate ``steps`` operations from ``seed`` (:func:`generate`) and
    :func:`run_operations` them. Raises :class:`Divergence`."""
    ops = generate(seed, steps, mix)
    return await run_operations(
        reference, candidate, clock, ops, seed=seed, snapshot_every=snapshot_every
    )
