"""RedisStore behaviour beyond the conformance suite: layout, scripts, URLs,
fencing, idle waiting, topology caching and stale writers, triggers."""

from __future__ import annotations

import functools
import re
import shutil
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis
import redis.crc
import trio

from chronos_trio import JobState, LeasedJob, NewJob
from chronos_trio.store import (
    QueueWeight,
    SettleKind,
    Settlement,
    StoreError,
    TriggerResult,
    partition_of,
    redact,
)
from chronos_trio.store.redis import RedisStore, _leader, open_store
from chronos_trio.store.redis._connect import connect, split_store_options
from chronos_trio.testing.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]
LUA_DIR = Path(__file__).parent.parent / "chronos_trio" / "store" / "redis" / "lua"


def job(job_id: str, queue: str = "q", **kw: object) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b"\x00\xffraw", **kw)  # type: ignore[arg-type]


async def lease(
    store: RedisStore, queue: str = "q", count: int = 100, ttl: float = 5.0
) -> list[LeasedJob]:
    got = await store.lease([QueueWeight(queue)], count, worker_id="w", lease_duration=ttl)
    return list(got.jobs)


# -- scripts and layout ---------------------------------------------------------------------


def test_every_lua_script_documents_its_keys_and_argv() -> None:
    scripts = sorted(LUA_DIR.glob("*.lua"))
    assert len(scripts) >= 15
    for path in scripts:
        lines = path.read_text().splitlines()
        n_header = next(i for i, line in enumerate(lines) if not line.startswith("--"))
        header, body = "\n".join(lines[:n_header]), "\n".join(lines[n_header:])
        assert header.startswith(f"-- {path.name}:"), path.name
        for kind in ("KEYS", "ARGV"):
            for n in sorted({int(n) for n in re.findall(rf"{kind}\[(\d+)\]", body)}):
                # named one by one, or as a documented per-item stride like ARGV[2+7i ..]
                named = re.search(rf"{kind}\[{n}\]|{kind}\[\d+\+\d+i", header)
                assert named, f"{path.name}: {kind}[{n}] is not named in the header"


async def test_partition_keys_share_one_hash_tag(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store(default_partitions=8)
    await store.enqueue_many([job(f"j{i}") for i in range(40)] + [job("later", delay=60)])
    leased = await lease(store, count=5)
    await store.settle([Settlement(leased[0].ref, SettleKind.DEAD, error="x")])
    await store.settle([Settlement(leased[1].ref, SettleKind.SUCCEEDED, retain_for=60)])
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("*")]
    slots_by_partition: dict[str, set[int]] = {}
    for key in keys:
        tag = re.match(r"\{([^}]*)\}", key)
        assert tag, f"key without hash tag: {key}"
        if ":q:" in tag.group(1):
            slots_by_partition.setdefault(tag.group(1), set()).add(redis.crc.key_slot(key.encode()))
    assert len(slots_by_partition) == 8  # the queue spreads over 8 slots
    assert all(len(slots) == 1 for slots in slots_by_partition.values())
    # a job hash lives under its partition's tag
    j = await store.get_job("j7")
    assert j is not None and store.locate(j.placement) == (1, partition_of("j7", 8))
    assert f"{{chronos:q:q:v1:p{partition_of('j7', 8)}}}:j:j7" in keys
    client.close()


async def test_payload_is_raw_bytes_and_job_fields_round_trip(redis_store: Factory) -> None:
    store = await redis_store()
    payload = bytes(range(256))
    await store.enqueue_many(
        [NewJob(id="b", queue="q", kind="kind", payload=payload, max_retries=7, timeout=2.5)]
    )
    [leased] = await lease(store)
    got = await store.get_job("b")
    assert got is not None and got.payload == payload == leased.job.payload
    assert (got.kind, got.max_retries, got.timeout, got.attempts) == ("kind", 7, 2.5, 1)
    assert got.lease_token == leased.token and got.lease_owner == "w"
    assert got.lease_expires_at == pytest.approx(leased.expires_at)


