"""Looking a job up on Redis by ID and queue alone (no placement: a handle
made from an ID, every later step of a workflow): found where the cached
topology puts it in one round trip; only a miss reads the topology fresh,
so a job in a version added since the cache was filled is still found."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from chronos_trio import NewJob
from chronos_trio.records._jobs import JobRef, JobState
from chronos_trio.store.redis import RedisStore

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


async def test_a_job_where_the_cached_topology_puts_it_costs_one_round_trip(
    redis_store: Factory,
) -> None:
    store = await redis_store(default_partitions=4, topology_ttl=3600)
    await store.enqueue_many([job("a"), job("warm")])
    await store.outcome(JobRef("warm", "q"))  # the topology cached, the script loaded
    stats = store._adapter.stats
    with trio.fail_after(10):
        before = stats.round_trips
        found = await store.outcome(JobRef("a", "q"))
        assert found is not None and found.state is JobState.READY
        assert stats.round_trips - before == 1
        before = stats.round_trips
        found = await store.wait_outcome(JobRef("a", "q"), timeout=0.05)
        assert found is not None and found.state is JobState.READY
        # a miss: looked for where the cache says, then the topology read fresh
        before = stats.round_trips
        assert await store.outcome(JobRef("nope", "q")) is None
        assert stats.round_trips - before == 2


async def test_a_job_in_a_version_added_since_the_cache_was_filled_is_found(
    redis_store: Factory,
) -> None:
    reader = await redis_store(default_partitions=2, topology_ttl=3600)
    writer = await redis_store(default_partitions=2)
    await writer.enqueue_many([job("old")])
    with trio.fail_after(10):
        assert await reader.outcome(JobRef("old", "q")) is not None  # v1 cached
        await writer.promote_queue_version("q", 2, 8)
        fresh = await redis_store(default_partitions=2)
        [made] = await fresh.enqueue_many([job("new")])
        assert (fresh.locate(made.placement) or (0, 0))[0] == 2
        # the reader's cache knows only v1: the miss there reads it fresh
        found = await reader.outcome(JobRef("new", "q"))
        assert found is not None and found.job_id == "new"
        found = await reader.wait_outcome(JobRef("new", "q"), timeout=0.05)
        assert found is not None and found.state is JobState.READY
        # and a job of the draining v1 is still found where the cache says
        assert await reader.outcome(JobRef("old", "q")) is not None
