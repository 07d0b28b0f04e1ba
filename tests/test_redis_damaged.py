"""Damaged records on Redis (issue 11): one record with a field missing or of
the wrong type, or an index entry without a record, never costs a healthy job.

The four reproductions of the issue (r0-r6 in one queue, r3 damaged):

1. lease.lua met r3 with ``attempts`` not a number, missing, or its hash
   deleted, after popping the whole batch: seven jobs in no index.
2. recover.lua met a leased job whose hash was deleted (then its worker was
   killed): the other expired leases of that batch stayed lost.
3. ``kind`` missing: decoding the lease reply crashed the leaser, and the
   healthy jobs of another queue leased with it never ran.
4. ``payload`` missing: the executor crash-looped instead of the job going dead.

Then record versioning: a record of a newer format is left exactly as it is
by every operation and reported; a record without ``v`` is format 1.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import redis
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobState, LeaseRef, NewJob
from chronos_trio.store import (
    LeaseResult,
    QueueWeight,
    SettleKind,
    Settlement,
    StoreError,
    TopologyError,
    TriggerResult,
    partition_of,
)
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._codec import RECORD_FORMAT
from chronos_trio.store.redis.keys import KeySpace, PartitionKeys
from tests._support import wait_for

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]

#: A record format newer than this version's.
NEXT = str(RECORD_FORMAT + 1)

#: Worker timing for the runs below: short real intervals.
TIMING: dict[str, Any] = {
    "poll_interval": 0.2,
    "lease_duration": 1.5,
    "recover_interval": 0.2,
    "heartbeat_interval": 0.5,
    "shutdown_grace": 0.5,
}


@attrs.frozen
class Work:
    n: int


def job(job_id: str, queue: str = "q", **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="work", payload=b'{"n": 0}', **kw)


def part(store: RedisStore, queue: str = "q") -> PartitionKeys:
    """Keys of the queue's only partition (version 1, partition 0)."""
    return KeySpace(store.namespace).partition(queue, 1, 0)


async def lease(
    store: RedisStore, queue: str = "q", count: int = 100, ttl: float = 3.0
) -> LeaseResult:
    return await store.lease([QueueWeight(queue)], count, worker_id="w", lease_duration=ttl)


async def counts(store: RedisStore, queue: str = "q") -> dict[str, int]:
    [stats] = await store.stats([queue])
    return {state.value: n for state, n in stats.counts.items() if n}


def damage(client: redis.Redis, pk: PartitionKeys, job_id: str, how: str) -> None:
    key = pk.job(job_id)
    if how == "deleted":
        client.delete(key)
    elif how.endswith("_missing"):
        client.hdel(key, how.removesuffix("_missing"))
    else:
        field, value = how.split("=", 1)
        client.hset(key, field, value)


# -- reproduction 1: lease.lua ----------------------------------------------------------
@pytest.mark.parametrize("how", ["attempts=x", "attempts_missing", "deleted"])
async def test_lease_sets_aside_one_damaged_record_and_leases_the_rest(
    redis_store: Factory, redis_url: str, how: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job(f"r{i}") for i in range(7)])
    damage(client, pk, "r3", how)

    batch = await lease(store, count=10)

    healthy = ["r0", "r1", "r2", "r4", "r5", "r6"]
    assert [lj.job.id for lj in batch.jobs] == healthy
    assert all(lj.job.attempts == 1 and lj.job.payload == b'{"n": 0}' for lj in batch.jobs)
    if how == "deleted":
        # an index entry without a record: out of the index, into quarantine
        assert await counts(store) == {"leased": 6}
        assert client.hget(pk.damaged, "r3") is not None
        [entry] = batch.aside.quarantined
        assert (entry.queue, entry.job_id) == ("q", "r3") and "no record" in entry.reason
        assert batch.aside.dead == ()
    else:
        assert await counts(store) == {"leased": 6, "dead": 1}
        dead = await store.get_job("r3")
        assert dead is not None and dead.state is JobState.DEAD
        assert dead.last_error.startswith("damaged record: field 'attempts'"), dead.last_error
        assert dead.finished_at is not None and dead.lease_token == ""
        assert "attempts" in dead.damage
        [reported] = batch.aside.dead
        assert reported.id == "r3" and reported.state is JobState.DEAD
        assert reported.last_error == dead.last_error
    # the healthy leases are real: they settle
    assert (
        await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch.jobs])
    ).settled == (True,) * 6
    assert (await lease(store)).jobs == ()


