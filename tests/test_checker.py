"""The store checker (``CheckRole.check``, ``Inspector.check``, ``python -m
chronos_trio check``): each inconsistency planted among healthy jobs is
found, ``repair`` puts it back where it belongs (or dead-letters it, or
quarantines an entry without a record), healthy jobs stay untouched, and a
second check finds nothing. On the MemoryStore (planted in its internals),
a standalone Redis (1 and 8 partitions; planted with raw redis-py commands)
and the 3-master Cluster; through the CLI; and beside a live worker."""

from __future__ import annotations

import collections
import heapq
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import redis
import redis.cluster
import trio

from chronos_trio import Inspector, Job, JobState, MemoryStore, NewJob, UnknownQueue
from chronos_trio.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main
from chronos_trio.store import (
    DAMAGED_RECORD,
    AdminRole,
    CheckReport,
    Problem,
    QueueWeight,
    Repair,
    SettleKind,
    Settlement,
    Store,
    TopologyRole,
)
from chronos_trio.store.memory import _check as _memory_check
from chronos_trio.store.redis import RedisStore, _check
from chronos_trio.store.redis._codec import RECORD_FORMAT
from chronos_trio.store.redis.keys import KeySpace, PartitionKeys
from chronos_trio.testing.damageable import DamageableMemoryStore, record_damage
from chronos_trio.testing.redis_server import RedisCluster
from tests import tests_app
from tests._support import Recorder, Work
from tests.test_store_roles import limited_store

GRACE = 0.5  # lease grace of these tests: leases of 0.2 s are long expired after 1 s


def new(job_id: str, queue: str = "q", **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b'{"n":1}', **kw)


async def lease(store: Store, count: int, ttl: float = 600.0) -> dict[str, Any]:
    got = (
        await store.lease([QueueWeight("q")], count, worker_id="host:1:0", lease_duration=ttl)
    ).jobs
    assert len(got) == count
    return {lj.job.id: lj for lj in got}


# -- planting inconsistencies --------------------------------------------------------------
class RedisPlanter:
    """Plants inconsistencies with raw redis-py commands (never through the store)."""

    can_orphan = True  # an index entry can outlive its record
    has_formats = True  # records carry a format version; quarantine hashes exist

    def __init__(self, client: redis.Redis | redis.cluster.RedisCluster, namespace: str) -> None:
        self.r = client
        self.keys = KeySpace(namespace)

    def pk(self, job: Job) -> PartitionKeys:
        return self.keys.placed(job.queue, job.placement)

    def index_name(self, state: JobState) -> str | None:
        return state.value

    def shown(self, value: str) -> str:
        return repr(value.encode())

    def drop_from_index(self, job: Job) -> None:
        for zset in _check.zsets(self.pk(job)):
            self.r.zrem(zset, job.id)

    def drop_record(self, job: Job) -> None:
        self.r.delete(self.pk(job).job(job.id))

    def add_to_index(self, job: Job, state: JobState, score: float) -> None:
        zset = _check.zsets(self.pk(job))[_check.INDEX_STATES.index(state)]
        self.r.zadd(zset, {job.id: score})

    def set_field(self, job: Job, field: str, value: str | None) -> None:
        key = self.pk(job).job(job.id)
        if value is None:
            self.r.hdel(key, field)
        else:
            self.r.hset(key, field, value)

    def field(self, job: Job, field: str) -> str | None:
        value: bytes | None = self.r.hget(self.pk(job).job(job.id), field)  # type: ignore[assignment]
        return None if value is None else value.decode()

    def indexes_of(self, job: Job) -> dict[str, float]:
        out = {}
        for state, zset in zip(_check.INDEX_STATES, _check.zsets(self.pk(job)), strict=True):
            score = self.r.zscore(zset, job.id)
            if score is not None:
                out[state.value] = score
        return out

    def raw(self, job: Job) -> Any:
        return self.r.hgetall(self.pk(job).job(job.id)), self.indexes_of(job)

    def quarantine(self, job: Job, job_id: str, reason: str) -> None:
        entry = json.dumps({"reason": reason, "at": 1_700_000_000.0})
        self.r.hset(self.pk(job).damaged, job_id, entry)

    def quarantined(self, job: Job) -> dict[str, Any]:
        entries: dict[bytes, bytes] = self.r.hgetall(self.pk(job).damaged)  # type: ignore[assignment]
        return {k.decode(): json.loads(v) for k, v in entries.items()}


