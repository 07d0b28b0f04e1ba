"""Fuzz test of the stores with one damaged record (issue 11).

For each job state and each record field (missing, empty, of the wrong type,
huge; and the record deleted, a key of another type, a newer record format),
one job ``d`` is driven into the state and damaged among healthy jobs of its
queue (and one of another queue), every store operation is run, then a real
worker until the healthy jobs are done. Then:

* every healthy job ran exactly once and ended as it would have (succeeded,
  on its first attempt, its record sound);
* ``d`` ended dead-lettered with a reason naming the damaged field (and was
  reported: in what an operation set aside, or published to the dead-letter
  hooks), or quarantined, or (a newer format) exactly as it was, or, where the
  damage was nothing any operation needed, as a healthy job would have;
* the store checker finds no problem but the damaged job's own damage, and
  the stats count exactly the healthy jobs plus ``d``; the checker's repair
  then leaves no problem, nor does deleting ``d``;
* no store call raised, no actor of the worker was restarted, no lease lost.

Cases: the full cross product on the MemoryStore (virtual time); on Redis
(one partition, eight partitions, and a Cluster with four partitions) a few
fixed cases plus a sample drawn from the cross product with a seeded
generator (each case on a fresh namespace of the shared session server). The
suite runs a short sample; ``CHRONOS_FUZZ=1`` runs 40 per Redis backend
(``CHRONOS_FUZZ_SEED`` replaces the seed; the seed is printed, ``pytest -s``).
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import chronos_trio
from chronos_trio import App, JobContext, JobState, LeaseRef, MemoryStore, NewJob
from chronos_trio.store import (
    DAMAGED_RECORD,
    NOTHING_SET_ASIDE,
    CheckReport,
    CountResult,
    Finding,
    LeaseResult,
    Problem,
    PromoteResult,
    QueueWeight,
    RecoverResult,
    RenewResult,
    SetAside,
    SettleKind,
    Settlement,
    SettleResult,
    Store,
)
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.testing.damage import (
    RECORD,
    Damage,
    Damaged,
    RedisClient,
    damage_job,
    fields_of,
    kinds_of,
    redis_client,
)
from chronos_trio.testing.damageable import DamageableMemoryStore, record_damage
from tests._backends import REDIS_TIMING

pytestmark = pytest.mark.fuzz

FULL = os.environ.get("CHRONOS_FUZZ") == "1"
SEED = int(os.environ.get("CHRONOS_FUZZ_SEED", "20261111"))
#: Cases drawn per Redis backend (besides the fixed ones); CHRONOS_FUZZ_CASES
#: replaces the count ("all": the whole cross product).
_DRAWN = os.environ.get("CHRONOS_FUZZ_CASES", "40" if FULL else "8")

STATES = ("scheduled", "ready", "leased", "expired", "retry_wait", "succeeded", "dead")
QUEUES = ("q", "q2")
HEALTHY = tuple(f"h{i}" for i in range(6))
OTHER = "g0"  # the healthy job of the other queue
LATE = "h-late"  # the healthy job enqueued in the same batch as a copy of d
D = "d"

#: How long the short waits of a case are: virtual seconds on memory, real on Redis.
MEMORY_TIMING: dict[str, Any] = {"poll_interval": 0.5, "lease_duration": 5.0}


@attrs.frozen
class Case:
    backend: str
    state: str
    field: str
    how: Damage

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.state}-{self.field}-{self.how}"


@attrs.frozen
class Backend:
    """What a case runs on: its store, a raw client (Redis), its timing."""

    name: str
    store: Store
    client: RedisClient | None
    short: float  # a due time or lease that passes within the case
    held: float  # a lease the test holds while the operations run
    timing: dict[str, Any]
    bound: float


def _cross(backend: str, store_kind: type) -> list[Case]:
    return [
        Case(backend, state, field, how)
        for state in STATES
        for field in fields_of(store_kind)
        for how in kinds_of(store_kind, field)
    ]


#: Every backend gets these on Redis, whatever is drawn.
FIXED = (
    ("ready", "attempts", Damage.WRONG_TYPE),
    ("expired", RECORD, Damage.DELETED),
    ("scheduled", "payload", Damage.MISSING),
    ("leased", "lease_expires_at", Damage.HUGE),
    ("ready", "v", Damage.NEWER),
    ("dead", "state", Damage.EMPTY),
    ("succeeded", RECORD, Damage.NOT_A_HASH),
)


def _redis_cases(backend: str) -> list[Case]:
    rng = random.Random(f"{SEED}-{backend}")
    fixed = [Case(backend, *f) for f in FIXED]
    rest = [c for c in _cross(backend, RedisStore) if c not in fixed]
    return fixed + (rest if _DRAWN == "all" else rng.sample(rest, min(int(_DRAWN), len(rest))))


def _params() -> list[Any]:
    out: list[Any] = [pytest.param(c, id=c.id) for c in _cross("memory", MemoryStore)]
    marks = {
        "redis": [pytest.mark.redis],
        "redis8": [pytest.mark.redis],
        "cluster": [pytest.mark.redis, pytest.mark.cluster],
    }
    for backend, backend_marks in marks.items():
        out += [pytest.param(c, id=c.id, marks=backend_marks) for c in _redis_cases(backend)]
    return out


@pytest.fixture
def fuzz_clock(case: Case) -> trio.abc.Clock | None:
    """The clock the case runs under (pytest-trio takes it from the test's
    arguments): virtual on memory, the real one on Redis."""
    return trio.testing.MockClock(autojump_threshold=0) if case.backend == "memory" else None


@pytest.fixture
async def fuzz_backend(request: pytest.FixtureRequest, case: Case) -> AsyncIterator[Backend]:
    if case.backend == "memory":
        yield Backend("memory", DamageableMemoryStore(), None, 10.0, 600.0, MEMORY_TIMING, 3600.0)
        return
    url = request.getfixturevalue("redis_cluster_url" if case.backend == "cluster" else "redis_url")
    partitions = {"redis": 1, "redis8": 8, "cluster": 4}[case.backend]
    namespace = f"fz{next(_namespaces)}"
    store = RedisStore.from_url(url, namespace=namespace, default_partitions=partitions)
    client = redis_client(url)
    print(f"\nfuzz seed={SEED} (CHRONOS_FUZZ_SEED) case={case.id}")
    try:
        yield Backend(case.backend, store, client, 0.15, 1.0, REDIS_TIMING, 30.0)
    finally:
        await store.aclose()
        client.close()


_namespaces = itertools.count()


def _payload(job_id: str) -> bytes:
    """Over 64 bytes: on Redis every case's records hold their payload in
    chunks (record format 2), so each damage meets a chunked record."""
    return f"{job_id}:".encode() * 30


def _job(job_id: str, queue: str = "q", **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="work", payload=_payload(job_id), **kw)


class Run:
    """One case's store calls: every result's set-aside report is kept, and
    which operation first dead-lettered or quarantined ``d``."""

    def __init__(self, b: Backend, case: Case) -> None:
        self.b, self.case, self.store = b, case, b.store
        self.aside: list[SetAside] = []
        #: The operation that first set d aside, and d as it left it.
        self.met_by = ""
        self.first: chronos_trio.Job | None = None
        self.quarantined = False
        self.recreated = False

    async def call(
        self, name: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> Any:
        result = await fn(*args, **kw)
        # enqueue and run_now report nothing set aside: their results say so
        self.aside.append(result.aside if isinstance(result, _REPORTS) else NOTHING_SET_ASIDE)
        if not self.met_by:
            job = await self.store.get_job(D, queue="q")
            if D in self.reported_quarantined():
                self.met_by, self.quarantined = name, True
            elif job is not None and job.last_error.startswith(DAMAGED_RECORD):
                self.met_by, self.first = name, job
        return result

    def reported_dead(self) -> set[str]:
        return {j.id for a in self.aside for j in a.dead}

    def reported_quarantined(self) -> set[str]:
        return {e.job_id for a in self.aside for e in a.quarantined}

    def reported_newer(self) -> set[str]:
        return {e.job_id for a in self.aside for e in a.newer}


#: The results that report what their operation set aside.
_REPORTS = (LeaseResult, RenewResult, SettleResult, CountResult, PromoteResult, RecoverResult)


async def _lease(
    store: Store, count: int, duration: float, queues: tuple[str, ...] = QUEUES
) -> LeaseResult:
    return await store.lease(
        [QueueWeight(q) for q in queues], count, worker_id="fuzz", lease_duration=duration
    )


async def _drive(b: Backend, state: str) -> LeaseRef | None:
    """Enqueue ``d`` alone and bring it into ``state``; its lease when leased."""
    store = b.store
    delay = b.short if state == "scheduled" else 0.0
    await store.enqueue_many([_job(D, delay=delay)])
    if state in ("scheduled", "ready"):
        return None
    [leased] = (await _lease(store, 1, b.short if state == "expired" else b.held, ("q",))).jobs
    if state in ("leased", "expired"):
        ref: LeaseRef = leased.ref
        return ref
    kind = {"retry_wait": SettleKind.RETRY, "succeeded": SettleKind.SUCCEEDED}.get(
        state, SettleKind.DEAD
    )
    settled = await store.settle(
        [Settlement(leased.ref, kind, error="boom", retry_delay=b.short, retain_for=b.short)]
    )
    assert settled.settled == (True,)
    return None


async def _snapshot(b: Backend, damaged: Damaged) -> Any:
    """``d``'s record and index entries as stored (Redis; None on memory)."""
    if b.client is None:
        return None
    tag = damaged.key.rpartition(":j:")[0]  # the partition's keys share it (see keys.py)
    zsets = [f"{tag}:{z}" for z in ("scheduled", "ready", "leased", "retry", "succeeded", "dead")]
    client = b.client

    def read() -> Any:
        return client.dump(damaged.key), [client.zscore(z, D) for z in zsets]

    return await trio.to_thread.run_sync(read)