async def test_tokens_unique_across_partitions_and_calls(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=8)
    other = await redis_store(default_partitions=8)
    await store.enqueue_many([job(f"j{i}") for i in range(200)])
    tokens = []
    for s in (store, other, store, other):
        tokens += [lj.token for lj in await lease(s, count=50)]
    assert len(tokens) == 200 and len(set(tokens)) == 200


async def test_namespaces_are_independent(redis_store: Factory) -> None:
    a = await redis_store(namespace="a")
    b = await redis_store(namespace="b")
    await a.enqueue_many([job("x")])
    assert await b.get_job("x") is None and await b.queues() == []
    assert (await a.get_job("x")) is not None


async def test_noscript_after_script_flush_is_transparent(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    await store.enqueue_many([job("a"), job("b")])
    client = redis.Redis.from_url(redis_url)
    client.script_flush()
    loads = store.statistics().script_loads
    [first] = await lease(store, count=1)
    client.script_flush()
    assert (await store.settle([Settlement(first.ref, SettleKind.SUCCEEDED)])).settled == (True,)
    assert store.statistics().script_loads >= loads + 2
    client.close()


# -- URLs -------------------------------------------------------------------------------------


async def test_url_helpers() -> None:
    assert redact("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    clean, opts = split_store_options("redis://h:1/0?namespace=x&partitions=8&db=2")
    assert opts == {"namespace": "x", "partitions": "8"} and "namespace" not in clean
    assert clean == "redis://h:1/0?db=2"
    # A Unix socket path keeps its empty host (urlunsplit would drop the //).
    assert split_store_options("unix:///run/redis.sock?partitions=4") == (
        "unix:///run/redis.sock",
        {"partitions": "4"},
    )
    with pytest.raises(ValueError, match="scheme"):
        connect("http://h:1")
    with pytest.raises(ValueError, match="unsupported Redis URL"):
        open_store("memory://")
    # a RedisCluster connects when built: the store builds it on first use
    store = RedisStore.from_url("redis+cluster://u:p%40ss@127.0.0.1:1,127.0.0.1:2/")
    with trio.fail_after(10), pytest.raises(StoreError, match=r"u:\*\*\*@"):
        await store.now()
    await store.aclose()


async def test_store_options_in_url(redis_url: str) -> None:
    store = open_store(redis_url.replace("/0", "/0?namespace=ns1&partitions=4"))
    assert isinstance(store, RedisStore) and store.namespace == "ns1"
    try:
        assert (await store.topology("q")).active.partitions == 4
    finally:
        await store.aclose()


async def test_password_and_acl_urls() -> None:
    with RedisServer(extra_args=["--requirepass", "s3cret"]) as server:
        url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
        store = RedisStore.from_url(url)
        await store.enqueue_many([job("a")])
        assert (await store.get_job("a")) is not None
        await store.aclose()
        admin = redis.Redis(port=server.port, password="s3cret")
        admin.acl_setuser("app", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all"])
        admin.close()
        acl = RedisStore.from_url(f"redis://app:pw@127.0.0.1:{server.port}/0")
        assert (await acl.get_job("a")) is not None
        await acl.aclose()
        bad = RedisStore.from_url(f"redis://:wrong@127.0.0.1:{server.port}/0")
        with pytest.raises(StoreError, match=r"\*\*\*"):
            await bad.get_job("a")
        await bad.aclose()


# -- errors ------------------------------------------------------------------------------------


async def test_unreachable_redis_raises_store_error_quickly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        store = RedisStore.from_url(f"redis://127.0.0.1:{port}/0")
        with trio.fail_after(5):
            with pytest.raises(StoreError, match=r"Redis at redis://127\.0\.0\.1"):
                await store.enqueue_many([job("a")])
            with pytest.raises(StoreError):
                await store.wait_ready(["q"], 1.0)
        await store.aclose()


async def test_closed_store_refuses(redis_store: Factory) -> None:
    store = await redis_store()
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.now()


# -- waiting -----------------------------------------------------------------------------------


async def test_wait_ready_wakes_on_enqueue_from_another_store(redis_store: Factory) -> None:
    waiter = await redis_store(default_partitions=4)
    producer = await redis_store(default_partitions=4)
    await producer.enqueue_many([job("first")])  # the queue exists
    await lease(waiter)
    woke_at: list[float] = []

    async def wait() -> None:
        # As the leaser does: wait, then lease; a wake-up whose job is gone
        # only costs one empty lease.
        while True:
            await waiter.wait_ready(["q"], timeout=10)
            if await lease(waiter):
                break
        woke_at.append(trio.current_time())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.3)
            assert not woke_at  # nothing ready: it blocks
            sent = trio.current_time()
            await producer.enqueue_many([job("x")])
    assert woke_at and sent <= woke_at[0] < sent + 0.2


async def test_a_wake_up_seen_before_the_look_costs_no_spurious_return(
    redis_store: Factory,
) -> None:
    """A wake-up written before a wait's look (its job already leased) does
    not end the wait: the look reads the stream's last ID first and blocks
    after it. The held wait of the same task blocks after what it saw."""
    store = await redis_store()
    await store.enqueue_many([job("a")])
    await lease(store)  # the wake-up is on the stream, the job is gone
    with trio.fail_after(5):
        for held in (False, True):
            start = trio.current_time()
            await store.wait_ready(["q"], timeout=0.4, held=held)
            assert trio.current_time() - start >= 0.39, held


async def test_a_held_wait_misses_no_wake_up_sent_after_the_lease(redis_store: Factory) -> None:
    """A held wait does not look, so it blocks from the wake-up IDs its task
    saw before its lease: a slot freed (a job made ready) between that lease
    and the wait still ends it at once. A task that has seen nothing yet
    returns at once instead (its caller leases again)."""
    store = await redis_store()
    producer = await redis_store()
    await producer.enqueue_many([job("warm")])
    await lease(store)
    with trio.fail_after(5):
        start = trio.current_time()
        await store.wait_ready(["q"], timeout=3, held=True)  # nothing seen yet
        assert trio.current_time() - start < 0.2
        await store.wait_ready(["q"], timeout=0.2)  # looks, blocks: seen
        assert await lease(store) == []
        await producer.enqueue_many([job("between")])  # after the lease, before the wait
        start = trio.current_time()
        await store.wait_ready(["q"], timeout=3, held=True)
        assert trio.current_time() - start < 0.2, "the wake-up after the lease was missed"


async def test_a_promoter_skipping_its_look_misses_no_job_scheduled_after_promote(
    redis_store: Factory,
) -> None:
    """Right after promote_due the promoter's wait skips its look; a job
    scheduled between that promote_due and the wait still ends the wait at
    once (its wake-up comes after the IDs the task saw before promoting)."""
    store = await redis_store()
    producer = await redis_store()
    now = await store.now()
    await producer.enqueue_many([job("far", run_at=now + 60)])
    with trio.fail_after(5):
        await store.wait_scheduled(["q"], earlier_than=now + 30, timeout=0.2)  # seen
        result = await store.promote_due(["q"], 10)
        assert result.next_due_at is not None and result.next_due_at >= now + 59
        await producer.enqueue_many([job("soon", delay=5)])
        start = trio.current_time()
        await store.wait_scheduled(["q"], earlier_than=result.next_due_at, timeout=3)
        assert trio.current_time() - start < 0.2, "the job scheduled after promote was missed"


async def test_a_stream_written_anew_behind_the_seen_id_wakes_within_one_block(
    redis_store: Factory, redis_url: str
) -> None:
    """A wake-up stream made again with lower IDs (a restart without
    persistence on a clock behind) is noticed when a block ends empty: the
    waiter is deaf to it for one ``max_block`` at most, not until its timeout."""
    store = await redis_store()
    store._adapter.max_block = 0.3
    await store.enqueue_many([job("warm")])
    await lease(store)
    key = store._ctx.keys.wake_ready("q")
    client = redis.Redis.from_url(redis_url)
    try:
        woke: list[float] = []

        async def wait() -> None:
            await store.wait_ready(["q"], timeout=20)
            woke.append(trio.current_time())

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(1.0)  # blocked after the warm-up's entry, block after block
                assert not woke, "a block that ended empty ended the wait"
                client.delete(key)
                client.xadd(key, {"n": 1}, id="1-1")  # behind the ID it blocks after
                sent = trio.current_time()
        assert woke[0] - sent < 0.3 + 0.3
    finally:
        client.close()


async def test_a_waiter_that_lost_its_last_job_looks_before_it_leases(
    redis_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every waiter sees every wake-up; one whose lease after its last
    wake-up got nothing (another worker took the job) waits a little and
    looks instead of returning: a job another worker takes costs it no
    lease, a job nobody else takes still reaches it within that wait, and
    a lease that gets jobs makes it lease at once again. Just after jobs of
    its own, an empty lease does not make it wait."""
    from chronos_trio.store.redis import _context

    monkeypatch.setattr(_context, "COLD_MIN", 0.3)  # wide enough for a busy machine
    monkeypatch.setattr(_context, "COLD_MAX", 0.6)
    cold, other = await redis_store(), await redis_store()
    await other.enqueue_many([job("warm")])
    await lease(other)

    async def returns_within(seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await cold.wait_ready(["q"], timeout=20)
            return True
        return False

    sent: list[float] = []

    async def enqueue_soon(job_id: str, *, take: bool = False) -> None:
        await trio.sleep(0.1)  # the waiter blocks first
        sent.append(trio.current_time())
        await other.enqueue_many([job(job_id)])
        if take:  # another worker takes it at once
            assert [lj.job.id for lj in await lease(other)] == [job_id]

    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enqueue_soon, "j1")
            assert await returns_within(2)
        assert [lj.job.id for lj in await lease(other)] == ["j1"]
        assert await lease(cold) == []  # lost it: cold now
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(enqueue_soon, "j2", take=True))
            assert not await returns_within(1.0), "returned for a job another took"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enqueue_soon, "j3")  # nobody else takes it
            assert await returns_within(2)
            # its wait: 0.5 to 1 times its cold time (0.3 s here)
            assert 0.1 <= trio.current_time() - sent[-1] < 0.9
        assert [lj.job.id for lj in await lease(cold)] == ["j3"]  # hot again
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enqueue_soon, "j4")
            assert await returns_within(2)
            assert trio.current_time() - sent[-1] < 0.1
        # Right after jobs of its own, a wake-up that finds nothing proves
        # nothing (it may be for a job this waiter took itself): still hot.
        monkeypatch.setattr(_context, "OWN_JOB_GRACE", 5.0)
        assert [lj.job.id for lj in await lease(cold)] == ["j4"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(enqueue_soon, "j5", take=True))
            assert await returns_within(2)
        assert await lease(cold) == []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enqueue_soon, "j6")
            assert await returns_within(2)
            assert trio.current_time() - sent[-1] < 0.1


async def test_a_promotion_the_promoter_slept_for_sends_its_wake_up_in_the_same_round_trip(
    redis_store: Factory, redis_url: str
) -> None:
    """The promoter sleeps until the next due time promote_due reported;
    the promote_due then sends the queue's wake-up after the promotion in
    the same pipeline (an idle leaser wakes a round trip sooner). A
    promotion nobody expected still sends its wake-up, after it."""
    store = await redis_store()
    key = store._ctx.keys.wake_ready("q")
    client = redis.Redis.from_url(redis_url)
    try:
        stats = store._adapter.stats
        with trio.fail_after(5):
            await store.enqueue_many([job("soon", delay=0.3)])
            first = await store.promote_due(["q"], 10)
            assert first.promoted == 0 and first.next_due_at is not None
            await trio.sleep(first.next_due_at - first.now)
            entries, trips = client.xlen(key), stats.round_trips
            assert (await store.promote_due(["q"], 10)).promoted == 1
            assert (stats.round_trips - trips, client.xlen(key) - entries) == (1, 1)
            # nothing was expected of another queue: its wake-up follows
            await store.enqueue_many([job("other", queue="q2", delay=0.05)])
            await trio.sleep(0.1)
            other = store._ctx.keys.wake_ready("q2")
            trips = stats.round_trips
            assert (await store.promote_due(["q2"], 10)).promoted == 1
            assert stats.round_trips - trips == 2 and client.xlen(other) == 1
    finally:
        client.close()


async def test_idle_waiting_costs_few_commands(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store(default_partitions=8)
    await store.enqueue_many([job("later", delay=3600)])
    client = redis.Redis.from_url(redis_url)
    before = int(client.info("stats")["total_commands_processed"])
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.wait_ready, ["q"], 4.0)
            nursery.start_soon(
                lambda: store.wait_scheduled(["q"], earlier_than=time.time() + 60, timeout=4.0)
            )
    used = int(client.info("stats")["total_commands_processed"]) - before - 1
    # one look (8 partitions) per waiter plus a BLPOP every 2 s: far from polling
    assert used <= 40, used
    client.close()


async def test_resume_in_another_process_wakes_waiter(redis_store: Factory) -> None:
    waiter = await redis_store()
    admin = await redis_store()
    await admin.enqueue_many([job("a")])
    await admin.set_paused("q", True)
    await waiter.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=5)  # caches paused
    woke: list[float] = []

    async def wait() -> None:
        await waiter.wait_ready(["q"], timeout=10)
        woke.append(trio.current_time())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.3)
            assert not woke  # a paused queue's ready job does not count
            resumed = trio.current_time()
            await admin.set_paused("q", False)
    assert woke and woke[0] - resumed < 0.3
    [got] = await lease(waiter)  # the waiter re-read the paused flag on wake-up
    assert got.job.id == "a"


async def test_wait_scheduled(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=4)
    producer = await redis_store(default_partitions=4)
    now = await store.now()
    await producer.enqueue_many([job("far", run_at=now + 30)])
    with trio.fail_after(5):
        # already due before the horizon: at once
        start = trio.current_time()
        await store.wait_scheduled(["q"], earlier_than=now + 60, timeout=3)
        assert trio.current_time() - start < 0.2
        # a later job does not wake a promoter whose horizon is earlier
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: store.wait_scheduled(["q"], earlier_than=now + 10, timeout=0.6)
            )
            await trio.sleep(0.1)
            await producer.enqueue_many([job("farther", run_at=now + 40)])
        assert trio.current_time() - start >= 0.55
        # an earlier one does
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: store.wait_scheduled(["q"], earlier_than=now + 10, timeout=3)
            )
            await trio.sleep(0.2)
            await producer.enqueue_many([job("soon", delay=1)])
        assert trio.current_time() - start < 0.6


# -- topology ----------------------------------------------------------------------------------


async def test_other_store_sees_new_version_within_ttl(redis_store: Factory) -> None:
    admin = await redis_store()
    worker = await redis_store(topology_ttl=0.2)
    await admin.enqueue_many([job("v1job")])
    assert [lj.job.id for lj in await lease(worker)] == ["v1job"]
    await admin.promote_queue_version("q", 2, 4)
    await admin.enqueue_many([job("v2job")])
    with trio.fail_after(3):
        while not (got := await lease(worker)):
            await trio.sleep(0.05)
    assert [lj.job.id for lj in got] == ["v2job"]
    where = worker.locate(got[0].job.placement)
    assert where is not None and where[0] == 2


async def test_id_in_draining_version_is_not_enqueued_again(redis_store: Factory) -> None:
    store = await redis_store(default_partitions=2)
    await store.enqueue_many([job("dup", delay=60)])
    await store.promote_queue_version("q", 2, 8)
    [res] = await store.enqueue_many([job("dup")])
    assert not res.created and store.locate(res.placement) == (1, partition_of("dup", 2))
    [stats] = await store.stats(["q"])
    assert stats.total == 1


async def test_stale_writer_is_rerouted_after_completion(redis_store: Factory) -> None:
    admin = await redis_store(default_partitions=2)
    stale = await redis_store(default_partitions=2, topology_ttl=3600)
    await stale.enqueue_many([job("warm")])  # caches v1 as active
    [lj] = await lease(stale)
    await stale.settle([Settlement(lj.ref, SettleKind.SUCCEEDED)])
    await admin.promote_queue_version("q", 2, 4)
    await admin.complete_draining_version("q", 1)
    # the stale writer still believes v1 is active; its partition is closed
    [res] = await stale.enqueue_many([job("late")])
    assert res.created and stale.locate(res.placement) == (2, partition_of("late", 4))
    got = await admin.get_job("late")
    assert got is not None and got.placement == res.placement


# -- triggers ----------------------------------------------------------------------------------


async def test_trigger_left_pending_by_a_crash_is_enqueued_later(
    redis_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await redis_store()
    lead = await store.acquire_leadership("cron", "a", ttl=5)
    assert lead is not None
    real = _leader.enqueue_plan

    def crash(*args: object, **kw: object) -> None:  # the enqueue plan, failing
        raise StoreError("crashed between recording and enqueuing")

    monkeypatch.setattr(_leader, "enqueue_plan", crash)
    with pytest.raises(StoreError):
        await store.enqueue_trigger("cron", lead.epoch, "s", 100.0, job("s@100"))
    assert await store.get_job("s@100") is None
    monkeypatch.setattr(_leader, "enqueue_plan", real)
    # recorded as fired: a retry says so, and enqueues the pending job on the way
    res = await store.enqueue_trigger("cron", lead.epoch, "s", 100.0, job("s@100"))
    assert res is TriggerResult.ALREADY_FIRED
    assert (await store.get_job("s@100")) is not None
    assert (await store.schedule_last_fired("cron")) == {"s": 100.0}


async def test_new_leader_enqueues_pending_triggers(
    redis_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await redis_store()
    lead = await store.acquire_leadership("cron", "a", ttl=0.3)
    assert lead is not None

    def crash(*args: object, **kw: object) -> None:  # the enqueue plan, failing
        raise StoreError("leader died")

    real = _leader.enqueue_plan
    monkeypatch.setattr(_leader, "enqueue_plan", crash)
    with pytest.raises(StoreError):
        await store.enqueue_trigger("cron", lead.epoch, "s", 5.0, job("s@5"))
    monkeypatch.setattr(_leader, "enqueue_plan", real)
    await trio.sleep(0.35)
    successor = await store.acquire_leadership("cron", "b", ttl=5)
    assert successor is not None and successor.epoch == lead.epoch + 1
    got = await store.get_job("s@5")
    assert got is not None and got.state is JobState.READY


async def test_tls_url(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    await trio.run_process(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        capture_stdout=True, capture_stderr=True,
    )  # fmt: skip
    tls_port = free_port()
    tls = ["--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
           "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]  # fmt: skip
    with RedisServer(extra_args=tls):
        url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={cert}"
        store = open_store(url)
        await store.enqueue_many([job("secure")])
        [lj] = await lease(store)  # type: ignore[arg-type]
        assert lj.job.id == "secure" and lj.job.payload == b"\x00\xffraw"
        await store.aclose()


@pytest.mark.parametrize("scripts", ["loaded", "flushed"])
async def test_a_first_job_of_a_queue_the_worker_found_unknown_is_leased_at_once(
    redis_url: str, scripts: str
) -> None:
    """A worker's lease caches a queue that has no topology yet as unknown;
    the first enqueue's wake-up must make it look again (not lease from the
    cached view, find nothing, and wait a whole poll interval). With the
    server's scripts flushed (a restart), the enqueue script is re-run after
    NOSCRIPT, and its wake-up must come after it again, not only before."""
    worker = RedisStore.from_url(redis_url, namespace="first-job")
    producer = RedisStore.from_url(redis_url, namespace="first-job")
    try:
        assert (
            await worker.lease([QueueWeight("new")], 10, worker_id="w", lease_duration=30)
        ).jobs == ()
        await producer.enqueue_many([NewJob("warm", "other", "k", b"{}")])  # scripts loaded
        if scripts == "flushed":
            client = redis.Redis.from_url(redis_url)
            client.script_flush()
            client.close()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def enqueue_soon() -> None:
                    await trio.sleep(0.2)
                    await producer.enqueue_many([NewJob("j1", "new", "k", b"{}")])

                nursery.start_soon(enqueue_soon)
                await worker.wait_ready(["new"], 30.0)
            got = (
                await worker.lease([QueueWeight("new")], 10, worker_id="w", lease_duration=30)
            ).jobs
        assert [lj.job.id for lj in got] == ["j1"]
    finally:
        await worker.aclose()
        await producer.aclose()