class MemoryPlanter:
    """Plants inconsistencies in a MemoryStore's records and heaps (a
    ``DamageableMemoryStore`` for damaged fields: the MemoryStore judges none)."""

    can_orphan = False  # a heap entry without a record is stale by design
    has_formats = False

    HEAPS = {"due": "_due", "ready": "_ready", "leased": "_leased"}

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def index_name(self, state: JobState) -> str | None:
        return {
            JobState.SCHEDULED: "due",
            JobState.RETRY_WAIT: "due",
            JobState.READY: "ready",
            JobState.LEASED: "leased",
        }.get(state)

    def shown(self, value: str) -> str:
        return repr(value)

    def _heap(self, name: str, queue: str) -> list[tuple[float, int, str, int]]:
        heaps: dict[str, list[tuple[float, int, str, int]]] = getattr(self.store, self.HEAPS[name])
        return heaps.setdefault(queue, [])

    def drop_from_index(self, job: Job) -> None:
        for name in self.HEAPS:
            heap = self._heap(name, job.queue)
            heap[:] = [e for e in heap if e[2] != job.id]
            heapq.heapify(heap)

    def add_to_index(self, job: Job, state: JobState, score: float) -> None:
        name = self.index_name(state)
        assert name is not None
        version = self.store._records[job.id].version
        heapq.heappush(self._heap(name, job.queue), (score, 10**9, job.id, version))

    def set_field(self, job: Job, field: str, value: str | None) -> None:
        rec = self.store._records[job.id]
        damage: dict[str, Any] = {field: value}  # any type: that is the damage
        rec.job = attrs.evolve(rec.job, **damage)

    def field(self, job: Job, field: str) -> str | None:
        value = getattr(self.store._records[job.id].job, field)
        return None if value is None else str(value)

    def indexes_of(self, job: Job) -> dict[str, float]:
        rec = self.store._records.get(job.id)
        out = {}
        for name in self.HEAPS:
            for score, _, job_id, version in self._heap(name, job.queue):
                if job_id == job.id and rec is not None and version == rec.version:
                    out[name] = score
        return out

    def raw(self, job: Job) -> Any:
        rec = self.store._records.get(job.id)
        return (None if rec is None else rec.job), self.indexes_of(job)


Planter = RedisPlanter | MemoryPlanter


@attrs.frozen
class Planted:
    """The jobs of one scenario, as they were before damage was planted."""

    healthy: dict[str, Job]
    planted: dict[str, Job]


async def plant(store: Store, planter: Planter) -> Planted:
    """Healthy jobs in every state and, among them, one job per inconsistency."""
    await store.enqueue_many([new(f"h-leased-{i}") for i in range(5)])
    await lease(store, 5)
    await store.enqueue_many([new("p-wrong"), new("h-retry"), new("h-done"), new("h-dead")])
    leased = await lease(store, 4)
    await store.settle(
        [
            Settlement(leased["p-wrong"].ref, SettleKind.DEAD, "boom"),
            Settlement(leased["h-retry"].ref, SettleKind.RETRY, "e", retry_delay=3600),
            Settlement(leased["h-done"].ref, SettleKind.SUCCEEDED, retain_for=3600),
            Settlement(leased["h-dead"].ref, SettleKind.DEAD, "fatal"),
        ]
    )
    await store.enqueue_many([new("p-expired"), new("p-last", max_retries=0)])
    await lease(store, 2, ttl=0.2)
    await store.enqueue_many(
        [new(f"h-ready-{i}") for i in range(10)]
        + [new(f"h-sched-{i}", delay=3600) for i in range(5)]
        + [new("p-noindex"), new("p-norecord"), new("p-two", delay=3600)]
        + [new("p-attempts"), new("p-nokind"), new("p-state"), new("p-newer")]
        + [new("h-other", queue="q2")]
    )
    jobs = {}
    for name in [
        *(f"h-leased-{i}" for i in range(5)),
        *(f"h-ready-{i}" for i in range(10)),
        *(f"h-sched-{i}" for i in range(5)),
        "h-retry",
        "h-done",
        "h-dead",
        "h-other",
        "p-wrong",
        "p-expired",
        "p-last",
        "p-noindex",
        "p-norecord",
        "p-two",
        "p-attempts",
        "p-nokind",
        "p-state",
        "p-newer",
    ]:
        found = await store.get_job(name)
        assert found is not None, name
        jobs[name] = found
    await trio.sleep(1.0)  # the 0.2 s leases are now expired for longer than GRACE

    planter.drop_from_index(jobs["p-noindex"])
    if isinstance(planter, RedisPlanter):  # only Redis can hold an entry without a record
        planter.drop_record(jobs["p-norecord"])
    two = jobs["p-two"]
    planter.add_to_index(two, JobState.READY, two.run_at)
    wrong = jobs["p-wrong"]
    assert wrong.state is JobState.DEAD and wrong.finished_at is not None
    planter.drop_from_index(wrong)
    planter.add_to_index(wrong, JobState.READY, wrong.finished_at)
    planter.set_field(jobs["p-attempts"], "attempts", "x")
    planter.set_field(jobs["p-nokind"], "kind", None)
    planter.set_field(jobs["p-state"], "state", "bogus")
    if isinstance(planter, RedisPlanter):
        planter.set_field(jobs["p-newer"], "v", str(RECORD_FORMAT + 1))
        planter.quarantine(jobs["h-ready-0"], "gone-1", "index entry without a record")
    return Planted(
        {k: v for k, v in jobs.items() if k.startswith("h-")},
        {k: v for k, v in jobs.items() if k.startswith("p-")},
    )


