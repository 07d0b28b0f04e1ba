"""RedisStore on a local 3-master Redis Cluster: keys spread over the nodes,
per-node script loading, wake-ups, triggers and an end-to-end worker."""

from __future__ import annotations

import collections
import itertools
from collections.abc import AsyncIterator

import pytest
import redis
import trio

from chronos_trio import NewJob
from chronos_trio.store import (
    QueueWeight,
    SettleKind,
    Settlement,
    StoreError,
    TriggerResult,
    partition_of,
)
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._scripts import SETTLE
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.testing.faketime import FrozenClock, start_cluster
from chronos_trio.testing.redis_server import RedisCluster, RedisUnavailable, in_ci
from tests._support import Recorder, Work, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}", **kw)  # type: ignore[arg-type]


@pytest.fixture
async def store(redis_cluster_url: str) -> AsyncIterator[RedisStore]:
    s = RedisStore.from_url(redis_cluster_url, default_partitions=8)
    yield s
    await s.aclose()


def _node_clients(cluster: RedisCluster) -> list[redis.Redis]:
    return [redis.Redis(port=p) for p in cluster.ports]


async def test_partitions_spread_over_nodes(store: RedisStore, redis_cluster: RedisCluster) -> None:
    await store.enqueue_many([job(f"j{i}") for i in range(200)])
    sizes = [c.dbsize() for c in _node_clients(redis_cluster)]
    assert sum(1 for n in sizes if n > 0) >= 2, sizes
    got = (await store.lease([QueueWeight("q")], 200, worker_id="w", lease_duration=5)).jobs
    assert len(got) == 200 and len({lj.job.placement for lj in got}) == 8
    assert all(
        (await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in got])).settled
    )
    [stats] = await store.stats(["q"])
    assert stats.total == 0


async def test_scripts_reloaded_per_node(store: RedisStore, redis_cluster: RedisCluster) -> None:
    await store.enqueue_many([job(f"a{i}") for i in range(50)])
    loads = store.statistics().script_loads
    for c in _node_clients(redis_cluster):
        c.script_flush()
    got = (await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)).jobs
    assert len(got) == 50
    assert store.statistics().script_loads >= loads + 2  # at least two nodes reloaded


async def test_wake_up_on_cluster(store: RedisStore, redis_cluster_url: str) -> None:
    producer = RedisStore.from_url(redis_cluster_url, default_partitions=8)
    await producer.enqueue_many([job("first")])
    await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=5)
    woke: list[float] = []

    async def wait() -> None:
        while True:  # as the leaser does: a stale wake-up costs one empty lease
            await store.wait_ready(["q"], timeout=10)
            if (await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=5)).jobs:
                break
        woke.append(trio.current_time())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.2)
            assert not woke
            sent = trio.current_time()
            await producer.enqueue_many([job("x")])
    assert woke and woke[0] - sent < 0.3
    await producer.aclose()


async def test_triggers_and_leadership_on_cluster(store: RedisStore) -> None:
    lead = await store.acquire_leadership("cron", "a", ttl=5)
    assert lead is not None
    assert await store.acquire_leadership("cron", "b", ttl=5) is None
    fired = await store.enqueue_trigger("cron", lead.epoch, "s", 10.0, job("s@10"))
    assert fired is TriggerResult.ENQUEUED
    again = await store.enqueue_trigger("cron", lead.epoch, "s", 10.0, job("s@10"))
    assert again is TriggerResult.ALREADY_FIRED
    stale = await store.enqueue_trigger("cron", lead.epoch - 1, "s", 20.0, job("s@20"))
    assert stale is TriggerResult.STALE_EPOCH
    assert await store.get_job("s@10") is not None
    assert await store.schedule_last_fired("cron") == {"s": 10.0}