# -- reproduction 2: recover.lua --------------------------------------------------------
@pytest.mark.parametrize("how", ["deleted", "attempts=x", "max_retries_missing"])
async def test_recover_sets_aside_one_damaged_lease_and_recovers_the_rest(
    redis_store: Factory, redis_url: str, how: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job(f"r{i}") for i in range(7)])
    leased = await lease(store, ttl=0.3)
    assert len(leased.jobs) == 7
    damage(client, pk, "r3", how)  # ... then its worker is killed: the leases expire
    with trio.fail_after(5):
        while (
            client.zcount(pk.leased, "-inf", "(+inf")
            and not (result := await store.recover_expired(["q"], 100)).requeued
        ):
            await trio.sleep(0.05)
    assert sorted(result.requeued) == ["r0", "r1", "r2", "r4", "r5", "r6"]
    assert result.dead == ()
    if how == "deleted":
        assert await counts(store) == {"ready": 6}
        assert client.hget(pk.damaged, "r3") is not None
        assert [e.job_id for e in result.aside.quarantined] == ["r3"]
    else:
        assert await counts(store) == {"ready": 6, "dead": 1}
        field = how.split("=")[0].removesuffix("_missing")
        [reported] = result.aside.dead
        assert reported.id == "r3"
        assert reported.last_error.startswith(f"damaged record: field '{field}'")
    # the recovered jobs lease again, on their second attempt
    again = await lease(store)
    assert sorted(lj.job.id for lj in again.jobs) == ["r0", "r1", "r2", "r4", "r5", "r6"]
    assert {lj.job.attempts for lj in again.jobs} == {2}


