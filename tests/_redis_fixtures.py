"""Redis fixtures: throwaway redis-server processes (never the shared :6379).

* ``redis_server`` (session): one standalone server.
* ``redis_url`` (function): its URL, emptied (FLUSHALL) before each test.
* ``own_redis_server`` (function): a server of the test's own (it may
  restart, kill or pause it), closed after it.
* ``redis_cluster`` (session): a 3-master Redis Cluster.
* ``redis_cluster_url`` (function): its URL, emptied before each test.
* ``own_redis_cluster`` (function): a cluster of the test's own (it may kill
  a node or move slots), closed after it. Two are kept warming ahead, as a
  new cluster needs about 2 s before it is ok.
* ``redis_store`` (function): ``await redis_store(url=None, **options)`` makes a
  RedisStore (on ``redis_url`` by default) and closes it after the test.
* ``redis_sentinel`` (session): a master, a replica and three sentinels;
  ``redis_sentinel_url`` (function): its ``redis+sentinel://`` URL, the
  master emptied before each test. Tests that fail the master over take
  ``fresh_redis_sentinel`` (function): a set of their own, as theirs is left
  with another master (or none).

Without a ``redis-server`` binary these tests skip, except under CI=true,
where they fail: CI must never pass by silently skipping the Redis suite.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from chronos_trio.store.redis import RedisStore
from chronos_trio.testing.redis_server import (
    RedisCluster,
    RedisSentinel,
    RedisServer,
    RedisUnavailable,
    in_ci,
)

__all__ = [
    "_spare_clusters",
    "fresh_redis_sentinel",
    "own_redis_cluster",
    "own_redis_server",
    "redis_cluster",
    "redis_cluster_url",
    "redis_sentinel",
    "redis_sentinel_url",
    "redis_server",
    "redis_store",
    "redis_url",
]

StoreFactory = Callable[..., Awaitable[RedisStore]]


def _unavailable(exc: RedisUnavailable) -> None:
    if in_ci():
        pytest.fail(f"Redis is required under CI=true: {exc}")
    pytest.skip(str(exc))


def _flushall(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"FLUSHALL\r\n")
        s.recv(64)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except RedisUnavailable as exc:
        _unavailable(exc)
        raise
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    if not redis_server.running:  # a test may have killed it
        redis_server.start()
    _flushall(redis_server.port)
    return redis_server.url


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except RedisUnavailable as exc:
        _unavailable(exc)
        raise
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    try:
        cluster = RedisCluster().start()
    except RedisUnavailable as exc:
        _unavailable(exc)
        raise
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisCluster) -> str:
    redis_cluster.flushall()
    return redis_cluster.url


class _SpareClusters:
    """Clusters launched ahead for the tests that take one of their own: a
    new cluster is ok only about 2 s after its nodes started (Redis's
    writable delay), so ``AHEAD`` of them warm up while tests run."""

    AHEAD = 2

    def __init__(self) -> None:
        self.spares: list[RedisCluster] = []

    def take(self) -> RedisCluster:
        try:
            cluster = self.spares.pop(0) if self.spares else RedisCluster().launch()
            while len(self.spares) < self.AHEAD:
                self.spares.append(RedisCluster().launch())
        except RedisUnavailable as exc:
            _unavailable(exc)
            raise
        try:
            cluster.wait_ok()
        except RedisUnavailable as exc:
            cluster.close()
            _unavailable(exc)
            raise
        return cluster

    def close(self) -> None:
        for cluster in self.spares:
            cluster.close()
        self.spares = []


@pytest.fixture(scope="session")
def _spare_clusters() -> Iterator[_SpareClusters]:
    spares = _SpareClusters()
    try:
        yield spares
    finally:
        spares.close()


@pytest.fixture
def own_redis_cluster(_spare_clusters: _SpareClusters) -> Iterator[RedisCluster]:
    cluster = _spare_clusters.take()
    try:
        yield cluster
    finally:
        cluster.close()


def _start_sentinel() -> RedisSentinel:
    try:
        return RedisSentinel().start()
    except RedisUnavailable as exc:
        _unavailable(exc)
        raise


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    sentinel = _start_sentinel()
    try:
        yield sentinel
    finally:
        sentinel.close()


@pytest.fixture
def redis_sentinel_url(redis_sentinel: RedisSentinel) -> str:
    redis_sentinel.wait_settled()  # one master that every sentinel knows
    redis_sentinel.flushall()
    return redis_sentinel.url


@pytest.fixture
def fresh_redis_sentinel() -> Iterator[RedisSentinel]:
    sentinel = _start_sentinel()
    try:
        yield sentinel
    finally:
        sentinel.close()


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[StoreFactory]:
    made: list[RedisStore] = []

    async def make(url: str | None = None, **options: Any) -> RedisStore:
        store = RedisStore.from_url(url or redis_url, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
