"""A plain job's enqueue on one node (``lua/enqueue_plain.lua``, taken by
``store.redis._enqueue_one``) against ``enqueue.lua``, on a real Redis:
the record and zset entry it leaves are those of ``enqueue.lua`` field for
field and in the same order (what any worker, older ones included, reads),
its wake-up is written in the same step, an existing ID is left untouched
and reported as ``enqueue.lua`` reports it, and every caller (the Trio
store, ``SyncProducer``, ``AsyncioProducer``) takes it on a plain node and
a Sentinel's master, never on a Cluster. Which jobs may take it at all is
held in ``test_redis_enqueue_one.py`` (sans-IO)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
import trio

from chronos_trio import NewJob
from chronos_trio.producers.asyncio import AsyncioProducer
from chronos_trio.producers.sync import SyncProducer
from chronos_trio.store import StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis import _scripts as S
from chronos_trio.store.redis._batch import AdapterStatistics
from chronos_trio.store.redis._enqueue import enqueue_plan
from chronos_trio.store.redis._enqueue_one import enqueue_one_plan
from chronos_trio.store.redis._errors import NoScript
from chronos_trio.store.redis._scripts import Op
from chronos_trio.store.redis._transport import Send, reload_node_plan
from chronos_trio.store.redis.keys import WAKE_KEEP, KeySpace
from tests._redis_fixtures import StoreFactory

#: A due time or creation time as the scripts write it (``%.17g`` of TIME).
_TIME = re.compile(rb"^\d{10}(\.\d{1,7})?$")


def _job(job_id: str, **fields: Any) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"\x00\xffraw \xe2\x82\xac", **fields)


def _evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def _scripts_run(client: redis.Redis) -> list[bytes]:
    """The SHAs of the scripts Redis ran, oldest first (from the slow log,
    which logs every call here)."""
    words = [entry["command"].split() for entry in client.slowlog_get(10_000)]
    # each once: a first call's NOSCRIPT reply and its call again, one
    return list(dict.fromkeys(w[1] for w in reversed(words) if w[0].upper() == b"EVALSHA"))


async def _light(store: RedisStore, job: NewJob) -> Any:
    """``job`` stored by the one-job plan; asserts it took enqueue_plain.lua."""
    ctx = store._ctx
    await ctx.meta([job.queue])  # cached: the one-job plan's own path
    assert ctx.one_node
    return await ctx.run(enqueue_one_plan(ctx, job))


async def _full(store: RedisStore, job: NewJob) -> Any:
    """``job`` stored by the batch plan: enqueue.lua and its separate wake-up."""
    return await store._ctx.run(enqueue_plan(store._ctx, [job]))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"headers": (("trace", "abc"), ("x", "\u00e9"))},
        {"max_retries": 0, "timeout": 0.5},
        {"delay": -3.0},  # due now, as no delay
    ],
    ids=["defaults", "headers", "options", "negative delay"],
)
async def test_a_plain_job_is_stored_as_enqueue_lua_stores_it(
    redis_store: StoreFactory, redis_url: str, options: dict[str, Any]
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 10_000)
    try:
        with trio.fail_after(10):
            await store.enqueue_many([_job("warm")])  # the topology, cached
            client.slowlog_reset()
            [light] = await _light(store, _job("light", **options))
            [full] = await _full(store, _job("full", **options))
        assert _scripts_run(client) == [S.ENQUEUE_PLAIN.sha.encode(), S.ENQUEUE.sha.encode()]
        assert (light.created, full.created) == (True, True)
        assert light.placement == full.placement
        prefix = store._ctx.keys.partition("q", 1, 0)
        a = client.hgetall(prefix.job("light"))
        b = client.hgetall(prefix.job("full"))
        # the same fields in the same order, the same values but for the times
        assert list(a) == list(b)
        times = (b"run_at", b"created_at")
        assert {k: v for k, v in a.items() if k not in times} == {
            k: v for k, v in b.items() if k not in times
        }
        for record, result in ((a, light), (b, full)):
            assert _TIME.match(record[b"run_at"]) and record[b"run_at"] == record[b"created_at"]
            assert float(record[b"run_at"]) == result.run_at
            assert record[b"state"] == b"ready"
        assert client.object("encoding", prefix.job("light")) == client.object(
            "encoding", prefix.job("full")
        )
        scores = dict(client.zrange(prefix.ready, 0, -1, withscores=True))
        assert scores[b"light"] == light.run_at and scores[b"full"] == full.run_at
        assert client.zscore(prefix.scheduled, "light") is None
    finally:
        client.close()


async def test_a_plain_job_wakes_idle_leasers_in_its_own_round_trip(
    redis_store: StoreFactory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    key = store._ctx.keys.wake_ready("q")
    try:
        with trio.fail_after(10):
            await store.enqueue_many([_job("warm")])
            # a waiter blocked on the stream (as an idle leaser is) wakes
            last = client.xrevrange(key, count=1)[0][0]
            got: list[Any] = []

            def block() -> None:
                reader = redis.Redis.from_url(redis_url)
                try:
                    got.extend(reader.xread({key: last}, block=5000))
                finally:
                    reader.close()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, block)
                await trio.sleep(0.2)  # the reader is blocked by now
                trips, entries = store._adapter.stats.round_trips, client.xlen(key)
                await _light(store, _job("new"))
                assert store._adapter.stats.round_trips - trips == 1
                assert client.xlen(key) - entries == 1
        [(_, [(_, fields)])] = got
        assert fields == {b"n": b"1"}
        # the job was in the ready zset before its wake-up was written (one step)
        assert client.zscore(store._ctx.keys.partition("q", 1, 0).ready, "new") is not None
    finally:
        client.close()


async def test_an_existing_id_is_left_untouched_and_reported_as_enqueue_lua_does(
    redis_store: StoreFactory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    prefix = store._ctx.keys.partition("q", 1, 0)
    wake = store._ctx.keys.wake_ready("q")
    try:
        with trio.fail_after(10):
            [first] = await _light(store, _job("dup"))
            before = client.hgetall(prefix.job("dup"))
            entries = client.xlen(wake)
            [again] = await _light(store, _job("dup", headers=(("h", "v"),)))
            [full] = await _full(store, _job("dup"))
            assert (again.created, again.job_id, again.run_at) == (False, "dup", first.run_at)
            assert (full.created, full.run_at) == (again.created, again.run_at)
            assert client.hgetall(prefix.job("dup")) == before
            assert client.xlen(wake) == entries + 1  # enqueue.lua's wake-up only
            # a damaged record without a due time: '' as enqueue.lua says it
            client.hdel(prefix.job("dup"), "run_at")
            [light] = await _light(store, _job("dup"))
            [full] = await _full(store, _job("dup"))
            assert (light.created, light.run_at) == (full.created, full.run_at) == (False, 0.0)
            client.hset(prefix.job("dup"), "run_at", "0x10")  # Lua reads it, Python does not
            [light] = await _light(store, _job("dup"))
            [full] = await _full(store, _job("dup"))
            assert (light.created, light.run_at) == (full.created, full.run_at) == (False, 0.0)
            # a key of another type under the ID: left alone too
            client.delete(prefix.job("dup"))
            client.set(prefix.job("dup"), "junk")
            [light] = await _light(store, _job("dup"))
            assert (light.created, light.run_at) == (False, 0.0)
            assert client.get(prefix.job("dup")) == b"junk"
    finally:
        client.close()


async def test_a_closed_partition_sends_a_plain_job_the_long_way(
    redis_store: StoreFactory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(10):
            await store.enqueue_many([_job("warm")])
            # a version completed under a stale cache: enqueue.lua's closed marker
            client.set(store._ctx.keys.partition("q", 1, 0).closed, "1")
            with pytest.raises(StoreError, match="topology kept changing"):
                await _light(store, _job("late"))
            assert not client.exists(store._ctx.keys.partition("q", 1, 0).job("late"))
    finally:
        client.close()


async def test_the_wake_up_stream_stays_bounded(redis_store: StoreFactory, redis_url: str) -> None:
    """Trimmed approximately: at least WAKE_KEEP entries, at most about a
    stream node (100 entries by default) more."""
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(20):
            for i in range(400):
                await store.enqueue_many([_job(f"j{i}")])
        assert WAKE_KEEP <= client.xlen(store._ctx.keys.wake_ready("q")) <= WAKE_KEEP + 101
    finally:
        client.close()


def test_the_sync_producer_takes_it_on_a_plain_node(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        with SyncProducer(redis_url) as producer:
            producer.enqueue("k", b"first")  # reads the topology
            wake = "{chronos:wake}:stream:ready:default"
            calls, entries = _evalsha_calls(client), client.xlen(wake)
            handle = producer.enqueue("k", b"x", headers={"h": "v"})
            assert producer._p.core.one_node
            assert _evalsha_calls(client) == calls + 1
            assert client.xlen(wake) == entries + 1
        record = client.hgetall(f"{{chronos:q:default:v1:p0}}:j:{handle.job_id}")
        assert record[b"h"] == b'{"h":"v"}' and record[b"state"] == b"ready"
    finally:
        client.close()


def test_the_asyncio_producer_takes_it_on_a_plain_node(redis_url: str) -> None:
    import asyncio

    async def main() -> bool:
        async with AsyncioProducer(redis_url) as producer:
            await producer.enqueue("k", b"x")
            await producer.enqueue("k", b"y")
            return producer._p.core.one_node

    assert asyncio.run(main())


async def test_a_sentinel_master_takes_it(redis_sentinel_url: str) -> None:
    store = RedisStore.from_url(redis_sentinel_url)
    try:
        with trio.fail_after(10):
            await store.enqueue_many([_job("warm")])
            [result] = await _light(store, _job("plain"))
            assert result.created
    finally:
        await store.aclose()


async def test_a_cluster_never_takes_it(redis_cluster_url: str) -> None:
    store = RedisStore.from_url(redis_cluster_url)
    try:
        with trio.fail_after(20):
            for i in range(3):
                [result] = await store.enqueue_many([_job(f"c{i}")])
                assert result.created
            assert not store._ctx.one_node  # enqueue.lua and its separate wake-up
    finally:
        await store.aclose()


def test_a_script_missing_again_after_its_load_is_loaded_once_more() -> None:
    """A Sentinel master demoted between a script's load and its run: the
    load reached the old master, the run was refused there (READONLY) and
    sent to the new one, which never saw the script (NOSCRIPT again). The
    script is loaded once more, where the node now sends, and run again; a
    third NOSCRIPT is the caller's error (sans-IO: the transport's steps,
    answered here)."""
    pk = KeySpace("t").partition("q", 1, 0)
    op = Op(pk.ready, ("EVALSHA", S.ENQUEUE_PLAIN.sha, 0), S.ENQUEUE_PLAIN)
    for answers, want in [
        ([NoScript("NOSCRIPT"), b"1.5"], b"1.5"),
        ([NoScript("NOSCRIPT"), NoScript("NOSCRIPT")], "error"),
    ]:
        stats = AdapterStatistics()
        plan = reload_node_plan("node", [op], [NoScript("NOSCRIPT")], stats)
        sent: list[list[Any]] = []
        step = next(plan)
        replies = iter(answers)
        with pytest.raises(StopIteration) as done:
            while True:
                assert isinstance(step, Send)
                sent.append([c[0] for c in step.commands])
                step = plan.send([b"sha"] if step.commands[0][0] == "SCRIPT" else [next(replies)])
        assert sent == [["SCRIPT"], ["EVALSHA"], ["SCRIPT"], ["EVALSHA"]]
        assert stats.script_loads == 2
        [reply] = done.value.value
        if want == "error":
            assert isinstance(reply, redis.exceptions.NoScriptError)
        else:
            assert reply == want