# -- reproduction 3: kind missing, decoding the lease reply -----------------------------
async def test_kind_missing_in_one_queue_costs_no_job_of_another(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    app = App(store)
    ran: collections.Counter[int] = collections.Counter()
    dead: list[chronos_trio.Job] = []

    @app.task("work", queue="x-good")
    async def work(args: Work, job: JobContext) -> None:
        ran[args.n] += 1

    @app.on_dead_letter
    async def on_dead(job: chronos_trio.Job) -> None:
        dead.append(job)

    await store.enqueue_many([job("bad", queue="x-bad")])
    damage(client, part(store, "x-bad"), "bad", "kind_missing")
    await work.enqueue_many([Work(i) for i in range(40)])

    # the store never hands out the record, and leases the 40 beside it
    peek = await store.lease(
        [QueueWeight("x-bad"), QueueWeight("x-good")], 64, worker_id="w", lease_duration=3
    )
    assert len(peek.jobs) == 40 and {lj.job.queue for lj in peek.jobs} == {"x-good"}
    assert [j.id for j in peek.aside.dead] == ["bad"]
    assert "field 'kind' is missing" in peek.aside.dead[0].last_error
    await store.settle([Settlement(lj.ref, SettleKind.RELEASE) for lj in peek.jobs])

    # and a real worker runs all 40 (the leaser never crashes on it)
    await store.run_now("bad", queue="x-bad")  # dead -> ready again: met by the worker's lease
    async with app.open_worker(queues="x-bad,x-good", **TIMING) as worker:
        await wait_for(lambda: len(ran) == 40, timeout=20)
        restarts = sum(worker.statistics().restarts.values())
    assert sorted(ran) == list(range(40)) and set(ran.values()) == {1}
    assert restarts == 0
    bad = await store.get_job("bad", queue="x-bad")
    assert bad is not None and bad.state is JobState.DEAD
    assert bad.last_error == "damaged record: field 'kind' is missing"


# -- reproduction 4: payload missing ---------------------------------------------------
async def test_payload_missing_goes_dead_with_its_reason_and_the_worker_runs_on(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    app = App(store)
    ran: list[int] = []

    @app.task("work", queue="q")
    async def work(args: Work, job: JobContext) -> None:
        ran.append(args.n)

    await store.enqueue_many([job("p")])
    damage(client, part(store), "p", "payload_missing")
    # the store never hands out a record without a payload
    batch = await lease(store)
    assert batch.jobs == () and [j.id for j in batch.aside.dead] == ["p"]
    assert batch.aside.dead[0].last_error == "damaged record: field 'payload' is missing"

    await store.run_now("p")  # ready again: a real worker meets it
    await work.enqueue_many([Work(i) for i in range(5)])
    with trio.fail_after(20):
        async with app.open_worker(queues="q", **TIMING) as worker:
            await wait_for(lambda: len(ran) == 5, timeout=20)
            await wait_for(lambda: client.hget(part(store).job("p"), "state") == b"dead")
            stats = worker.statistics()
    assert sum(stats.restarts.values()) == 0
    p = await store.get_job("p")
    assert p is not None and p.state is JobState.DEAD and p.attempts <= 1
    assert p.last_error == "damaged record: field 'payload' is missing"


# -- every script: a damaged record is set aside, the rest of the batch proceeds ----------
def plant(
    client: redis.Redis, pk: PartitionKeys, job_id: str, index: str, score: float, **fields: Any
) -> None:
    """A job hash written directly (as a newer version or a manual edit would),
    in state ``index`` (unless ``fields`` say otherwise) and indexed in that
    state's zset with ``score``."""
    record = {
        "kind": "work", "payload": b'{"n": 0}', "run_at": repr(score), "state": index,
        "attempts": "0", "max_retries": "3", "timeout": "30.0", "created_at": "1.0",
        **fields,
    }  # fmt: skip
    client.hset(pk.job(job_id), mapping=record)
    zset = {
        "scheduled": pk.scheduled, "ready": pk.ready, "leased": pk.leased,
        "retry_wait": pk.retry, "succeeded": pk.succeeded, "dead": pk.dead,
    }[index]  # fmt: skip
    client.zadd(zset, {job_id: score})


async def test_renew_and_settle_dead_letter_a_damaged_record_they_hold(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job(f"j{i}") for i in range(4)])
    j0, j1, j2, j3 = (await lease(store)).jobs
    client.hset(pk.job("j0"), "lease_expires_at", "soon")
    renewed = await store.renew([lj.ref for lj in (j0, j1)], 5)
    assert renewed.renewed == (False, True)
    assert [j.id for j in renewed.aside.dead] == ["j0"]
    assert renewed.aside.dead[0].last_error == (
        "damaged record: field 'lease_expires_at' holds b'soon', not a number"
    )
    client.hset(pk.job("j1"), "lease_expires_at", "nan")
    client.hdel(pk.job("j2"), "attempts")  # a release needs attempts
    settled = await store.settle(
        [
            Settlement(j1.ref, SettleKind.SUCCEEDED),
            Settlement(j2.ref, SettleKind.RELEASE),
            Settlement(j3.ref, SettleKind.SUCCEEDED),
        ]
    )
    assert settled.settled == (False, False, True)
    assert [j.id for j in settled.aside.dead] == ["j1", "j2"]
    assert "field 'attempts' is missing" in settled.aside.dead[1].last_error
    assert await counts(store) == {"dead": 3}
    assert client.zcount(pk.leased, "-inf", "(+inf") == 0  # out of the leased index
    # a lease not held is never touched, damaged or not
    plant(client, pk, "other", "leased", 9e9, lease_token="theirs", lease_expires_at="junk")
    before = client.hgetall(pk.job("other"))
    stale = LeaseRef("other", "q", "mine")
    assert (await store.settle([Settlement(stale, SettleKind.DEAD, error="x")])).settled == (False,)
    assert (await store.renew([stale], 5)).renewed == (False,)
    assert client.hgetall(pk.job("other")) == before


async def test_promote_sets_aside_and_promotes_the_rest(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job(f"s{i}", delay=0.05) for i in range(4)])
    client.delete(pk.job("s1"))  # an index entry without a record
    client.hset(pk.job("s2"), "state", "leased")  # not the state of its index
    await trio.sleep(0.1)
    result = await store.promote_due(["q"], 100)
    assert result.promoted == 2
    assert [e.job_id for e in result.aside.quarantined] == ["s1"]
    assert [j.id for j in result.aside.dead] == ["s2"]
    assert result.aside.dead[0].last_error == (
        "damaged record: field 'state' holds b'leased', but the job is in the scheduled index"
    )
    assert await counts(store) == {"ready": 2, "dead": 1}
    assert not client.exists(pk.job("s1"))  # promote never writes a partial record
    assert sorted(lj.job.id for lj in (await lease(store)).jobs) == ["s0", "s3"]