async def test_worker_end_to_end_on_cluster(store: RedisStore) -> None:
    rec = Recorder(store, max_retries=2)
    n = 300
    await rec.work.enqueue_many([Work(i) for i in range(n)])
    await rec.work.enqueue_many([Work(1000 + i) for i in range(20)], delay=0.3)
    await rec.work.enqueue_many([Work(2000 + i, fail_times=1) for i in range(10)])
    with trio.fail_after(30):
        async with rec.app.open_worker(queues="default", concurrency=32):
            await wait_for(lambda: len(rec.finished) >= n + 30, poll=0.05)
    assert len(rec.finished) == n + 30
    [stats] = await store.stats(["default"])
    assert stats.total == 0


async def test_node_down_raises_store_error_then_recovers(own_redis_cluster: RedisCluster) -> None:
    cluster = own_redis_cluster
    with trio.fail_after(60):
        store = RedisStore.from_url(cluster.url, default_partitions=8)
        await store.enqueue_many([job(f"j{i}") for i in range(50)])
        victim = cluster.nodes[1]
        victim.kill()
        # a batch spanning every node fails as one clear StoreError (no ExceptionGroup)
        with trio.fail_after(20), pytest.raises(StoreError):
            await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)
        victim.start()  # same port and nodes.conf: it takes its slots back (empty)
        with trio.fail_after(30):
            while True:
                try:
                    await store.enqueue_many([job("after")])
                    got = (
                        await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=5)
                    ).jobs
                    break
                except StoreError:
                    await trio.sleep(0.2)
        assert "after" in {lj.job.id for lj in got}
        await store.aclose()


async def test_damaged_records_and_keys_on_cluster(
    store: RedisStore, redis_cluster_url: str
) -> None:
    """Issue 11 on a Cluster: a damaged record is set aside and a partition
    key of the wrong type stops only its partition, whose node runs the
    scripts of the others' partitions too."""
    ids = [f"j{i:02d}" for i in range(40)]
    await store.enqueue_many([job(i) for i in ids])
    host, port = redis_cluster_url.split("://")[1].split(",")[0].split(":")
    client = redis.RedisCluster(host=host, port=int(port))
    ks = KeySpace(store.namespace)
    bad = "j05"
    client.hdel(ks.partition("q", 1, partition_of(bad, 8)).job(bad), "attempts")
    broken = 3 if partition_of(bad, 8) != 3 else 4
    client.set(ks.partition("q", 1, broken).leased, "x")
    got = await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=5)
    expected = [i for i in ids if i != bad and partition_of(i, 8) != broken]
    assert sorted(lj.job.id for lj in got.jobs) == expected
    assert [j.id for j in got.aside.dead] == [bad]
    assert "field 'attempts' is missing" in got.aside.dead[0].last_error
    client.close()


async def test_lease_keeps_due_order_when_one_partition_holds_the_oldest(
    store: RedisStore,
) -> None:
    # The split over partitions comes from a peek at each partition's due
    # times (runs of equal ones), not its entries: still one global order.
    now = await store.now()
    ids = (f"s{i}" for i in itertools.count())
    old = list(itertools.islice((i for i in ids if partition_of(i, 8) == 0), 40))
    rest = [f"r{i}" for i in range(80)]
    await store.enqueue_many([job(i, run_at=now - 100 + n * 0.01) for n, i in enumerate(old)])
    await store.enqueue_many([job(i, run_at=now - 50 + n * 0.01) for n, i in enumerate(rest)])
    with trio.fail_after(20):
        trips = store.statistics().round_trips
        got = (await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)).jobs
        assert [lj.job.id for lj in got] == old + rest[:24]
        # two steps (the peek, the lease scripts), one round trip per node
        # each, and one more: the peek describes 16 entries of each
        # partition (twice an even share of 64), and partition 0, whose
        # share is 40, is peeked again in full
        assert store.statistics().round_trips - trips <= 2 * 3 + 1
        got = (await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)).jobs
        assert [lj.job.id for lj in got] == rest[24:88]


