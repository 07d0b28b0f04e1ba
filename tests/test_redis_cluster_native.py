"""Trio-native round trips on a Redis Cluster (``store.redis._cluster``): no
thread hop per batch, slot migrations followed (``MOVED`` after one, ``ASK``
during one) without losing or repeating an op, and a dead or hung master
failing batches with StoreError in bounded time, then recovered from."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.cluster
import trio
from redis.crc import key_slot

from chronos_trio import NewJob
from chronos_trio.store import QueueWeight, SettleKind, Settlement, StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis import _scripts as S
from chronos_trio.store.redis._cluster import NativeCluster
from chronos_trio.store.redis._scripts import Op
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.testing.redis_server import RedisCluster, RedisServer, call
from tests._support import Recorder, Work, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


def native_cluster(store: RedisStore) -> NativeCluster:
    cluster = store._adapter._native_cluster
    assert cluster is not None, "the batches went through redis-py in threads"
    return cluster


@pytest.fixture
def own_cluster(own_redis_cluster: RedisCluster) -> RedisCluster:
    """A cluster of this test's own: its slots get moved, or a node killed."""
    return own_redis_cluster


class ThreadHops:
    """Counts ``trio.to_thread.run_sync`` calls by the name of the function run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        real = trio.to_thread.run_sync

        async def counting(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
            self.calls[getattr(fn, "__name__", repr(fn))] += 1
            return await real(fn, *args, **kw)

        monkeypatch.setattr(trio.to_thread, "run_sync", counting)


# -- the native path ----------------------------------------------------------------------


@pytest.mark.parametrize("native", [True, False])
async def test_a_drain_on_the_cluster_hops_to_no_thread(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    store = RedisStore.from_url(redis_cluster_url, default_partitions=8, native=native)
    rec = Recorder(store)
    n = 400
    with trio.fail_after(60):
        await rec.work.enqueue_many([Work(i) for i in range(n)])
        hops = ThreadHops(monkeypatch)
        before = store._adapter.stats.native_round_trips
        async with rec.app.open_worker(queues="default", concurrency=32):
            await wait_for(lambda: len(rec.finished) >= n, poll=0.05)
    assert len(rec.finished) == n and max(rec.finished.values()) == 1
    trips = store._adapter.stats.native_round_trips - before
    if native:
        native_cluster(store)
        # Only the idle waits (XREAD BLOCK) take a thread; every batch went over Trio sockets.
        assert set(hops.calls) <= {"blocking_read"}, hops.calls
        assert trips > 3 * 8  # leases and settles of 8 partitions over 3 masters
    else:  # the seam the assertion above relies on: this path shows up
        assert store._adapter._native_cluster is None
        assert hops.calls["_run_on_node"] > 3 * 8 and trips == 0
    [stats] = await store.stats(["default"])
    assert stats.total == 0
    await store.aclose()


async def test_a_cluster_client_with_a_connect_hook_keeps_the_threads(
    redis_cluster: RedisCluster, redis_cluster_url: str
) -> None:
    """The native path cannot run a connect hook: such a client (like TLS)
    goes through redis-py in threads, hook and all."""
    hooked: list[object] = []

    def make() -> redis.cluster.RedisCluster:
        nodes = [redis.cluster.ClusterNode("127.0.0.1", p) for p in redis_cluster.ports]
        return redis.cluster.RedisCluster(
            startup_nodes=nodes, redis_connect_func=hooked.append, protocol=2
        )

    store = RedisStore(make, default_partitions=8)
    with trio.fail_after(20):
        await store.enqueue_many([job(f"j{i}") for i in range(20)])
        got = (await store.lease([QueueWeight("q")], 20, worker_id="w", lease_duration=5)).jobs
    assert len(got) == 20 and hooked
    assert store._adapter._native_cluster is None
    await store.aclose()


# -- every master at once ------------------------------------------------------------------


def spread_keys(cluster: RedisCluster, tag: str) -> list[str]:
    """Keys of ``tag``, at least one owned by each master of ``cluster``."""
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < len(cluster.nodes):
        key = f"{{{tag}{i}}}:k"
        keys.setdefault(owner_of(cluster, key_slot(key.encode())).port, key)
        i += 1
    return list(keys.values())


class Nurseries:
    """Counts the nurseries the store's adapter opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened = 0
        real = trio.open_nursery

        def counting(*args: Any, **kw: Any) -> Any:
            self.opened += 1
            return real(*args, **kw)

        monkeypatch.setattr(trio, "open_nursery", counting)