async def test_admin_scripts_set_aside_and_carry_on(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.topology("q")  # the queue is known (the records below are planted)
    for i in range(4):
        plant(client, pk, f"d{i}", "dead", 1.0 + i, finished_at="1.0")
    client.delete(pk.job("d1"))
    client.hset(pk.job("d2"), "state", "ready")
    moved = await store.requeue_dead("q")
    assert moved.count == 2 and [e.job_id for e in moved.aside.quarantined] == ["d1"]
    assert [j.id for j in moved.aside.dead] == ["d2"]
    assert await counts(store) == {"ready": 2, "dead": 1}
    # trim deletes only a record in the state of its index
    plant(client, pk, "t0", "succeeded", 1.0)
    plant(client, pk, "t1", "succeeded", 2.0)
    client.hset(pk.job("t1"), "state", "ready")
    trimmed = await store.trim(["q"], dead_max_age=None, dead_max_count=None)
    assert trimmed.count == 1 and [j.id for j in trimmed.aside.dead] == ["t1"]
    assert not client.exists(pk.job("t0")) and client.hget(pk.job("t1"), "state") == b"dead"
    # run_now: an unreadable state cannot be run: dead-lettered, out of every index
    plant(client, pk, "r", "scheduled", 1.0, state="oops")
    assert await store.run_now("r") is False
    r = await store.get_job("r")
    assert r is not None and r.state is JobState.DEAD
    assert r.last_error == "damaged record: field 'state' holds b'oops', not a job state"
    assert client.zscore(pk.scheduled, "r") is None and client.zscore(pk.dead, "r") is not None
    # delete: a record whose state is unreadable is deleted from every index
    plant(client, pk, "x", "retry_wait", 1.0)
    client.hdel(pk.job("x"), "state")
    assert await store.delete_job("x") is True
    assert not client.exists(pk.job("x")) and client.zscore(pk.retry, "x") is None
    assert store.statistics().damaged_dead == 3  # d2, t1, r


async def test_enqueue_never_touches_an_existing_key(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job("seed")])
    plant(client, pk, "norun", "scheduled", 5.0)
    client.hdel(pk.job("norun"), "run_at")
    client.set(pk.job("str"), "not a hash")
    before = client.hgetall(pk.job("norun"))
    results = await store.enqueue_many([job("norun"), job("str"), job("new")])
    assert [(r.job_id, r.created, r.run_at) for r in results[:2]] == [
        ("norun", False, 0.0),
        ("str", False, 0.0),
    ]
    assert results[2].created
    assert client.hgetall(pk.job("norun")) == before and client.get(pk.job("str")) == b"not a hash"
    # enqueue writes the record format
    assert client.hget(pk.job("new"), "v") == str(RECORD_FORMAT).encode()


async def test_admin_reads_are_total(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.topology("q")
    plant(client, pk, "a", "ready", 1.0, attempts="x")
    plant(client, pk, "s", "ready", 2.0, state="bogus")
    client.set(pk.job("k"), "a string")
    client.zadd(pk.ready, {"k": 3.0, "gone": 4.0})
    a = await store.get_job("a")
    assert a is not None and a.damage == "field 'attempts' holds b'x', not an integer >= 0"
    assert a.attempts == 0 and a.state is JobState.READY
    s = await store.get_job("s")  # an unreadable state: shown in the index it is in
    assert s is not None and s.state is JobState.READY
    assert s.damage == "field 'state' holds b'bogus', not a job state"
    k = await store.get_job("k")
    assert k is not None and k.damage.startswith("its key is not a job hash")
    listed = await store.list_jobs("q", JobState.READY)
    assert [(j.id, bool(j.damage)) for j in listed] == [("a", True), ("s", True), ("k", True)]
    sound = await store.enqueue_many([job("ok")])
    assert sound[0].created and (await store.get_job("ok")).damage == ""  # type: ignore[union-attr]


async def test_a_key_of_another_type_in_an_index_is_quarantined(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job("a"), job("b")])
    client.delete(pk.job("a"))
    client.rpush(pk.job("a"), "x")
    batch = await lease(store)
    assert [lj.job.id for lj in batch.jobs] == ["b"]
    [entry] = batch.aside.quarantined
    assert entry.reason == "its key holds a list, not a job hash"
    assert client.type(pk.job("a")) == b"list"  # not ours to delete


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("kind", b"\xff", "field 'kind' holds b'\\xff', not UTF-8 text"),
        ("timeout", b"0", "field 'timeout' holds b'0', not a positive number"),
        ("timeout", b"nan", "field 'timeout' holds b'nan', not a number"),
        ("max_retries", b"-1", "field 'max_retries' holds b'-1', not an integer >= 0"),
        ("created_at", None, "field 'created_at' is missing"),
        ("h", b"[1]", "field 'h' holds b'[1]', not a JSON object of text headers"),
        ("h", b"{", "field 'h' holds b'{', not a JSON object of text headers"),
    ],
)
async def test_fields_the_client_decodes_are_checked_there_too(
    redis_store: Factory, redis_url: str, field: str, value: bytes | None, reason: str
) -> None:
    """lease.lua passes these through as stored; the client's decoding is total
    and dead-letters the job with its fresh lease instead of handing it out."""
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job("a"), job("bad"), job("c")])
    if value is None:
        client.hdel(pk.job("bad"), field)
    else:
        client.hset(pk.job("bad"), field, value)
    batch = await lease(store)
    assert [lj.job.id for lj in batch.jobs] == ["a", "c"]
    [dead] = batch.aside.dead
    assert dead.id == "bad" and dead.state is JobState.DEAD
    assert dead.last_error == f"damaged record: {reason}"
    assert await counts(store) == {"leased": 2, "dead": 1}