def expected_problems(planter: Planter) -> dict[str, Problem]:
    out = {
        "p-noindex": Problem.NO_INDEX,
        "p-two": Problem.TWO_INDEXES,
        "p-wrong": Problem.WRONG_INDEX,
        "p-expired": Problem.EXPIRED_LEASE,
        "p-last": Problem.EXPIRED_LEASE,
        "p-attempts": Problem.DAMAGED,
        "p-nokind": Problem.DAMAGED,
        "p-state": Problem.DAMAGED,
    }
    if planter.can_orphan:
        out["p-norecord"] = Problem.NO_RECORD
    if planter.has_formats:
        out["p-newer"] = Problem.NEWER_FORMAT
        out["gone-1"] = Problem.QUARANTINED
    return out


async def run_scenario(store: Store, planter: Planter, *, batch: int) -> None:
    jobs = await plant(store, planter)
    healthy_before = {name: planter.raw(job) for name, job in jobs.healthy.items()}
    newer_before = planter.raw(jobs.planted["p-newer"])

    # -- found, and reporting changes nothing ---------------------------------------
    report = await store.check(batch=batch, lease_grace=GRACE)
    found = {f.job_id: f.problem for f in report.findings}
    assert found == expected_problems(planter), report.findings
    assert not report.ok and report.repair is False
    assert all(f.repair is Repair.NONE for f in report.findings)
    assert report.queues == ("q", "q2")
    assert report.records == len(jobs.healthy) + len(jobs.planted) - planter.can_orphan
    by_id = {f.job_id: f for f in report.findings}
    attempts = by_id["p-attempts"]
    assert attempts.detail == f"field 'attempts' holds {planter.shown('x')}, not an integer >= 0"
    assert attempts.state == "ready" and attempts.queue == "q"
    assert attempts.placement == jobs.planted["p-attempts"].placement
    assert "'kind'" in by_id["p-nokind"].detail and "'state'" in by_id["p-state"].detail
    assert by_id["p-two"].indexes == (planter.index_name(JobState.SCHEDULED), "ready")
    assert by_id["p-wrong"].indexes == ("ready",) and by_id["p-wrong"].state == "dead"
    assert by_id["p-noindex"].indexes == () and by_id["p-noindex"].state == "ready"
    assert "host:1:0" in by_id["p-expired"].detail
    if planter.has_formats:
        assert by_id["p-newer"].record_format == RECORD_FORMAT + 1
        assert attempts.record_format == RECORD_FORMAT
        assert by_id["p-norecord"].indexes == ("ready",)
        assert by_id["gone-1"].detail.startswith("index entry without a record (set aside ")
    assert {n: planter.raw(j) for n, j in jobs.healthy.items()} == healthy_before
    assert planter.field(jobs.planted["p-attempts"], "state") == "ready"

    # -- repaired -------------------------------------------------------------------
    report = await store.check(repair=True, batch=batch, lease_grace=GRACE)
    done = {f.job_id: f.repair for f in report.findings}
    expected = {
        "p-noindex": Repair.REINDEXED,
        "p-two": Repair.REINDEXED,
        "p-wrong": Repair.REINDEXED,
        "p-expired": Repair.RECOVERED,
        "p-last": Repair.DEAD_LETTERED,
        "p-attempts": Repair.DEAD_LETTERED,
        "p-nokind": Repair.DEAD_LETTERED,
        "p-state": Repair.DEAD_LETTERED,
    }
    if planter.can_orphan:
        expected["p-norecord"] = Repair.QUARANTINED
    if planter.has_formats:
        expected["p-newer"] = expected["gone-1"] = Repair.NONE
    assert done == expected, report.findings
    assert report.ok and report.repair is True
    p = jobs.planted
    noindex, two, wrong = p["p-noindex"], p["p-two"], p["p-wrong"]
    assert planter.indexes_of(noindex) == {planter.index_name(JobState.READY): noindex.run_at}
    assert planter.indexes_of(two) == {planter.index_name(JobState.SCHEDULED): two.run_at}
    assert planter.field(wrong, "state") == "dead" and planter.field(wrong, "last_error") == "boom"
    dead_index = planter.index_name(JobState.DEAD)
    assert planter.indexes_of(wrong) == ({dead_index: wrong.finished_at} if dead_index else {})
    assert planter.field(p["p-expired"], "state") == "ready"
    assert list(planter.indexes_of(p["p-expired"])) == ["ready"]
    assert planter.field(p["p-last"], "state") == "dead"
    assert "retries exhausted" in (planter.field(p["p-last"], "last_error") or "")
    for name in ("p-attempts", "p-nokind", "p-state"):
        finding = by_id[name]
        assert planter.field(p[name], "state") == "dead"
        assert planter.field(p[name], "last_error") == DAMAGED_RECORD + finding.detail
        assert list(planter.indexes_of(p[name])) == ([dead_index] if dead_index else [])
    if isinstance(planter, RedisPlanter):
        assert planter.indexes_of(p["p-norecord"]) == {}
        entry = planter.quarantined(p["p-norecord"])["p-norecord"]
        assert entry["reason"].startswith("index entry without a record (in ready)")
        assert planter.raw(p["p-newer"]) == newer_before  # never touched
    assert {n: planter.raw(j) for n, j in jobs.healthy.items()} == healthy_before

    # -- nothing left -----------------------------------------------------------------
    again = await store.check(batch=batch, lease_grace=GRACE)
    assert again.problems == () and again.ok, again.findings
    left = {f.job_id: f.problem for f in again.findings}
    if planter.has_formats:
        assert left == {
            "p-newer": Problem.NEWER_FORMAT,
            "gone-1": Problem.QUARANTINED,
            "p-norecord": Problem.QUARANTINED,
        }
    else:
        assert left == {}
    # what was put back in ready is leased like any ready job
    ready = (await store.lease([QueueWeight("q")], 100, worker_id="w2", lease_duration=600)).jobs
    got = {lj.job.id for lj in ready}
    assert {"p-noindex", "p-expired"} <= got and not got & {"p-attempts", "p-wrong"}