async def test_a_batch_over_every_master_takes_no_task_per_master(
    redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every master has an idle connection, a batch over all of them is
    written to each before any reply is waited for, with no task (no
    nursery) per master: the same replies, one round trip per master."""
    store = RedisStore.from_url(redis_cluster.url, namespace="every")
    keys = spread_keys(redis_cluster, "every")
    with trio.fail_after(30):
        adapter = store._adapter
        await adapter.execute([Op.command(k, "DEL", k) for k in keys])  # connects to each
        native_cluster(store)
        nurseries = Nurseries(monkeypatch)
        trips = adapter.stats.round_trips
        got = await adapter.execute([Op.command(k, "INCRBY", k, i + 1) for i, k in enumerate(keys)])
        assert got == [i + 1 for i in range(len(keys))]
        assert adapter.stats.round_trips == trips + len(keys)
        assert nurseries.opened == 0
    await store.aclose()


async def test_a_batch_over_every_master_goes_on_after_dead_connections_and_noscript(
    redis_cluster: RedisCluster,
) -> None:
    """The batch that writes to every master before waiting keeps the
    guarantees of one round trip per master: pooled connections the masters
    closed are replaced and the batch sent once more (it never ran), and
    scripts the masters lost are loaded and the ops that got NOSCRIPT run
    again, each op once."""
    store = RedisStore.from_url(redis_cluster.url, namespace="again")
    keys = spread_keys(redis_cluster, "again")
    script = S.PEEK_READY  # reads one zset: the ops' own keys, empty
    with trio.fail_after(30):
        adapter = store._adapter
        await adapter.execute([Op.command(k, "DEL", k) for k in keys])
        for node in redis_cluster.nodes:  # every pooled connection dies under the store
            call(node.port, "CLIENT", "KILL", "TYPE", "normal")
        got = await adapter.execute([Op.command(k, "INCR", k) for k in keys])
        assert got == [1] * len(keys)  # each ran once, on a new connection
        for node in redis_cluster.nodes:
            call(node.port, "SCRIPT", "FLUSH")
        loads = adapter.stats.script_loads
        got = await adapter.execute(
            [Op.script_call(script, [f"{k}:z"], [5]) for k in keys]
            + [Op.command(k, "INCR", k) for k in keys]
        )
        assert got == [[0]] * len(keys) + [2] * len(keys)  # an empty zset's peek: no runs
        assert adapter.stats.script_loads == loads + len(keys)
    await store.aclose()


# -- slot migrations ----------------------------------------------------------------------


def node_id(port: int) -> str:
    reply = call(port, "CLUSTER", "MYID")
    assert isinstance(reply, bytes)
    return reply.decode()


def owner_seen_by(node: RedisServer, slot: int) -> int | None:
    """The port of the master owning ``slot`` in ``node``'s view."""
    for start, end, master, *_ in call(node.port, "CLUSTER", "SLOTS"):
        if start <= slot <= end:
            return int(master[1])
    return None


def owner_of(cluster: RedisCluster, slot: int) -> RedisServer:
    port = owner_seen_by(cluster.nodes[0], slot)
    return next(n for n in cluster.nodes if n.port == port)


def begin_migration(cluster: RedisCluster, slot: int, dst: RedisServer) -> RedisServer:
    src = owner_of(cluster, slot)
    assert call(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(src.port)) == b"OK"
    assert call(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(dst.port)) == b"OK"
    return src


def finish_migration(cluster: RedisCluster, slot: int, src: RedisServer, dst: RedisServer) -> None:
    """Move the slot's keys from ``src`` to ``dst`` and hand it over (as
    ``redis-cli --cluster reshard`` does)."""
    while keys := call(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 1000):
        names = [k.decode() for k in keys]  # (call() sends str(arg))
        moved = call(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *names)
        assert moved == b"OK", moved
    for node in (dst, src, *cluster.nodes):
        call(node.port, "CLUSTER", "SETSLOT", slot, "NODE", node_id(dst.port))
    deadline = time.monotonic() + 10
    while any(owner_seen_by(node, slot) != dst.port for node in cluster.nodes):
        assert time.monotonic() < deadline, "the nodes did not agree on the new owner"
        time.sleep(0.05)


def move_slot(cluster: RedisCluster, slot: int) -> tuple[RedisServer, RedisServer]:
    src = owner_of(cluster, slot)
    dst = next(n for n in cluster.nodes if n is not src)
    begin_migration(cluster, slot, dst)
    finish_migration(cluster, slot, src, dst)
    return src, dst


async def test_moved_after_a_migration_reruns_only_the_moved_ops(
    own_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(own_cluster.url, namespace="mv", default_partitions=8)
    with trio.fail_after(60):
        first = await store.enqueue_many([job(f"a{i}") for i in range(200)])
        native = native_cluster(store)
        # Partition 0's slot moves to another master behind the store's back:
        # its map is stale now.
        pk = KeySpace("mv").partition("q", 1, 0)
        assert all(store.locate(r.placement)[0] == 1 for r in first)  # type: ignore[index]
        slot = key_slot(pk.ready.encode())
        move_slot(own_cluster, slot)
        hops = ThreadHops(monkeypatch)
        refreshes = native.refreshes
        second = await store.enqueue_many([job(f"b{i}") for i in range(200)])
        # Run once each: an enqueue run twice would report created=False.
        assert all(r.created for r in second)
        assert any(r.placement == pk.placement for r in second)
        assert native.refreshes == refreshes + 1
        assert hops.calls == {"initialize": 1}  # the map rebuilt in a thread, nothing else

        move_slot(own_cluster, slot)  # and away again, under the next lease
        ids: list[str] = []
        while len(ids) < 400:
            got = (
                await store.lease([QueueWeight("q")], 400, worker_id="w", lease_duration=30)
            ).jobs
            assert got, f"leased {len(ids)} of 400"
            ids += [lj.job.id for lj in got]
            assert all(
                (
                    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in got])
                ).settled
            )
        assert native.refreshes == refreshes + 2
    # Nothing lost, nothing leased twice, nothing left behind.
    assert sorted(ids) == sorted([f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)])
    [stats] = await store.stats(["q"])
    assert stats.total == 0
    await store.aclose()


