"""Partitions on one Redis node: lease, promote and settle are one script
(one round trip) over every partition of a batch, which keeps one order by
due time across the partitions and never strands a job in a partition that
was empty. (That a broken key stops only its own partition is in
test_redis_damaged.py.)"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, NewJob
from chronos_trio.store import QueueWeight, SettleKind, Settlement, partition_of
from chronos_trio.store.redis import RedisStore

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]
PARTS = 8


def job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}", **kw)  # type: ignore[arg-type]


def ids_in(partition: int, n: int, prefix: str = "j") -> list[str]:
    """``n`` job IDs that hash to ``partition`` (of PARTS)."""
    got = (f"{prefix}{i}" for i in itertools.count())
    return list(itertools.islice((i for i in got if partition_of(i, PARTS) == partition), n))


async def lease(store: RedisStore, count: int = 100) -> list[str]:
    batch = await store.lease([QueueWeight("q")], count, worker_id="w", lease_duration=30)
    return [lj.job.id for lj in batch]


async def test_lease_promote_and_settle_take_one_round_trip_over_8_partitions(
    redis_store: Factory,
) -> None:
    # the topology is read once and cached (a refresh would add a round trip)
    store = await redis_store(default_partitions=PARTS, topology_ttl=3600)
    # warm up: the scripts are loaded (a NOSCRIPT reload is a round trip more)
    await store.enqueue_many([job("warm")])
    warm = await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in warm])
    await store.promote_due(["q"], 1)
    await store.enqueue_many([job(f"r{i}") for i in range(64)])
    await store.enqueue_many([job(f"s{i}", delay=0.1) for i in range(64)])
    assert len({partition_of(f"r{i}", PARTS) for i in range(64)}) == PARTS
    stats = store._adapter.stats
    with trio.fail_after(10):
        before = stats.round_trips
        batch = await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)
        assert len(batch) == 64 and stats.round_trips - before == 1
        before = stats.round_trips
        applied = await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch])
        assert applied == [True] * 64 and stats.round_trips - before == 1
        await trio.sleep(0.15)
        before = stats.round_trips
        result = await store.promote_due(["q"], 100)
        # the promote itself, then the wake-ups for the jobs it made ready
        assert result.promoted == 64 and stats.round_trips - before == 2
        before = stats.round_trips
        assert (await store.promote_due(["q"], 100)).promoted == 0
        assert stats.round_trips - before == 1
        assert await store.settle([]) == [] and stats.round_trips - before == 1


async def test_jobs_come_out_in_due_order_across_partitions(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=PARTS)
    now = await store.now()
    # 24 jobs, due 10 ms apart, over every partition, enqueued latest first
    ids = [f"d{i:02d}" for i in range(24)]
    assert len({partition_of(i, PARTS) for i in ids}) == PARTS
    due = {i: now - 10 + n * 0.01 for n, i in enumerate(ids)}
    await store.enqueue_many([job(i, run_at=due[i]) for i in reversed(ids)])
    order = await lease(store, 1)
    order += await lease(store, 1)
    order += await lease(store, 5)
    order += await lease(store, 3)
    assert order == ids[:10]
    # a batch of one due time in every partition, and one job due just before
    # it in a partition of its own: the early one first, then the batch
    late = [f"t{i}" for i in range(40)]
    await store.enqueue_many([job(i, run_at=now - 5) for i in late])
    [early] = ids_in(3, 1, "early")
    await store.enqueue_many([job(early, run_at=now - 5.001)])
    got = await lease(store, 20)
    assert got == [*ids[10:], early, *sorted(got[15:])] and set(got[15:]) <= set(late)
    assert sorted(got[15:] + await lease(store)) == sorted(late)


async def test_a_deep_backlog_of_distinct_due_times_comes_out_in_due_order(
    redis_store: Factory,
) -> None:
    # deep enough that a lease splits its count in rounds of counts up to a
    # bound (see earliest in lua/_prelude.lua), not one head at a time
    store = await redis_store(default_partitions=PARTS)
    now = await store.now()
    # partition 0 sparse (its jobs 100 s apart), the others dense in between
    due = {i: now - 3000 + 100 * n for n, i in enumerate(ids_in(0, 20, "s"))}
    for p in range(1, PARTS):
        due |= {i: now - 3000 + 3 * n + p * 0.1 for n, i in enumerate(ids_in(p, 80, "d"))}
    ids = sorted(due, key=due.__getitem__)
    await store.enqueue_many([job(i, run_at=due[i]) for i in sorted(due)])
    sizes = [64, 100, 7, 64, 200, 64, 81]  # all 580
    batches = [await lease(store, n) for n in sizes]
    assert [len(b) for b in batches] == sizes
    assert [i for b in batches for i in b] == ids
    # and promote, delayed jobs of distinct due times
    later = [f"c{i:03d}" for i in range(300)]
    await store.enqueue_many([job(i, run_at=now + 0.3 + int(i[1:]) * 0.001) for i in later])
    await trio.sleep(0.7)
    for lo, hi in ((0, 90), (90, 130), (130, 300)):
        assert (await store.promote_due(["q"], hi - lo)).promoted == hi - lo
        assert await lease(store, 500) == later[lo:hi]


async def test_promote_follows_due_order_across_partitions(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=PARTS)
    now = await store.now()
    ids = [f"p{i:02d}" for i in range(24)]
    await store.enqueue_many([job(i, run_at=now + 0.2 + n * 0.001) for n, i in enumerate(ids)])
    await store.enqueue_many([job("later", run_at=now + 60)])
    await trio.sleep(0.3)
    first = await store.promote_due(["q"], 5)
    assert first.promoted == 5 and first.next_due_at is not None
    assert first.next_due_at <= first.now, "more are due: come back at once"
    assert await lease(store) == ids[:5]
    rest = await store.promote_due(["q"], 100)
    assert rest.promoted == 19 and rest.next_due_at == pytest.approx(now + 60)
    assert await lease(store) == ids[5:]


async def test_no_job_is_stranded_in_a_partition_that_was_empty(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=PARTS)
    producer = await redis_store(default_partitions=PARTS)  # another process, say
    first = ids_in(0, 5, "a")
    await producer.enqueue_many([job(i) for i in first])
    assert sorted(await lease(store)) == sorted(first)
    assert await lease(store) == []  # every partition is empty now
    for p in range(1, PARTS):
        [one] = ids_in(p, 1, f"b{p}-")
        await producer.enqueue_many([job(one)])
        assert await lease(store) == [one], f"the job in partition {p} was not leased"
    # the same through a running worker, whose leaser waits on wake-ups: each
    # job, immediate or delayed, in a partition that had nothing, runs promptly
    app = App(store)
    ran: list[str] = []

    @attrs.frozen
    class Nothing:
        pass

    @app.task("mark")
    async def mark(_: Nothing, ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    with trio.fail_after(20):
        async with app.open_worker(queues="default", concurrency=4, poll_interval=30):
            for p, delay in itertools.product(range(PARTS), (0.0, 0.2)):
                [one] = ids_in(p, 1, f"w{delay}-")
                start = trio.current_time()
                await mark.enqueue(Nothing(), job_id=one, delay=delay)
                while one not in ran:
                    await trio.sleep(0.005)
                    assert trio.current_time() - start < 2, f"{one} (partition {p}) stranded"