# -- what counts as damage ------------------------------------------------------------------
SOUND = {
    "kind": b"k",
    "payload": b"",
    "run_at": b"1700000000.25",
    "state": b"ready",
    "attempts": b"0",
    "max_retries": b"3",
    "timeout": b"30.0",
    "lease_token": None,
    "lease_owner": None,
    "lease_expires_at": None,
    "last_error": None,
    "created_at": b"1.7e+09",
    "finished_at": b"",
    "v": None,
    "chunks": None,
}


@pytest.mark.parametrize(
    ("changes", "damage"),
    [
        ({}, []),
        ({"timeout": b"inf"}, []),  # timeout=math.inf: no timeout
        ({"payload": None}, ["field 'payload' is missing"]),
        (
            {"payload": None, "chunks": b"field 'p1' is missing"},
            ["field 'p1' is missing"],  # the reason the chunks could not be joined, once
        ),
        ({"kind": b""}, ["field 'kind' is empty"]),
        ({"v": b"x"}, ["field 'v' holds b'x', not a record format"]),
        ({"timeout": b"nan"}, ["field 'timeout' holds b'nan', not a number"]),
        ({"run_at": b"1_0"}, ["field 'run_at' holds b'1_0', not a number"]),
        ({"attempts": b"1.0"}, ["field 'attempts' holds b'1.0', not an integer >= 0"]),
        ({"max_retries": b"-1"}, ["field 'max_retries' holds b'-1', not an integer >= 0"]),
        (
            {"state": b"leased"},
            ["field 'lease_token' is missing", "field 'lease_expires_at' is missing"],
        ),
        ({"state": b"dead"}, ["field 'finished_at' is empty"]),
        (
            {
                "state": b"dead",
                "finished_at": b"5",
                "kind": None,
                "last_error": b"damaged record: x",
            },
            [],  # already set aside as damaged: only its place in the dead index matters
        ),
        (
            {"created_at": b"x" * 50},
            [f"field 'created_at' holds {b'x' * 40!r}... (50 bytes), not a number"],
        ),
    ],
)
def test_what_the_redis_checker_calls_damaged(
    changes: dict[str, bytes | None], damage: list[str]
) -> None:
    assert _check.record_damage({**SOUND, **changes}) == damage


def test_record_format_versions() -> None:
    assert _check.record_format(None) == (1, "")
    assert _check.record_format(b"2") == (2, "")
    assert _check.record_format(b"3") == (3, "")  # newer: reported by the judge, not here
    assert _check.record_format(b"0") == (None, "field 'v' holds b'0', not a record format")