async def test_ask_during_a_migration_goes_to_the_importing_node(
    own_cluster: RedisCluster,
) -> None:
    store = RedisStore.from_url(own_cluster.url, namespace="ask")
    key = "{ask-me}:k"
    slot = key_slot(key.encode())
    with trio.fail_after(30):
        adapter = store._adapter
        await adapter.execute([Op.command(key, "DEL", key)])
        native = native_cluster(store)
        src = owner_of(own_cluster, slot)
        dst = next(n for n in own_cluster.nodes if n is not src)
        begin_migration(own_cluster, slot, dst)
        # The key is not on the source: it answers ASK, and the SET goes to
        # the importing node after ASKING (the map is left alone).
        refreshes, trips = native.refreshes, adapter.stats.round_trips
        [ok] = await adapter.execute([Op.command(key, "SET", key, "v")])
        assert ok is True
        assert adapter.stats.round_trips == trips + 2 and native.refreshes == refreshes
        assert call(src.port, "DBSIZE") == 0  # it ran on the importing node, once
        assert call(dst.port, "DBSIZE") == 1
        finish_migration(own_cluster, slot, src, dst)
        [got] = await adapter.execute([Op.command(key, "GET", key)])  # MOVED, then dst
        assert got == b"v" and native.refreshes == refreshes + 1
    await store.aclose()


# -- a master that dies or hangs -------------------------------------------------------------


async def test_a_killed_master_fails_batches_then_is_reconnected(
    own_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(own_cluster.url, default_partitions=8, socket_timeout=2.0)
    with trio.fail_after(60):
        await store.enqueue_many([job(f"j{i}") for i in range(50)])
        native = native_cluster(store)
        victim = own_cluster.nodes[1]
        victim.kill()
        refreshes = native.refreshes
        # Every partition is read: the victim's share fails the batch, at once.
        started = time.monotonic()
        with trio.fail_after(10), pytest.raises(StoreError, match="ConnectionError"):
            await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)
        assert time.monotonic() - started < 2.0
        # The next batch rebuilds the map first (the victim is still named in it).
        with trio.fail_after(10), pytest.raises(StoreError):
            await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)
        assert native.refreshes == refreshes + 1
        victim.start()  # same port and nodes.conf: it takes its slots back (empty)
        hops = ThreadHops(monkeypatch)
        while True:
            try:
                [again] = await store.enqueue_many([job("after")])
                got = (
                    await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=5)
                ).jobs
                break
            except StoreError:  # the cluster may be down while it rejoins
                await trio.sleep(0.2)
        assert again.created and "after" in {lj.job.id for lj in got}
        assert set(hops.calls) <= {"initialize"}  # native again: threads only for map rebuilds
    await store.aclose()


async def test_a_hung_master_fails_batches_within_the_socket_timeout(
    own_cluster: RedisCluster,
) -> None:
    store = RedisStore.from_url(own_cluster.url, default_partitions=8, socket_timeout=1.0)
    with trio.fail_after(60):
        await store.enqueue_many([job(f"j{i}") for i in range(50)])
        native_cluster(store)
        victim = own_cluster.nodes[2]
        victim.pause()
        try:
            started = time.monotonic()
            with pytest.raises(StoreError, match="within 1s"):
                await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)
            assert time.monotonic() - started < 3.0
        finally:
            victim.resume()
        while True:  # the map rebuild and the batch work again
            try:
                got = (
                    await store.lease([QueueWeight("q")], 50, worker_id="w", lease_duration=5)
                ).jobs
                break
            except StoreError:
                await trio.sleep(0.2)
        assert len(got) == 50
    await store.aclose()