async def test_set_aside_entries_are_replaced_by_more_ready_jobs(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store(default_partitions=4)
    client = redis.Redis.from_url(redis_url)
    await store.enqueue_many([job(f"j{i:02d}") for i in range(40)])
    ks = KeySpace(store.namespace)
    bad = [f"j{i:02d}" for i in range(0, 40, 3)]
    for job_id in bad:
        client.hdel(ks.partition("q", 1, partition_of(job_id, 4)).job(job_id), "payload")
    got = await lease(store, count=20)
    healthy = [f"j{i:02d}" for i in range(40) if f"j{i:02d}" not in bad]
    # a short batch only for want of ready jobs: twenty healthy ones (each
    # partition replaces what it set aside with its own next jobs)
    assert len(got.jobs) == 20 and {lj.job.id for lj in got.jobs} <= set(healthy)
    rest = await lease(store, count=100)
    assert sorted(lj.job.id for lj in [*got.jobs, *rest.jobs]) == healthy
    dead = [j.id for j in [*got.aside.dead, *rest.aside.dead]]
    assert sorted(dead) == bad


# -- record format versioning --------------------------------------------------------------
def snapshot(client: redis.Redis, pk: PartitionKeys, ids: list[str]) -> dict[str, Any]:
    """Each job hash and the indexes that hold it, with scores."""
    zsets = (pk.scheduled, pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead)
    return {i: (client.hgetall(pk.job(i)), [(z, client.zscore(z, i)) for z in zsets]) for i in ids}


async def test_a_newer_format_record_is_never_touched_and_is_reported(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.topology("q")
    past = 1.0
    # one record of the next format in every state, planted as a newer worker would
    # write it (fields an older version would misread, e.g. attempts as JSON)
    newer = {
        "n-ready": "ready", "n-sched": "scheduled", "n-retry": "retry_wait",
        "n-leased": "leased", "n-dead": "dead", "n-done": "succeeded",
    }  # fmt: skip
    for job_id, state in newer.items():
        plant(client, pk, job_id, state, past, v=NEXT, attempts='{"n": 0}',
              lease_token="t2", lease_expires_at="1.0", finished_at="1.0")  # fmt: skip
    before = snapshot(client, pk, list(newer))
    # and healthy ones beside them, in the same states
    await store.enqueue_many([job("h-ready"), job("h-sched", delay=0.05)])
    await trio.sleep(0.1)

    promoted = await store.promote_due(["q"], 100)
    assert promoted.promoted == 1
    assert {e.job_id for e in promoted.aside.newer} == {"n-sched", "n-retry"}
    assert all(f"record format {NEXT} is newer" in e.reason for e in promoted.aside.newer)
    # only the newer records wait: none of them counts as due
    assert promoted.next_due_at is None

    batch = await lease(store, ttl=0.2)
    assert sorted(lj.job.id for lj in batch.jobs) == ["h-ready", "h-sched"]
    assert [e.job_id for e in batch.aside.newer] == ["n-ready"]

    # the newer worker's lease, held with its token: settle and renew refuse it
    theirs = LeaseRef("n-leased", "q", "t2")
    renewed = await store.renew([theirs], 5)
    assert renewed.renewed == (False,) and [e.job_id for e in renewed.aside.newer] == ["n-leased"]
    settled = await store.settle([Settlement(theirs, SettleKind.SUCCEEDED)])
    assert settled.settled == (False,) and [e.job_id for e in settled.aside.newer] == ["n-leased"]

    await trio.sleep(0.3)  # the healthy leases expire too
    recovered = await store.recover_expired(["q"], 100)
    assert sorted(recovered.requeued) == ["h-ready", "h-sched"]
    assert [e.job_id for e in recovered.aside.newer] == ["n-leased"]

    met = store.statistics().newer_met
    assert await store.run_now("n-dead") is False
    assert await store.run_now("n-sched") is False
    assert await store.delete_job("n-done") is False
    assert store.statistics().newer_met == met + 3
    requeued = await store.requeue_dead("q")
    assert requeued.count == 0 and [e.job_id for e in requeued.aside.newer] == ["n-dead"]
    trimmed = await store.trim(["q"], dead_max_age=0, dead_max_count=0)
    assert trimmed.count == 0
    assert {e.job_id for e in trimmed.aside.newer} == {"n-dead", "n-done"}

    assert snapshot(client, pk, list(newer)) == before  # not one field, not one index entry
    shown = await store.get_job("n-ready")
    assert (
        shown is not None
        and f"record format {NEXT} is newer than this version reads ({RECORD_FORMAT})"
        in (shown.damage)
    )


async def test_a_record_without_v_is_format_1(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job("old"), job("later", delay=0.05)])
    for job_id in ("old", "later"):
        assert client.hget(pk.job(job_id), "v") == str(RECORD_FORMAT).encode()
        client.hdel(pk.job(job_id), "v")  # as written before formats were recorded
    old = await store.get_job("old")
    assert old is not None and old.damage == ""
    await trio.sleep(0.1)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    batch = await lease(store)
    assert sorted(lj.job.id for lj in batch.jobs) == ["later", "old"] and not batch.aside
    assert (await store.renew([lj.ref for lj in batch.jobs], 5)).renewed == (True, True)
    assert (
        await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch.jobs])
    ).settled == (
        True,
        True,
    )