@pytest.mark.parametrize(
    ("changes", "damage"),
    [
        ({"timeout": float("inf")}, []),
        ({"timeout": float("nan")}, ["field 'timeout' holds nan, not a number"]),
        ({"attempts": True}, ["field 'attempts' holds True, not an integer >= 0"]),
        (
            {"state": JobState.LEASED},
            [
                "field 'lease_token' holds '', not a lease token",
                "field 'lease_expires_at' holds None, not a number",
            ],
        ),
    ],
)
def test_what_the_memory_checker_calls_damaged(changes: dict[str, Any], damage: list[str]) -> None:
    # placed as a MemoryStore places a job: version 1, partition 0
    job = Job(
        id="a", queue="q", kind="k", payload=b"", run_at=1.0, state=JobState.READY,
        placement=(1, 0),
    )  # fmt: skip
    assert record_damage(attrs.evolve(job, **changes)) == damage


# -- the scenario on each store ------------------------------------------------------------
async def test_memory_checker_finds_and_repairs(autojump_clock: object) -> None:
    store = DamageableMemoryStore()
    with trio.fail_after(60):
        await run_scenario(store, MemoryPlanter(store), batch=500)


@pytest.mark.redis
@pytest.mark.parametrize(("partitions", "batch"), [(1, 500), (8, 3)])
async def test_redis_checker_finds_and_repairs(redis_url: str, partitions: int, batch: int) -> None:
    store = RedisStore.from_url(redis_url, namespace="chk", default_partitions=partitions)
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(60):
            await run_scenario(store, RedisPlanter(client, "chk"), batch=batch)
    finally:
        await store.aclose()
        client.close()