async def _quarantined(b: Backend) -> bool:
    """True when ``d`` is in its partition's quarantine hash (Redis)."""
    if b.client is None:
        return False
    store = b.store
    assert isinstance(store, RedisStore)
    versions = (await store.topology("q")).versions
    client = b.client
    ks = KeySpace(store.namespace)

    def look() -> bool:
        return any(
            client.hexists(ks.partition("q", v.version, p).damaged, D)
            for v in versions
            for p in range(v.partitions)
        )

    return await trio.to_thread.run_sync(look)


async def _operations(run: Run, d_ref: LeaseRef | None) -> None:
    """Every store operation, the one that meets ``d`` in its state first."""
    store, b, state = run.store, run.b, run.case.state
    # reads first: they must show d, never raise
    await store.get_job(D)
    await store.get_job(D, queue="q")
    for s in JobState:
        await store.list_jobs("q", s)
    await store.stats()
    await store.stats(list(QUEUES))
    await store.check()
    if state in ("scheduled", "retry_wait", "succeeded", "expired"):
        await trio.sleep(b.short * 1.5)  # d is due, its retention or its lease is over

    async def promote() -> None:
        await run.call("promote", store.promote_due, list(QUEUES), 100)

    async def lease_renew_settle() -> None:
        batch = await run.call("lease", _lease, store, 100, b.held)
        refs = [lj.ref for lj in batch.jobs]
        mine = [d_ref] if d_ref is not None else []
        await run.call("renew", store.renew, refs + mine, b.held)
        # the healthy leases go back unrun (their attempt given back); d's own
        # lease, held since _drive, is settled one way or another
        kind = list(SettleKind)[zlib.crc32(run.case.id.encode()) % len(SettleKind)]
        settlements = [Settlement(r, SettleKind.RELEASE) for r in refs]
        settlements += [Settlement(r, kind, error="boom", retain_for=3600.0) for r in mine]
        await run.call("settle", store.settle, settlements)

    async def recover() -> None:
        await run.call("recover", store.recover_expired, list(QUEUES), 100)

    async def trim() -> None:
        await run.call("trim", store.trim, list(QUEUES), dead_max_age=None, dead_max_count=None)

    async def requeue() -> None:
        await run.call("requeue_dead", store.requeue_dead, "q")

    first = {
        "scheduled": promote,
        "retry_wait": promote,
        "ready": lease_renew_settle,
        "leased": lease_renew_settle,
        "expired": recover,
        "succeeded": trim,
        "dead": requeue,
    }[state]
    await first()
    results = await run.call("enqueue", store.enqueue_many, [_job(D), _job(LATE)])
    assert [r.job_id for r in results] == [D, LATE] and results[1].created
    run.recreated = results[0].created  # d's record was gone: a new d
    await promote()
    await lease_renew_settle()
    await recover()
    await run.call("run_now", store.run_now, D)
    await requeue()
    await trim()
    await store.get_job(D)