# -- topology and leadership records ------------------------------------------------------
async def test_a_damaged_topology_stops_only_its_queue(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store(topology_ttl=0.0)
    client = redis.Redis.from_url(redis_url)
    await store.enqueue_many([job("g", queue="good"), job("b", queue="bad")])
    topology_key = KeySpace(store.namespace).topology
    client.hset(topology_key, "bad", "1:zero:a")
    got = (
        await store.lease(
            [QueueWeight("bad"), QueueWeight("good")], 10, worker_id="w", lease_duration=5
        )
    ).jobs
    assert [lj.job.id for lj in got] == ["g"]
    with pytest.raises(StoreError, match="damaged topology encoding '1:zero:a'"):
        await store.enqueue_many([job("b2", queue="bad")])
    with pytest.raises(TopologyError, match="damaged topology encoding"):
        await store.topology("bad")
    with pytest.raises(TopologyError, match="damaged topology encoding"):
        await store.promote_queue_version("bad", 2, 4)
    assert client.hget(topology_key, "bad") == b"1:zero:a"  # left for an operator
    assert [q.total for q in await store.stats(["good"])] == [1]


async def test_damaged_leadership_records(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    keys = KeySpace(store.namespace).leader("cron")
    lead = await store.acquire_leadership("cron", "a", ttl=30)
    assert lead is not None
    # an expiry nobody can read: nobody can prove the lease is held
    client.hset(keys.lead, "expires_at", "later")
    assert await store.current_leader("cron") is None
    assert await store.renew_leadership("cron", "a", lead.epoch, 30) is False
    taken = await store.acquire_leadership("cron", "b", ttl=30)
    assert taken is not None and taken.epoch == lead.epoch + 1  # the fence still holds
    # an epoch nobody can read: no new epoch is issued (it might repeat one)
    client.hset(keys.lead, mapping={"epoch": "many", "expires_at": "1"})
    with pytest.raises(StoreError, match="field 'epoch' holds b'many', not an integer"):
        await store.acquire_leadership("cron", "c", ttl=30)
    assert client.hget(keys.lead, "epoch") == b"many"


async def test_damaged_trigger_records(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    keys = KeySpace(store.namespace).leader("cron")
    client.hset(keys.pending, mapping={"s@1.0": b"{not json", "t@2.0": b"{}"})
    client.hset(keys.fired, mapping={"s": "yesterday", "u": "5.0"})
    lead = await store.acquire_leadership("cron", "a", ttl=30)
    assert lead is not None  # the pending entries it could not decode did not stop it
    assert client.hlen(keys.pending) == 0
    assert set(client.hkeys(keys.damaged)) == {b"s@1.0", b"t@2.0"}
    assert await store.schedule_last_fired("cron") == {"u": 5.0}
    # an unreadable last-fired time counts as never fired, and is overwritten
    result = await store.enqueue_trigger("cron", lead.epoch, "s", 10.0, job("s@10"))
    assert result is TriggerResult.ENQUEUED
    assert await store.schedule_last_fired("cron") == {"s": 10.0, "u": 5.0}


async def test_healthy_jobs_survive_a_failed_dead_lettering_of_undecodable_ones(
    redis_store: Factory, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job("a"), job("bad")])
    client.hset(pk.job("bad"), "kind", b"\xff")
    adapter = store._adapter
    real = adapter.execute

    async def flaky(ops: Any, after: Any = ()) -> Any:
        if any(op.script is not None and op.script.name == "settle" for op in ops):
            raise StoreError("connection dropped")
        return await real(ops, after)

    monkeypatch.setattr(adapter, "execute", flaky)
    batch = await lease(store, ttl=0.2)
    assert [lj.job.id for lj in batch.jobs] == ["a"] and not batch.aside
    # still leased: recovery takes it back, the next lease dead-letters it
    monkeypatch.setattr(adapter, "execute", real)
    await trio.sleep(0.3)
    assert sorted((await store.recover_expired(["q"], 10)).requeued) == ["a", "bad"]
    again = await lease(store)
    assert [lj.job.id for lj in again.jobs] == ["a"] and [j.id for j in again.aside.dead] == ["bad"]


async def test_the_inspector_refuses_to_run_a_damaged_job(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    await store.enqueue_many([job("p")])
    client.hdel(part(store).job("p"), "payload")
    assert [j.id for j in (await lease(store)).aside.dead] == ["p"]
    inspector = App(store).inspector()
    with pytest.raises(chronos_trio.ActionRefused, match="field 'payload' is missing"):
        await inspector.run_now("p")
    with pytest.raises(chronos_trio.ActionRefused, match="damaged"):
        await inspector.requeue_dead("q", job_id="p")
    assert (await inspector.delete("p")).id == "p"  # deleting is how it is cleared
    assert await store.get_job("p") is None


async def four_partitions(
    redis_store: Factory, redis_url: str
) -> tuple[RedisStore, redis.Redis, KeySpace, list[str]]:
    """A store of 4 partitions with 40 ready jobs (their IDs), a client, the keys."""
    store = await redis_store(default_partitions=4)
    ids = [f"j{i:02d}" for i in range(40)]
    await store.enqueue_many([job(i) for i in ids])
    return store, redis.Redis.from_url(redis_url), KeySpace(store.namespace), ids


async def test_a_key_of_the_wrong_type_stops_only_its_partition(
    redis_store: Factory, redis_url: str
) -> None:
    store, client, ks, ids = await four_partitions(redis_store, redis_url)
    broken = ks.partition("q", 1, 2)
    client.set(broken.leased, "not a zset")  # lease.lua writes it last
    before = client.zrange(broken.ready, 0, -1)
    assert before
    unreadable = ks.partition("q", 1, 1).ready  # the peek reads it first
    client.delete(unreadable)
    client.rpush(unreadable, "x")
    got = await lease(store, count=100)
    assert sorted(lj.job.id for lj in got.jobs) == sorted(
        i for i in ids if partition_of(i, 4) not in (1, 2)
    )
    assert client.zrange(broken.ready, 0, -1) == before  # nothing popped there
    assert all(client.hget(broken.job(i.decode()), "state") == b"ready" for i in before)
    # the same with the only partition of a queue: nothing done, StoreError
    one = await redis_store()
    await one.enqueue_many([job("x", queue="solo")])
    solo = KeySpace(one.namespace).partition("solo", 1, 0)
    client.set(solo.dead, "nope")
    with pytest.raises(StoreError, match="holds a string, not a zset"):
        await lease(one, queue="solo")
    assert await counts(one, "solo") == {"ready": 1}
    # a fencing counter that is not one: nothing done either
    client.delete(solo.dead)
    client.hset(solo.tokens, "not", "a counter")
    with pytest.raises(StoreError, match="is not a counter"):
        await lease(one, queue="solo")
    assert await counts(one, "solo") == {"ready": 1}
    assert client.hget(solo.job("x"), "attempts") == b"0"


async def test_a_key_of_the_wrong_type_stops_only_its_partition_in_one_script(
    redis_store: Factory, redis_url: str
) -> None:
    store, client, ks, ids = await four_partitions(redis_store, redis_url)
    batch = list((await store.lease([QueueWeight("q")], 40, worker_id="w", lease_duration=30)).jobs)
    # one script settles (and promotes) every partition on a single node
    broken = ks.partition("q", 1, 2)
    client.set(broken.retry, "not a zset")
    # partition 2's settlements first: the script comes to it before the others
    batch.sort(key=lambda lj: lj.job.placement != broken.placement)
    retry = [Settlement(lj.ref, SettleKind.RETRY, error="x", retry_delay=0.1) for lj in batch]
    with pytest.raises(StoreError, match=r"partition .*p2"):
        await store.settle(retry)
    states = {lj.job.id: (await store.get_job(lj.job.id)).state for lj in batch}  # type: ignore[union-attr]
    assert {i: s for i, s in states.items() if partition_of(i, 4) == 2} == {
        i: JobState.LEASED for i in ids if partition_of(i, 4) == 2
    }
    assert {s for i, s in states.items() if partition_of(i, 4) != 2} == {JobState.RETRY_WAIT}
    # settling again applies nothing twice (fenced), and partition 2 once fixed
    client.delete(broken.retry)
    again = await store.settle(retry)
    assert again.settled == tuple(lj.job.placement == broken.placement for lj in batch)
    # promote: partition 2's ready zset is broken, the others are promoted
    await trio.sleep(0.2)
    client.set(broken.ready, "not a zset")
    result = await store.promote_due(["q"], 100)
    assert result.promoted == sum(1 for i in ids if partition_of(i, 4) != 2)
    assert client.zcard(broken.retry) == sum(1 for i in ids if partition_of(i, 4) == 2)
    client.close()


async def test_lua_and_python_name_a_damaged_value_alike(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    await store.enqueue_many([job("a")])
    value = b"it's\\\n\t\r\x00\x7f\xff" + b"9" * 50
    client.hset(part(store).job("a"), "attempts", value)
    shown = await store.get_job("a")
    assert shown is not None
    [dead] = (await lease(store)).aside.dead  # the reason is Lua's
    assert dead.last_error == f"damaged record: {shown.damage}"
    assert shown.damage == (
        "field 'attempts' holds b'it\\'s\\\\\\n\\t\\r\\x00\\x7f\\xff"
        + "9" * 29
        + "'... (61 bytes), not an integer >= 0"
    )


# -- the worker reports what the store set aside ------------------------------------------
async def test_a_worker_counts_logs_and_publishes_what_the_store_set_aside(
    redis_store: Factory, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    app = App(store)
    ran: list[str] = []
    hooked: list[str] = []

    @app.task("work")
    async def work(args: Work, job_: JobContext) -> None:
        ran.append(job_.id)

    @app.on_dead_letter
    async def hook(job_: chronos_trio.Job) -> None:
        hooked.append(job_.id)

    await store.enqueue_many([job(f"h{i}") for i in range(8)])
    await store.enqueue_many([job("bad"), job("gone"), job("future")])
    damage(client, pk, "bad", "attempts=x")
    damage(client, pk, "gone", "deleted")
    client.hset(pk.job("future"), "v", str(RECORD_FORMAT + 1))
    async with app.open_worker(queues="q", **TIMING) as worker:
        with trio.fail_after(30):
            await wait_for(lambda: len(ran) == 8 and hooked == ["bad"])
            await trio.sleep(1.0)  # more lease calls meet "future" again
        stats = worker.statistics()
    assert sorted(ran) == [f"h{i}" for i in range(8)]
    assert (stats.damaged, stats.quarantined, stats.newer_skipped) == (1, 1, 1)
    assert stats.dead == 1 and stats.lost == 0 and stats.restarts == {}
    assert caplog.text.count("newer record format: left for a newer worker job=future") == 1, (
        "warned once"
    )
    assert "quarantined job=gone" in caplog.text
    bad = await store.get_job("bad")
    assert bad is not None and bad.state is JobState.DEAD
    assert bad.last_error.startswith("damaged record: field 'attempts'")
    future = await store.get_job("future")
    assert future is not None and future.state is JobState.READY and future.attempts == 0
