"""The store conformance suite on RedisStore: standalone (1 and 8 partitions;
Trio-native round trips, and redis-py in threads) and a local 3-master Redis
Cluster (8 partitions, so queues span the nodes)."""

from __future__ import annotations

import pytest
import trio

from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import CHECKS
from chronos_trio.testing.conformance import Check

pytestmark = pytest.mark.redis

_IDS = {"ids": lambda c: c.__name__.removeprefix("check_")}


async def _run(check: Check, url: str, partitions: int, native: bool = True) -> None:
    store = RedisStore.from_url(url, default_partitions=partitions, native=native)
    try:
        with trio.fail_after(30):
            await check(store)
    finally:
        await store.aclose()


@pytest.mark.parametrize("check", CHECKS, **_IDS)
@pytest.mark.parametrize("partitions", [1, 8])
async def test_redis_store_conforms(check: Check, partitions: int, redis_url: str) -> None:
    await _run(check, redis_url, partitions)


@pytest.mark.parametrize("check", CHECKS, **_IDS)
async def test_redis_store_conforms_over_threads(check: Check, redis_url: str) -> None:
    """The redis-py-in-threads path (TLS uses it) on a single node."""
    await _run(check, redis_url, 1, native=False)


@pytest.mark.cluster
@pytest.mark.parametrize("check", CHECKS, **_IDS)
async def test_redis_cluster_store_conforms(check: Check, redis_cluster_url: str) -> None:
    await _run(check, redis_cluster_url, 8)