def _findings_on_d(report: CheckReport) -> list[Finding]:
    others = [f for f in report.problems if f.job_id != D]
    assert others == [], others
    return [f for f in report.findings if f.job_id == D]


async def run_case(b: Backend, case: Case) -> None:
    store = b.store
    app = App(store)
    ran: collections.Counter[str] = collections.Counter()
    hooked: list[str] = []

    @app.task("work", queue="q")
    async def work(payload: bytes, job: JobContext) -> None:
        assert payload == _payload(job.id) or job.id == D
        ran[job.id] += 1

    @app.on_dead_letter
    async def on_dead(job: chronos_trio.Job) -> None:
        hooked.append(job.id)

    run = Run(b, case)
    d_ref = await _drive(b, case.state)
    await store.enqueue_many([_job(h) for h in HEALTHY] + [_job(OTHER, "q2")])
    assert isinstance(store, MemoryStore | RedisStore)
    damaged = await damage_job(store, D, queue="q", field=case.field, how=case.how, client=b.client)
    shown = await store.get_job(D, queue="q")
    # damage the store can see (a record removed from a MemoryStore is as
    # if deleted: its heaps delete lazily, so that is not damage there)
    if isinstance(store, MemoryStore):
        rec = store._records.get(D)
        flagged = rec is not None and bool(record_damage(rec.job, D, "q"))
    else:
        flagged = shown is None or bool(shown.damage)
    before = await _snapshot(b, damaged)

    await _operations(run, d_ref)

    healthy = (*HEALTHY, OTHER, LATE)
    newer = case.how is Damage.NEWER

    async def done() -> bool:
        for h in healthy:
            job = await store.get_job(h)
            if job is None or job.state is not JobState.SUCCEEDED:
                return False
        [q] = await store.stats(["q"])
        waiting = q.counts[JobState.READY] + q.counts[JobState.LEASED]
        return waiting == (1 if newer and before[1][1:3] != [None, None] else 0)

    with trio.fail_after(b.bound):
        # (a damaged kind is a kind no worker has: dead at once, not after a grace)
        async with app.open_worker(
            queues="q,q2", retain_succeeded=3600.0, unknown_kind_grace=0, **b.timing
        ) as worker:
            while not await done():
                await trio.sleep(0.05)
        stats = worker.statistics()

    # the healthy jobs: each ran once and succeeded on its first attempt
    assert {h: ran[h] for h in healthy} == dict.fromkeys(healthy, 1)
    for h in healthy:
        job = await store.get_job(h)
        assert job is not None and job.state is JobState.SUCCEEDED, job
        assert job.attempts == 1 and job.damage == "" and job.last_error == "", job
    assert stats.restarts == {}, stats.restarts
    assert stats.lost == 0
    assert ran[D] <= 1

    # d: dead-lettered naming the field, quarantined, untouched, or unharmed
    report = await store.check()
    on_d = _findings_on_d(report)
    d = await store.get_job(D, queue="q")
    field = case.field
    if d is not None and d.last_error.startswith(DAMAGED_RECORD) and run.first is None:
        run.first = d  # set aside by the worker's calls
    outcome = (
        "newer" if newer
        else f"dead by {run.met_by or 'the worker'}" if run.first is not None
        else "quarantined" if run.quarantined or await _quarantined(b)
        else "recreated" if run.recreated
        else "unharmed"
    )  # fmt: skip
    print(f"{case.id}: {outcome}; flagged={flagged}; final={d and (d.state, d.last_error[:60])}")
    if newer:
        assert await _snapshot(b, damaged) == before, "a newer format's record was touched"
        assert D in run.reported_newer() and ran[D] == 0
        assert [f.problem for f in on_d] == [Problem.NEWER_FORMAT]
        return
    if run.first is not None:
        first = run.first
        assert first.state is JobState.DEAD and first.finished_at is not None, first
        if field != RECORD:
            assert field in first.last_error, (field, first.last_error)
        # reported: in an operation's aside, or to the dead-letter hooks (the
        # worker reports what its own calls set aside); a bare bool result
        # (run_now) has nowhere to report it
        assert D in run.reported_dead() or D in hooked or run.met_by == "run_now", run.met_by
    elif run.quarantined or await _quarantined(b):
        assert field == RECORD
        assert D in run.reported_quarantined() or stats.quarantined == 1
        assert [f.problem for f in on_d] == [Problem.QUARANTINED]
    elif isinstance(store, MemoryStore):
        # the MemoryStore needs every field: damage it did not notice is none
        assert not flagged, f"a damaged record went unnoticed: {shown}"
    # whatever came first, d ended where a job can end (a requeued dead job
    # runs again), and the only findings left on it name the damaged field
    if field == RECORD:
        # gone; a key that is not a job hash, left alone; or enqueued anew
        # once its record was gone, and then run as any new job
        new = run.recreated and d is not None and d.state is JobState.SUCCEEDED and ran[D] == 1
        assert d is None or d.damage or new, d
    else:
        # (settled ABORTED, it ends aborted)
        assert d is None or d.state in (JobState.SUCCEEDED, JobState.DEAD, JobState.ABORTED), d
        assert all(f.problem is Problem.DAMAGED and field in f.detail for f in on_d), on_d

    # direct reads: the healthy jobs and d, nothing else
    [q, q2] = await store.stats(list(QUEUES))
    assert {s: n for s, n in q2.counts.items() if n} == {JobState.SUCCEEDED: 1}
    expected = collections.Counter({JobState.SUCCEEDED: len(healthy) - 1})
    counts = collections.Counter({s: n for s, n in q.counts.items() if n})
    extra = counts - expected
    assert sum(extra.values()) <= 1 and not expected - counts, counts

    # the checker's repair leaves nothing to repair (d's damage dead-lettered),
    # and deleting d (how an operator clears it) leaves no problem at all
    repaired = await store.check(repair=True)
    assert repaired.ok and all(f.job_id == D for f in repaired.problems), repaired
    assert not (await store.check()).problems
    await store.delete_job(D, queue="q")
    assert not (await store.check()).problems


@pytest.mark.parametrize("case", _params())
async def test_one_damaged_record_among_healthy_ones(
    case: Case, fuzz_clock: trio.abc.Clock | None, fuzz_backend: Backend
) -> None:
    await run_case(fuzz_backend, case)
