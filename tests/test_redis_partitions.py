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
import redis as redis_py
import trio

from chronos_trio import App, JobContext, NewJob
from chronos_trio.store import QueueWeight, RecoverResult, SettleKind, Settlement, partition_of
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing.redis_server import RedisServer, call

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
    batch = (await store.lease([QueueWeight("q")], count, worker_id="w", lease_duration=30)).jobs
    return [lj.job.id for lj in batch]


async def test_lease_promote_and_settle_take_one_round_trip_over_8_partitions(
    redis_store: Factory,
) -> None:
    # the topology is read once and cached (a refresh would add a round trip)
    store = await redis_store(default_partitions=PARTS, topology_ttl=3600)
    # warm up: the scripts are loaded (a NOSCRIPT reload is a round trip more)
    await store.enqueue_many([job("warm")])
    warm = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in warm])
    await store.promote_due(["q"], 1)
    await store.enqueue_many([job(f"r{i}") for i in range(64)])
    await store.enqueue_many([job(f"s{i}", delay=0.1) for i in range(64)])
    assert len({partition_of(f"r{i}", PARTS) for i in range(64)}) == PARTS
    stats = store._adapter.stats
    with trio.fail_after(10):
        before = stats.round_trips
        batch = (await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)).jobs
        assert len(batch) == 64 and stats.round_trips - before == 1
        before = stats.round_trips
        applied = await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch])
        assert applied.settled == (True,) * 64 and stats.round_trips - before == 1
        await trio.sleep(0.15)
        before = stats.round_trips
        result = await store.promote_due(["q"], 100)
        # the promote itself, then the wake-ups for the jobs it made ready
        assert result.promoted == 64 and stats.round_trips - before == 2
        before = stats.round_trips
        assert (await store.promote_due(["q"], 100)).promoted == 0
        assert stats.round_trips - before == 1
        assert (await store.settle([])).settled == () and stats.round_trips - before == 1


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
    # bound (see lua/lib/earliest.lua), not one head at a time
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
    # due from a fresh now: under load the leases above may take past 0.3 s,
    # and jobs due in the past would be stored ready, leaving nothing to promote
    now = await store.now()
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


def _commandstats(port: int) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO commandstats:
    what Redis executed, commands run inside scripts included), without
    this helper's own INFO and CONFIG calls."""
    text = call(port, "INFO", "commandstats").decode()
    calls = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line.removeprefix("cmdstat_").partition(":")
            calls[name] = int(fields.split(",")[0].removeprefix("calls="))
    return {k: v for k, v in calls.items() if k not in ("info", "config|resetstat")}


async def test_idle_looks_cost_one_exists_over_8_partitions() -> None:
    """An idle worker's periodic looks (recovery every few seconds, a lease
    and a promote per poll interval, the ready-waiter's look) each cost one
    round trip and, in Redis, one EXISTS over every partition's zsets, not
    a read per partition (INFO commandstats counts the commands run inside
    scripts too)."""
    # A private server, so INFO commandstats counts this store's commands only.
    with RedisServer() as server, trio.fail_after(30):
        store = RedisStore.from_url(server.url, default_partitions=PARTS, topology_ttl=3600)
        try:
            ids = [i for p in range(PARTS) for i in ids_in(p, 2, "idle")]
            await store.enqueue_many([job(i) for i in ids])
            batch = (
                await store.lease([QueueWeight("q")], 64, worker_id="w", lease_duration=30)
            ).jobs
            assert len(batch) == len(ids)
            stats = store._adapter.stats
            await store.recover_expired(["q"], 256)  # warm up: the script is loaded
            await store.promote_due(["q"], 10)
            # leases held, none expired: one command, one round trip
            before = (stats.round_trips, stats.commands)
            assert await store.recover_expired(["q"], 256) == RecoverResult()
            assert (stats.round_trips - before[0], stats.commands - before[1]) == (1, 1)
            await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch])
            # the settle of a partition's last lease dropped its leased zset (the sentinel alone)
            pks = [store._ctx.keys.partition("q", 1, p) for p in range(PARTS)]
            assert call(server.port, "EXISTS", *(pk.leased for pk in pks)) == 0
            call(server.port, "CONFIG", "RESETSTAT")
            before = (stats.round_trips, stats.commands)
            passes = 5
            for _ in range(passes):
                assert await store.recover_expired(["q"], 256) == RecoverResult()
            assert stats.round_trips - before[0] == passes
            assert stats.commands - before[1] == passes, "one command per pass, not per partition"
            calls = _commandstats(server.port)
            # per pass: the EVALSHA and, inside it, one EXISTS over the 8 leased zsets
            assert calls == {"evalsha": passes, "exists": passes}, calls
            call(server.port, "CONFIG", "RESETSTAT")
            assert await lease(store) == []
            assert _commandstats(server.port) == {"evalsha": 1, "exists": 1}
            call(server.port, "CONFIG", "RESETSTAT")
            assert (await store.promote_due(["q"], 10)).promoted == 0
            assert _commandstats(server.port) == {"evalsha": 1, "time": 1, "exists": 1}
            call(server.port, "CONFIG", "RESETSTAT")
            with trio.move_on_after(0.2):
                await store.wait_ready(["q"], timeout=0.1)
            # the wake-up stream's last ID read in the look's pipeline, then the block
            assert _commandstats(server.port) == {"xrevrange": 1, "exists": 1, "xread": 1}
            # a lease writes its partition's sentinel again, first (skiplist from the start)
            await store.enqueue_many([job("again")])
            assert await lease(store, 1) == ["again"]
            pk = pks[partition_of("again", PARTS)]
            assert call(server.port, "OBJECT", "ENCODING", pk.leased) == b"skiplist"
            assert call(server.port, "ZCARD", pk.leased) == 2
        finally:
            await store.aclose()


