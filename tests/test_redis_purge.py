"""A queue purge on Redis meets damaged index entries and records of a newer
format (purge.lua): an entry without a job hash is quarantined and leaves
its index, a newer record is left exactly as it is (and reported), a record
whose state says leased is not deleted from under its worker, and every
other record goes whole; later calls pass over what was left, so a purge
ends."""

from __future__ import annotations

import pytest
import redis

from chronos_trio.store import QueueWeight
from chronos_trio.store.redis import RedisStore
from tests.test_redis_damaged import NEXT, Factory, job, part, plant, snapshot

pytestmark = pytest.mark.redis


async def test_purge_quarantines_gone_entries_and_leaves_newer_and_leased_records(
    redis_store: Factory, redis_url: str
) -> None:
    store: RedisStore = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([job(f"ok{i}", delay=60 * (i % 2)) for i in range(6)])
    plant(client, pk, "newer", "ready", 1.0, v=NEXT)
    plant(client, pk, "stray", "dead", 1.0, state="leased")  # says leased, in the dead index
    plant(client, pk, "gone", "scheduled", 1.0)
    client.delete(pk.job("gone"))
    before = snapshot(client, pk, ["newer", "stray"])

    first = await store.purge_queue("q", limit=3)
    assert first.count == 3
    total, aside_newer, quarantined = (
        first.count,
        list(first.aside.newer),
        list(first.aside.quarantined),
    )
    for _ in range(10):
        done = await store.purge_queue("q", limit=3)
        total += done.count
        aside_newer += done.aside.newer
        quarantined += done.aside.quarantined
        if done.count == 0:
            break
    assert total == 6, "every healthy job, a batch at a time"
    assert [e.job_id for e in quarantined] == ["gone"] and client.zscore(
        pk.scheduled, "gone"
    ) is None
    assert {e.job_id for e in aside_newer} == {"newer"}
    assert snapshot(client, pk, ["newer", "stray"]) == before, "not one field, not one entry"
    for i in range(6):
        assert not client.exists(pk.job(f"ok{i}")), "a purged record leaves no hash behind"
        for zset in (pk.scheduled, pk.ready, pk.retry, pk.succeeded, pk.dead):
            assert client.zscore(zset, f"ok{i}") is None, "nor an index entry"


async def test_purge_leaves_a_leased_job_running_and_its_settle_applies(
    redis_store: Factory,
) -> None:
    from chronos_trio.store import SettleKind, Settlement

    store: RedisStore = await redis_store(partitions=4)
    await store.enqueue_many([job("run")])
    [running] = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)).jobs
    await store.enqueue_many([job(f"j{i}") for i in range(40)])
    assert (await store.purge_queue("q", limit=7)).count == 7, (
        "exactly the limit, over 4 partitions"
    )
    assert (await store.purge_queue("q", limit=1000)).count == 33
    done = await store.settle([Settlement(running.ref, SettleKind.SUCCEEDED)])
    assert done.settled == (True,)
