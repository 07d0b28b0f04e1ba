"""Turning a store URL into a redis-py client.

Accepted forms::

    redis://[[user]:password@]host[:port][/db][?options]
    rediss://...                                  (TLS)
    unix:///path/to/redis.sock[?db=N]
    redis+cluster://[[user]:password@]host:port[,host:port...][/][?options]
    rediss+cluster://...                          (Cluster over TLS)

``namespace`` and ``partitions`` in the query string set the store's key
namespace and default partition count; every other option goes to redis-py.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.backoff
import redis.cluster
import redis.connection
import redis.retry

from .._schemes import redact, schemes

#: How the scheme registry (``store/_schemes.py``) names this backend's opener.
OPENER = "chronos_trio.store.redis:open_store"


def redis_schemes() -> tuple[str, ...]:
    """The URL schemes the registry hands to this backend."""
    return tuple(s.name for s in schemes() if s.opener == OPENER)


STORE_OPTIONS = ("namespace", "partitions")


def split_store_options(url: str) -> tuple[str, dict[str, str]]:
    """Remove the store's own query options from ``url``; return both parts."""
    # Split by hand: urlsplit/urlunsplit would turn unix:///path into unix:/path.
    base, _, tail = url.partition("?")
    query, hash_, fragment = tail.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in STORE_OPTIONS}
    rest = urlencode([(k, v) for k, v in pairs if k not in STORE_OPTIONS])
    return base + (f"?{rest}" if rest else "") + hash_ + fragment, ours


def _client_options(socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
    return {
        "decode_responses": False,  # payloads are raw bytes
        "protocol": 2,  # fixed reply shapes, whatever redis-py's default becomes
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        # A couple of quick retries hide a pooled connection that died with a
        # restarted server; more would only delay the StoreError when Redis is down.
        "retry": redis.retry.Retry(
            redis.backoff.ExponentialWithJitterBackoff(base=0.01, cap=0.2), retries=2
        ),
    }


def connect(
    url: str, *, socket_timeout: float = 5.0, connect_timeout: float = 5.0, **extra: Any
) -> redis.Redis | redis.cluster.RedisCluster:
    """A redis-py client for ``url`` (no store options in it; see module doc)."""
    scheme = url.partition("://")[0].lower()
    # The store depends on raw bytes and RESP2 reply shapes: those two are not optional.
    options = {
        **_client_options(socket_timeout, connect_timeout),
        **extra,
        "decode_responses": False,
        "protocol": 2,
    }
    if scheme in ("redis", "rediss", "unix"):
        return redis.Redis.from_url(url, **options)
    if scheme not in ("redis+cluster", "rediss+cluster"):
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r}; expected one of {redis_schemes()}"
        )
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for hostport in hosts.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not host:
            host, port = port, "6379"
        nodes.append(redis.cluster.ClusterNode(host.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
    if not nodes or not hosts:
        raise ValueError(f"no cluster node in {redact(url)!r}")
    # Let redis-py parse the query options exactly as for a plain URL.
    kwargs = redis.connection.parse_url(f"redis://localhost/?{parts.query}")  # type: ignore[no-untyped-call]
    kwargs.pop("host", None)
    kwargs.pop("db", None)
    if userinfo:
        user, colon, password = userinfo.partition(":")
        if user:
            kwargs["username"] = unquote(user)
        if colon:
            kwargs["password"] = unquote(password)
    if scheme == "rediss+cluster":
        kwargs["ssl"] = True
    return redis.cluster.RedisCluster(startup_nodes=nodes, **{**kwargs, **options})