async def test_a_lease_over_distinct_due_times_takes_the_earliest_with_a_short_peek(
    store: RedisStore,
) -> None:
    # 200 jobs of distinct due times over 8 partitions: the peek describes
    # 16 entries of each partition (see test_redis_partitions for the
    # script), no partition holds more than its 16 of the 64 earliest, and
    # the batches are still the earliest in one order
    now = await store.now()
    ids = [f"d{i:03d}" for i in range(200)]
    await store.enqueue_many([job(i, run_at=now - 100 + n * 0.01) for n, i in enumerate(ids)])
    with trio.fail_after(20):
        for start in range(0, 200, 64):
            got = await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)
            assert [lj.job.id for lj in got.jobs] == ids[start : start + 64]


async def test_a_batch_of_one_due_time_is_leased_from_as_few_partitions_as_can_give_it(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    # Ties across partitions may go in any order: one partition after the
    # other, so a drain of enqueue_many batches costs a script or two per
    # lease and per settle instead of one per partition. Each store starts
    # from a partition of its own (random), so concurrent workers spread
    # over the masters; here two are set to start apart.
    ids = [f"t{i}" for i in range(1000)]
    sizes = collections.Counter(partition_of(i, 8) for i in ids)
    assert min(sizes.values()) >= 64
    starts = []
    for rotation in (0, 3):
        redis_cluster.flushall()
        store = RedisStore.from_url(redis_cluster_url, default_partitions=8)
        store._ctx.tie_rotation = rotation
        try:
            with trio.fail_after(20):
                await store.enqueue_many([job(i) for i in ids])  # one due time
                got = (
                    await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)
                ).jobs
                assert len(got) == 64
                [(_, partition)] = {store.locate(lj.job.placement) for lj in got}
                starts.append(partition)
                # the settle script on every master first (in a cluster no test has
                # settled on yet, a NOSCRIPT reload would add commands of its own)
                for node in redis_cluster.nodes:
                    with redis.Redis(port=node.port) as client:
                        client.script_load(SETTLE.source)
                commands = store.statistics().commands
                await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in got])
                assert store.statistics().commands - commands == 1, "one settle script"
                # the rest of that partition's jobs first, then the next partition's
                got = (
                    await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)
                ).jobs
                assert len(got) == 64 and len({lj.job.placement for lj in got}) <= 2
                here = sum(store.locate(lj.job.placement) == (1, partition) for lj in got)
                assert here == sizes[partition] - 64
        finally:
            await store.aclose()
    assert starts[0] != starts[1]


async def test_recover_and_promote_judge_by_the_cluster_clock_after_it_steps() -> None:
    # The peeks of recover_expired and promote_due read each node's own
    # TIME (due_peek.lua): a step of the store's clock far beyond what the
    # client last saw (here 60 s, on a frozen clock that only the test
    # moves) is seen by the very next call, not only once another call has
    # observed the new time.
    clock = FrozenClock()
    try:
        cluster = start_cluster(clock)
    except RedisUnavailable as exc:
        if in_ci():
            pytest.fail(f"libfaketime and Redis are required under CI=true: {exc}")
        pytest.skip(str(exc))
    store = RedisStore.from_url(cluster.url, default_partitions=8)
    try:
        with trio.fail_after(20):
            ids = [f"j{i}" for i in range(16)]
            assert len({partition_of(i, 8) for i in ids}) >= 4
            await store.enqueue_many([job(i) for i in ids])
            await store.enqueue_many([job(f"later{i}", delay=30) for i in range(16)])
            leased = (
                await store.lease([QueueWeight("q")], 16, worker_id="w", lease_duration=10)
            ).jobs
            assert len(leased) == 16
            assert (await store.recover_expired(["q"], 100)).requeued == ()
            assert (await store.promote_due(["q"], 100)).promoted == 0
            clock.advance(60)
            recovered = await store.recover_expired(["q"], 100)
            assert sorted(recovered.requeued) == sorted(ids)
            promoted = await store.promote_due(["q"], 100)
            assert promoted.promoted == 16 and promoted.now == clock.now()
    finally:
        await store.aclose()
        cluster.close()
        clock.close()