@pytest.mark.redis
@pytest.mark.cluster
async def test_cluster_checker_finds_and_repairs(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    store = RedisStore.from_url(redis_cluster_url, namespace="chk", default_partitions=8)
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    try:
        with trio.fail_after(60):
            await run_scenario(store, RedisPlanter(client, "chk"), batch=7)
        # the partitions spread over every master, and the walk visited them all
        sizes = [redis.Redis(port=p).dbsize() for p in redis_cluster.ports]
        assert all(n > 0 for n in sizes), sizes
    finally:
        await store.aclose()
        client.close()


# -- only its own namespace and topology -------------------------------------------------------
@pytest.mark.redis
async def test_redis_checker_leaves_other_namespaces_and_versions_alone(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    mine = RedisStore.from_url(redis_url, namespace="a")
    # "a2" shares a prefix with "a"; "a*" and "a?" would match it as globs
    others = [RedisStore.from_url(redis_url, namespace=ns) for ns in ("a2", "a*", "a?", "b")]
    try:
        with trio.fail_after(30):
            for store in (mine, *others):
                await store.enqueue_many([new("x"), new("y")])
            broken = []
            for store in others:
                job = await store.get_job("x")
                assert job is not None
                planter = RedisPlanter(client, store.namespace)
                planter.drop_from_index(job)
                broken.append((store, planter, job, planter.raw(job)))
            # a job hash of a version outside "a"'s topology
            stray = KeySpace("a").partition("q", 9, 0).job("stray")
            client.hset(stray, mapping={"state": "ready", "kind": "k"})
            for queues in (None, ["q"]):
                report = await mine.check(queues, repair=True, batch=1)
                assert report.findings == () and report.records == 2, report.findings
                assert report.skipped_keys == 1
            assert client.hgetall(stray) == {b"state": b"ready", b"kind": b"k"}
            for store, planter, job, before in broken:
                assert planter.raw(job) == before  # still broken: not ours to repair
                [found] = (await store.check()).problems
                assert found.job_id == "x" and found.problem is Problem.NO_INDEX
    finally:
        for store in (mine, *others):
            await store.aclose()
        client.close()


# -- a repair re-checks the job first ------------------------------------------------------------
@pytest.mark.redis
async def test_repair_leaves_a_job_that_changed_since_it_was_inspected(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the reading and the repair, a worker leases one job and an
    operator repairs the other by hand: both repairs are skipped and change
    nothing; the next check finds nothing."""
    store = RedisStore.from_url(redis_url, namespace="race")
    client = redis.Redis.from_url(redis_url)
    planter = RedisPlanter(client, "race")
    try:
        with trio.fail_after(30):
            await store.enqueue_many([new("a-leased"), new("b-fixed")])
            jobs = {j: await store.get_job(j) for j in ("a-leased", "b-fixed")}
            for job in jobs.values():
                assert job is not None
                planter.add_to_index(job, JobState.DEAD, 1.0)  # ready and dead: two indexes
            original = _check.Walk.apply

            async def apply_late(self: _check.Walk, fixes: Any) -> None:
                fixed = jobs["b-fixed"]
                assert fixed is not None
                client.zrem(planter.pk(fixed).dead, fixed.id)
                leased = (
                    await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=60)
                ).jobs
                assert [lj.job.id for lj in leased] == ["a-leased"]
                await original(self, fixes)

            monkeypatch.setattr(_check.Walk, "apply", apply_late)
            report = await store.check(repair=True)
            assert {f.job_id: f.repair for f in report.findings} == {
                "a-leased": Repair.SKIPPED,
                "b-fixed": Repair.SKIPPED,
            }
            assert not report.ok  # skipped: check again
            monkeypatch.setattr(_check.Walk, "apply", original)
            leased_job = jobs["a-leased"]
            assert leased_job is not None
            # the lease is intact: still leased, and still in the dead index too
            assert planter.field(leased_job, "state") == "leased"
            assert set(planter.indexes_of(leased_job)) == {"leased", "dead"}
            [left] = (await store.check(repair=True)).findings
            assert left.job_id == "a-leased" and left.problem is Problem.TWO_INDEXES
            assert left.repair is Repair.REINDEXED
            assert set(planter.indexes_of(leased_job)) == {"leased"}
            assert (await store.check()).findings == ()
    finally:
        await store.aclose()
        client.close()


# -- the repair's guard: a job changed since its inspection is left alone -------------------------
@attrs.frozen
class Meddled:
    """A scenario: a job with a problem, and what changes it between the
    check's reading and its repair (``meddle``); ``then`` checks it after."""

    job_id: str
    problem: Problem


async def plant_fixed_by_hand(store: Store, planter: Planter) -> tuple[Meddled, Any, Any]:
    """A waiting job whose kind is missing (damaged: to be dead-lettered),
    fixed by an operator meanwhile: only a field changed, no index."""
    await store.enqueue_many([new("fixed", delay=600.0)])
    job = await store.get_job("fixed")
    assert job is not None
    planter.set_field(job, "kind", None)

    async def meddle() -> None:
        planter.set_field(job, "kind", "k")

    async def then() -> None:
        after = await store.get_job("fixed")
        assert after is not None and after.state is JobState.SCHEDULED, after
        assert after.kind == "k" and after.last_error == "" and after.damage == "", after

    return Meddled("fixed", Problem.DAMAGED), meddle, then


async def plant_run_meanwhile(store: Store, planter: Planter) -> tuple[Meddled, Any, Any]:
    """A ready job also in the scheduled index (to be reindexed into ready),
    leased and run to success by a worker meanwhile: putting it back in
    ready would run it again."""
    await store.enqueue_many([new("ran")])
    job = await store.get_job("ran")
    assert job is not None
    planter.add_to_index(job, JobState.SCHEDULED, job.run_at + 600.0)

    async def meddle() -> None:
        got = await lease(store, 1)
        settled = await store.settle(
            [Settlement(got["ran"].ref, SettleKind.SUCCEEDED, retain_for=600.0)]
        )
        assert settled.settled == (True,)

    async def then() -> None:
        after = await store.get_job("ran")
        assert after is not None and after.state is JobState.SUCCEEDED, after
        assert "ready" not in planter.indexes_of(after), "a finished job put back in ready"
        got = (await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=60)).jobs
        assert got == (), "the job ran twice"

    return Meddled("ran", Problem.TWO_INDEXES), meddle, then


SCENARIOS = {"fixed-by-hand": plant_fixed_by_hand, "run-meanwhile": plant_run_meanwhile}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_memory_repair_leaves_a_job_changed_since_it_was_judged(
    scenario: str, autojump_clock: object
) -> None:
    """The memory checker judges, then repairs only a record unchanged since
    (its version and its job): the same guard as check_repair.lua."""
    store = DamageableMemoryStore()
    planter = MemoryPlanter(store)
    meddled, meddle, then = await SCENARIOS[scenario](store, planter)
    now = await store.now()
    inspection = _memory_check.inspect(store, ["q"], now, GRACE)
    assert [(j.finding.job_id, j.finding.problem) for j in inspection.judged] == [
        (meddled.job_id, meddled.problem)
    ]
    await meddle()
    [found] = _memory_check.repair_all(store, inspection.judged, now)
    assert found.repair is Repair.SKIPPED, found
    await then()
    await store.check(repair=True)
    assert (await store.check()).findings == ()
    await then()


@pytest.mark.redis
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_redis_repair_leaves_a_job_changed_since_it_was_inspected(
    scenario: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_repair.lua acts only on a job exactly as check_inspect.lua read
    it: a field changed (and nothing else), or the job run meanwhile."""
    namespace = f"guard-{scenario}"
    store = RedisStore.from_url(redis_url, namespace=namespace)
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(30):
            meddled, meddle, then = await SCENARIOS[scenario](
                store, RedisPlanter(client, namespace)
            )
            original = _check.Walk.apply

            async def apply_late(self: _check.Walk, fixes: Any) -> None:
                await meddle()
                await original(self, fixes)

            monkeypatch.setattr(_check.Walk, "apply", apply_late)
            report = await store.check(repair=True)
            monkeypatch.setattr(_check.Walk, "apply", original)
            [found] = report.findings
            assert (found.job_id, found.problem) == (meddled.job_id, meddled.problem)
            assert found.repair is Repair.SKIPPED, found
            await then()
            # the next check repairs what is left (the stale index entry) rightly
            await store.check(repair=True)
            assert (await store.check()).findings == ()
            await then()
    finally:
        await store.aclose()
        client.close()


# -- beside a live worker --------------------------------------------------------------------
async def drain_while_checking(store: Store, checker: Store, *, jobs: int, **timing: Any) -> None:
    """A worker drains ``jobs`` jobs (some delayed, some failing once) while
    ``checker`` checks and repairs over and over: every check finds nothing,
    every job runs to success exactly as often as without the checker."""
    rec = Recorder(store, max_retries=3)
    reports: list[CheckReport] = []
    news = [Work(i, sleep=0.02, fail_times=1 if i % 7 == 0 else 0) for i in range(jobs)]
    async with rec.app.open_worker(concurrency=8, **timing) as worker:
        ids = [
            (await rec.work.enqueue(w, job_id=f"live-{w.n}", delay=0.3 if w.n % 5 == 0 else 0))
            for w in news
        ]
        assert len(ids) == jobs
        async with trio.open_nursery() as nursery:

            async def check_forever() -> None:
                while True:
                    reports.append(await checker.check(repair=True, batch=5))
                    await trio.sleep(0.01)

            nursery.start_soon(check_forever)
            await worker.wait_idle()
            nursery.cancel_scope.cancel()
    assert len(reports) >= 3, "the checks must overlap the drain"
    assert [f for r in reports for f in r.findings] == []
    assert rec.dead == []
    assert rec.finished == collections.Counter({f"live-{i}": 1 for i in range(jobs)})
    runs = collections.Counter(job_id for job_id, _, _ in rec.runs)
    assert runs == {f"live-{w.n}": 1 + w.fail_times for w in news}


async def test_checker_leaves_a_live_memory_worker_alone(autojump_clock: object) -> None:
    store = MemoryStore()
    with trio.fail_after(120):
        await drain_while_checking(store, store, jobs=200, poll_interval=0.5)


@pytest.mark.redis
async def test_checker_leaves_a_live_redis_worker_alone(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, namespace="live", default_partitions=8)
    checker = RedisStore.from_url(redis_url, namespace="live")  # as another process would
    try:
        with trio.fail_after(60):
            await drain_while_checking(
                store,
                checker,
                jobs=300,
                poll_interval=0.2,
                lease_duration=1.5,
                recover_interval=0.2,
                heartbeat_interval=0.5,
                shutdown_grace=0.5,
            )
    finally:
        await store.aclose()
        await checker.aclose()


# -- the inspector ------------------------------------------------------------------------------
async def test_inspector_check_checks_its_input(autojump_clock: object) -> None:
    store = MemoryStore()
    await store.enqueue_many([new("a")])
    inspector = Inspector(store)
    report = await inspector.check(["q"])
    assert report.ok and report.records == 1 and report.queues == ("q",)
    with pytest.raises(UnknownQueue, match="unknown queue 'nope'"):
        await inspector.check(["nope"])
    with pytest.raises(ValueError, match="batch must be >= 1"):
        await inspector.check(batch=0)
    with pytest.raises(ValueError, match="lease grace"):
        await inspector.check(lease_grace=-1)
    bare = Inspector(limited_store([AdminRole, TopologyRole], store))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="checking the store needs a store offering CheckRole"):
        await bare.check()


# -- the command line -----------------------------------------------------------------------------
@attrs.frozen
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    if code not in (EXIT_OK, EXIT_PROBLEMS):
        assert len(captured.err.strip().splitlines()) == 1, captured.err
    return Result(code, captured.out, captured.err)


async def plant_two(store: Store, planter: Planter) -> None:
    """One record in no index and one damaged record, among healthy jobs."""
    await store.enqueue_many([new(f"ok-{i}") for i in range(5)] + [new("lost"), new("bad")])
    lost, bad = await store.get_job("lost"), await store.get_job("bad")
    assert lost is not None and bad is not None
    planter.drop_from_index(lost)
    planter.set_field(bad, "attempts", "x")


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def cli_target(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[str], Planter]]:
    """Where ``check`` looks (APP, or ``--url``) after :func:`plant_two` there."""
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    if request.param == "memory":
        memory = DamageableMemoryStore()
        planter: Planter = MemoryPlanter(memory)
        trio.run(plant_two, memory, planter)
        monkeypatch.setattr(tests_app.app, "_store", memory)
        monkeypatch.setattr(tests_app.app, "_store_url", None)
        yield ["tests.tests_app:app"], planter
        return
    url: str = request.getfixturevalue("redis_url")
    client = redis.Redis.from_url(url)
    planter = RedisPlanter(client, "chronos")

    async def fill() -> None:
        store = RedisStore.from_url(url)
        try:
            await plant_two(store, planter)
        finally:
            await store.aclose()

    trio.run(fill)
    yield ["--url", url], planter
    client.close()


def test_cli_check_table_repair_and_exit_codes(
    cli_target: tuple[list[str], Planter], capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = cli_target
    found = run_cli(capsys, "check", *target)
    assert found.code == EXIT_PROBLEMS, found
    lines = found.out.splitlines()
    assert lines[0].split() == [
        "PROBLEM", "QUEUE", "VERSION", "PARTITION", "JOB", "STATE", "INDEXES", "DETAIL",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:3]}
    assert set(rows) == {"no_index", "damaged"}
    assert " lost " in rows["no_index"] and "ready record in no index" in rows["no_index"]
    assert "field 'attempts' holds" in rows["damaged"] and " bad " in rows["damaged"]
    assert "checked queues 'q': 1 partition(s), 7 record(s), 6 index entries" in found.out
    assert "2 problem(s) found: --repair fixes them" in found.out
    assert "ok-" not in found.out

    repaired = run_cli(capsys, "check", *target, "--repair")
    assert repaired.code == EXIT_OK, repaired
    assert repaired.out.splitlines()[0].split()[-1] == "REPAIR"
    assert "reindexed: put in the ready index" in repaired.out
    assert "dead_lettered: damaged record: field 'attempts'" in repaired.out
    assert "2 problem(s) found, 2 repaired" in repaired.out

    clean = run_cli(capsys, "check", *target)
    assert clean.code == EXIT_OK and "no problems found" in clean.out, clean
    assert "PROBLEM" not in clean.out


def test_cli_check_json(
    cli_target: tuple[list[str], Planter], capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = cli_target
    found = run_cli(capsys, "check", *target, "--json", "--queue", "q", "--batch", "2")
    assert found.code == EXIT_PROBLEMS, found
    doc = json.loads(found.out)
    assert doc["ok"] is False and doc["repair"] is False and doc["queues"] == ["q"]
    assert doc["problems"] == doc["unresolved"] == 2 and doc["records"] == 7
    assert doc["lease_grace"] == 60.0
    by_job = {f["job_id"]: f for f in doc["findings"]}
    assert set(by_job) == {"lost", "bad"}
    lost = by_job["lost"]
    assert lost["problem"] == "no_index" and lost["state"] == "ready" and lost["indexes"] == []
    assert lost["queue"] == "q" and lost["repair"] == "none" and lost["repair_detail"] is None
    assert by_job["bad"]["detail"].startswith("field 'attempts' holds ")

    repaired = run_cli(capsys, "check", *target, "--json", "--repair")
    assert repaired.code == EXIT_OK, repaired
    doc = json.loads(repaired.out)
    assert doc["ok"] is True and doc["repair"] is True and doc["unresolved"] == 0
    repairs = {f["job_id"]: (f["repair"], f["repair_detail"]) for f in doc["findings"]}
    assert repairs["lost"] == ("reindexed", "put in the ready index")
    assert repairs["bad"][0] == "dead_lettered"
    assert repairs["bad"][1].startswith("damaged record: field 'attempts' holds ")

    clean = run_cli(capsys, "check", *target, "--json")
    assert clean.code == EXIT_OK and json.loads(clean.out)["findings"] == []


def test_cli_check_errors(
    cli_target: tuple[list[str], Planter], capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = cli_target
    unknown = run_cli(capsys, "check", *target, "--queue", "nope")
    assert unknown.code == EXIT_NOT_FOUND and "unknown queue 'nope'" in unknown.err
    for bad in (["--batch", "0"], ["--lease-grace", "-1"]):
        usage = run_cli(capsys, "check", *target, *bad)
        assert usage.code == EXIT_USAGE and bad[0] in usage.err, usage
    grace = run_cli(capsys, "check", *target, "--lease-grace", "0", "--json")
    assert grace.code == EXIT_PROBLEMS  # the jobs are still broken: nothing repaired yet
