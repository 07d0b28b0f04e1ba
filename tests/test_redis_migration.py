"""Queue migration on Redis: v1 (4 partitions) drained while v2 (8 partitions)
takes new jobs; completing v1 is refused until it is empty."""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from chronos_trio import NewJob
from chronos_trio.store import (
    QueueWeight,
    SettleKind,
    Settlement,
    TopologyError,
    VersionState,
)
from chronos_trio.store.redis import RedisStore

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue="orders", kind="k", payload=job_id.encode(), **kw)  # type: ignore[arg-type]


async def test_migration_v1_to_v2_mid_stream(redis_store: Factory) -> None:
    producer = await redis_store(default_partitions=4)
    worker = await redis_store(default_partitions=4, topology_ttl=0.1)
    admin = await redis_store()

    v1_jobs = [job(f"a{i}") for i in range(120)] + [job(f"a-late{i}", delay=0.5) for i in range(20)]
    for r in await producer.enqueue_many(v1_jobs):
        where = producer.locate(r.placement)
        assert r.created and where is not None and where[0] == 1 and 0 <= where[1] < 4
    assert len({r.placement for r in await producer.enqueue_many(v1_jobs)}) == 4

    processed: dict[str, int] = {}

    async def work_some(n: int) -> int:
        await worker.promote_due(["orders"], 1000)
        got = (await worker.lease([QueueWeight("orders")], n, worker_id="w", lease_duration=5)).jobs
        for lj in got:
            processed[lj.job.id] = (worker.locate(lj.job.placement) or (0, 0))[0]
        ok = await worker.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in got])
        assert all(ok.settled)
        return len(got)

    # part of v1 is consumed, then v2 is promoted mid-stream
    assert await work_some(50) == 50
    topo = await admin.promote_queue_version("orders", 2, 8)
    assert [(v.version, v.partitions, v.state) for v in topo.versions] == [
        (1, 4, VersionState.DRAINING),
        (2, 8, VersionState.ACTIVE),
    ]
    with pytest.raises(TopologyError, match="still holds"):
        await admin.complete_draining_version("orders", 1)
    with pytest.raises(TopologyError, match="active"):
        await admin.complete_draining_version("orders", 2)
    with pytest.raises(TopologyError, match="greater"):
        await admin.promote_queue_version("orders", 2, 16)

    await trio.sleep(0.15)  # the producer's cached topology expires (TTL 1 s) ...
    producer_fresh = await redis_store(default_partitions=4)  # ... or a fresh process
    v2 = await producer_fresh.enqueue_many([job(f"b{i}") for i in range(160)])
    where = [producer_fresh.locate(r.placement) for r in v2]
    assert all(w is not None and w[0] == 2 and 0 <= w[1] < 8 for w in where), where
    assert len(set(where)) == 8

    with trio.fail_after(20):
        while len(processed) < 300:
            if not await work_some(64):
                await worker.wait_ready(["orders"], 0.2)
    assert sum(1 for v in processed.values() if v == 1) == 140
    assert sum(1 for v in processed.values() if v == 2) == 160

    [stats] = await admin.stats(["orders"])
    assert stats.total == 0
    topo = await admin.complete_draining_version("orders", 1)
    assert [(v.version, v.partitions, v.state) for v in topo.versions] == [
        (2, 8, VersionState.ACTIVE)
    ]
    assert (await worker.topology("orders")).versions == topo.versions
    with pytest.raises(TopologyError, match="no version 1"):
        await admin.complete_draining_version("orders", 1)


async def test_completion_refused_by_one_leased_job_and_partitions_reopened(
    redis_store: Factory,
) -> None:
    store = await redis_store(default_partitions=4)
    await store.enqueue_many([job("only")])
    [lj] = (await store.lease([QueueWeight("orders")], 1, worker_id="w", lease_duration=5)).jobs
    await store.promote_queue_version("orders", 2, 2)
    with pytest.raises(TopologyError, match="1 job"):
        await store.complete_draining_version("orders", 1)
    # the refused attempt left v1 open: a retry of the job lands back in v1 and drains
    await store.settle([Settlement(lj.ref, SettleKind.RETRY, error="e", retry_delay=0)])
    await store.promote_due(["orders"], 10)
    [again] = (await store.lease([QueueWeight("orders")], 1, worker_id="w", lease_duration=5)).jobs
    assert again.job.placement == lj.job.placement and again.job.attempts == 2
    await store.settle([Settlement(again.ref, SettleKind.SUCCEEDED)])
    await store.complete_draining_version("orders", 1)


async def test_migration_example_cli(
    redis_store: Factory, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(__file__).parent.parent / "examples" / "redis_migration.py"
    spec = importlib.util.spec_from_file_location("redis_migration_example", path)
    assert spec is not None and spec.loader is not None
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    store = await redis_store(default_partitions=4)
    await store.enqueue_many([job("a"), job("b")])
    assert await cli.main([redis_url, "promote", "orders", "--partitions", "8"]) == 0
    assert await cli.main([redis_url, "complete", "orders", "--version", "1"]) == 1
    assert "still holds 2 job(s)" in capsys.readouterr().err
    got = (await store.lease([QueueWeight("orders")], 10, worker_id="w", lease_duration=5)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in got])
    assert await cli.main([redis_url, "complete", "orders", "--version", "1"]) == 0
    assert await cli.main([redis_url, "show", "orders"]) == 0
    out = capsys.readouterr().out
    assert "v2  active    8 partition(s)" in out and "v1  draining" not in out