async def test_recovery_peek_drops_a_leased_zset_left_with_the_sentinel_alone(
    redis_store: Factory, redis_server: RedisServer
) -> None:
    # recover.lua leaves the sentinel behind; the next peek drops it
    store = await redis_store(default_partitions=PARTS)
    ids = ids_in(2, 3, "gone")
    with trio.fail_after(20):
        await store.enqueue_many([job(i) for i in ids])
        assert len(await lease(store)) == 3
        pk = store._ctx.keys.partition("q", 1, 2)
        # lease expired: make it so by the store's clock, without waiting
        for i in ids:
            call(redis_server.port, "ZADD", pk.leased, "1", i)
        got = await store.recover_expired(["q"], 256)
        assert sorted(got.requeued) == sorted(ids)
        assert call(redis_server.port, "ZCARD", pk.leased) == 1  # the sentinel
        assert await store.recover_expired(["q"], 256) == RecoverResult()
        assert call(redis_server.port, "EXISTS", pk.leased) == 0
        # a damaged leased zset of one member that is not the sentinel stays
        call(redis_server.port, "ZADD", pk.leased, "+inf", "not-the-sentinel")
        assert await store.recover_expired(["q"], 256) == RecoverResult()
        assert call(redis_server.port, "ZCARD", pk.leased) == 1
        assert sorted(await lease(store)) == sorted(ids), "none lost"


async def test_recovery_over_8_partitions_takes_the_earliest_expired_first(
    redis_store: Factory,
) -> None:
    store = await redis_store(default_partitions=PARTS)
    early = [i for p in range(PARTS) for i in ids_in(p, 2, "early")]
    late = [i for p in range(PARTS) for i in ids_in(p, 2, "late")]
    other = ids_in(5, 3, "other")
    with trio.fail_after(20):
        # short leases in two waves a little apart, and a second queue's
        await store.enqueue_many([job(i) for i in early])
        first = (await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=0.3)).jobs
        await trio.sleep(0.05)
        await store.enqueue_many([job(i) for i in late])
        second = (
            await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=0.3)
        ).jobs
        await store.enqueue_many([NewJob(id=i, queue="r", kind="k", payload=b"{}") for i in other])
        third = (await store.lease([QueueWeight("r")], 100, worker_id="w", lease_duration=0.3)).jobs
        assert (len(first), len(second), len(third)) == (len(early), len(late), len(other))
        assert await store.recover_expired(["q", "r"], 256) == RecoverResult(), "none expired"
        await trio.sleep(0.5)
        # the limit goes to queue q first, earliest expiries first across its partitions
        got = await store.recover_expired(["q", "r"], len(early) + 3)
        assert len(got.requeued) == len(early) + 3
        assert set(early) <= set(got.requeued) and len(set(got.requeued) & set(late)) == 3
        rest = await store.recover_expired(["q", "r"], 256)
        assert sorted([*got.requeued, *rest.requeued]) == sorted(early + late + other)
        assert await store.recover_expired(["q", "r"], 256) == RecoverResult()
        # none lost: every job is ready again
        queues = [QueueWeight("q"), QueueWeight("r")]
        back = (await store.lease(queues, 100, worker_id="w", lease_duration=30)).jobs
        assert sorted(lj.job.id for lj in back) == sorted(early + late + other)


def test_the_lease_peek_stops_at_its_cap_and_says_so(redis_server: RedisServer) -> None:
    # peek_ready.lua's ARGV[3]: distinct due times are read no further than
    # the cap (each costs a formatted score), and the reply's first entry
    # says whether entries may follow; runs counted first may go past it
    from chronos_trio.store.redis._scripts import PEEK_READY

    r = redis_py.Redis(port=redis_server.port)
    key = "{peekcap}:ready"
    r.delete(key)
    r.zadd(key, {f"j{i:03d}": 1000 + i for i in range(100)})

    def peek(*argv: int) -> list[object]:
        return list(r.eval(PEEK_READY.source, 1, key, *argv))

    assert peek(64, 0, 16) == [
        1,
        *itertools.chain.from_iterable((b"%d" % (1000 + i), 1) for i in range(16)),
    ]
    assert peek(64, 90, 16) == [
        0,
        *itertools.chain.from_iterable((b"%d" % (1090 + i), 1) for i in range(10)),
    ]
    assert peek(8)[0] == 0 and len(peek(8)) == 1 + 2 * 8
    r.delete(key)
    r.zadd(key, {f"j{i:03d}": 5 for i in range(100)})
    assert peek(64, 0, 16) == [0, b"5", 64]  # one run of 64: counted, not read
    r.delete(key)
    r.zadd(key, {f"j{i:03d}": 5 + i // 10 for i in range(100)})
    # four runs of 10 counted past the cap of 16, then nothing more read
    assert peek(64, 0, 16) == [1, b"5", 10, b"6", 10, b"7", 10, b"8", 10]
    r.close()
