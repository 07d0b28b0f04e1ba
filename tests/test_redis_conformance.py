"""The store conformance suite on RedisStore: standalone (1 and 8 partitions;
Trio-native round trips, and redis-py in threads) and a local 3-master Redis
Cluster (8 partitions, so queues span the nodes).

Every store a check asks for is a RedisStore on a namespace of its own, so
it starts empty even though the stores of one check share one Redis."""

from __future__ import annotations

import itertools

import pytest
import trio

from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import CHECKS, Check

pytestmark = pytest.mark.redis

_namespaces = itertools.count()


async def _run(check: Check, url: str, partitions: int, native: bool = True) -> None:
    assert check.skip_reason(RedisStore) is None, "the RedisStore offers every role"

    async def fresh() -> RedisStore:
        return RedisStore.from_url(
            url,
            namespace=f"conformance-{next(_namespaces)}",
            default_partitions=partitions,
            native=native,
        )

    with trio.fail_after(30):
        await check(fresh)  # the check closes the stores it made


@pytest.mark.parametrize("check", CHECKS, ids=str)
@pytest.mark.parametrize("partitions", [1, 8])
async def test_redis_store_conforms(check: Check, partitions: int, redis_url: str) -> None:
    await _run(check, redis_url, partitions)


@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_redis_store_conforms_over_threads(check: Check, redis_url: str) -> None:
    """The redis-py-in-threads path (TLS uses it) on a single node."""
    await _run(check, redis_url, 1, native=False)


@pytest.mark.cluster
@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_redis_cluster_store_conforms(check: Check, redis_cluster_url: str) -> None:
    await _run(check, redis_cluster_url, 8)
