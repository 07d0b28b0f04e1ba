"""Which kind of client a store holds, told without importing redis-py.

``RedisStore.from_url`` holds a :class:`~._native.NodeClient` for a plain
``redis://`` or ``unix://`` URL (one node over Trio sockets, no redis-py
client), and a redis-py client for any other store. ``isinstance(client,
Redis)`` (or :func:`is_node`) holds for one node of either kind, not for a
Cluster; :func:`is_cluster` tells redis-py's Cluster client. None of them
imports redis-py: while it is not imported, no redis-py client exists.
"""

from __future__ import annotations

import abc
import sys
from typing import TYPE_CHECKING, Any, TypeGuard

from ._native import NodeClient

if TYPE_CHECKING:
    import redis
    import redis.cluster


class Redis(abc.ABC):  # noqa: B024 - a virtual base: nothing to implement
    """One Redis node's client: redis-py's ``redis.Redis`` (standalone, or a
    Sentinel master's), or a :class:`~._native.NodeClient`."""

    @classmethod
    def __subclasshook__(cls, sub: type) -> bool:
        if issubclass(sub, NodeClient):
            return True
        client = sys.modules.get("redis.client")
        return client is not None and issubclass(sub, client.Redis)


def is_node(client: Any) -> TypeGuard[redis.Redis | NodeClient]:
    """Whether ``client`` is one node's (``isinstance(client, Redis)``)."""
    return isinstance(client, Redis)


def is_cluster(client: Any) -> TypeGuard[redis.cluster.RedisCluster]:
    """Whether ``client`` is redis-py's ``RedisCluster``."""
    cluster = sys.modules.get("redis.cluster")
    return cluster is not None and isinstance(client, cluster.RedisCluster)


def is_client(obj: Any) -> TypeGuard[redis.Redis | redis.cluster.RedisCluster | NodeClient]:
    """Whether ``obj`` is a client (rather than a function making one)."""
    return isinstance(obj, Redis) or is_cluster(obj)
