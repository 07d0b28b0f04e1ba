"""Turning a store URL into a client: redis-py's, or a plain node address.

Accepted forms::

    redis://[[user]:password@]host[:port][/db][?options]
    rediss://...                                  (TLS)
    unix:///path/to/redis.sock[?db=N]
    redis+cluster://[[user]:password@]host:port[,host:port...][/][?options]
    rediss+cluster://...                          (Cluster over TLS)
    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db][?options]
    rediss+sentinel://...                         (Sentinel and Redis over TLS)

:func:`connect` makes redis-py's blocking clients (the Trio store's, the
synchronous producer's); ``connect(url, flavor="asyncio")`` the same
clients of ``redis.asyncio`` (the asyncio producer's). redis-py is imported
by the first call, not with this module.

:func:`node_address` reads a plain ``redis://`` or ``unix://`` URL without
redis-py, exactly as redis-py would: the Trio store then talks to that node
over Trio sockets alone (``_native.NodeClient``) and never needs redis-py
unless a feature does (waiting for results, an error).

``namespace`` and ``partitions`` in the query string set the store's key
namespace and default partition count; ``wait_replicas`` and ``wait_timeout``
make enqueues wait for replicas (``WAIT``); every other option goes to
redis-py (:func:`parse_store_url` reads ours, for the Trio store and the
producers outside Trio alike).

Sentinel: the hosts are the sentinels (port 26379 when left out), asked for
the master of ``service_name``; the userinfo is the Redis credentials (for
the master), and ``sentinel_username``/``sentinel_password`` in the query are
the sentinels' own, when they require any (``requirepass`` in
sentinel.conf). With ``rediss+sentinel``, the sentinels and the data nodes
are reached over TLS, with the same ``ssl_*`` options.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any, Literal, overload
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlparse, urlsplit

import attrs

from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from .._schemes import redact, schemes

if TYPE_CHECKING:
    import redis
    import redis.cluster

#: Which redis-py clients :func:`connect` makes.
Flavor = Literal["blocking", "asyncio"]

#: How the scheme registry (``store/_schemes.py``) names this backend's opener.
OPENER = "chronos_trio.store.redis:open_store"


def redis_schemes() -> tuple[str, ...]:
    """The URL schemes the registry hands to this backend."""
    return tuple(s.name for s in schemes() if s.opener == OPENER)


STORE_OPTIONS = (
    "namespace",
    "partitions",
    "wait_replicas",
    "wait_timeout",
    "compact_succeeded",
)
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
#: Query options for the sentinels' own credentials (not for redis-py's URL parser).
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
DEFAULT_SENTINEL_PORT = 26379


def split_store_options(url: str) -> tuple[str, dict[str, str]]:
    """Remove the store's own query options from ``url``; return both parts."""
    # Split by hand: urlsplit/urlunsplit would turn unix:///path into unix:/path.
    base, _, tail = url.partition("?")
    query, hash_, fragment = tail.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in STORE_OPTIONS}
    rest = urlencode([(k, v) for k, v in pairs if k not in STORE_OPTIONS])
    return base + (f"?{rest}" if rest else "") + hash_ + fragment, ours


def _int_option(opts: dict[str, str], name: str, default: int, minimum: int) -> int:
    value = opts.get(name) or ""
    try:
        number = int(value) if value else default
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ValueError(f"store URL option {name} must be an integer >= {minimum}, got {value!r}")
    return number


def _bool_option(opts: dict[str, str], name: str) -> bool:
    value = (opts.get(name) or "").lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"store URL option {name} must be true or false, got {value!r}")


def _float_option(opts: dict[str, str], name: str, default: float) -> float:
    value = opts.get(name) or ""
    try:
        number = float(value) if value else default
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"store URL option {name} must be a number > 0, got {value!r}")
    return number


def _db_number(text: str, url: str) -> int:
    """A database number from the URL's path or its ``db`` option."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(
            f"bad store URL {redact(url)!r}: the database must be a number >= 0, got {text!r} "
            "(redis://host:port/DB, e.g. redis://localhost:6379/0)"
        )
    return int(text)


def _check_url(clean: str, scheme: str) -> None:
    """``ValueError`` naming the part of a Redis URL (no store options in
    it) that cannot be what the user meant, where redis-py would use a
    default silently or fail only on first use: a port that is not a
    number in range, a database that is not a number (``redis://host/abc``
    would be database 0), a Unix URL without a path, a Cluster URL with a
    database (a Cluster has only database 0), a Sentinel URL without its
    service name, a host list without a host."""
    parts = urlsplit(clean)
    if "#" in clean:  # what follows it is lost to the URL: a password's, say
        raise ValueError(
            f"bad store URL {redact(clean)!r}: it holds a '#', which ends a URL: "
            "percent-encode it as %23 (in a password, say)"
        )
    dbs = [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "db"]
    for value in dbs:
        _db_number(value, clean)
    if scheme in ("redis", "rediss"):
        if "," in parts.netloc.rpartition("@")[2]:
            raise ValueError(
                f"bad store URL {redact(clean)!r}: it names several hosts (use "
                "redis+cluster:// or redis+sentinel:// for those)"
            )
        try:
            parts.port  # noqa: B018 - urllib checks it when read
        except ValueError as exc:
            raise ValueError(f"bad store URL {redact(clean)!r}: {exc}") from None
        path = unquote(parts.path).strip("/")
        if path:
            _db_number(path, clean)
    elif scheme == "unix":
        if not parts.path:
            raise ValueError(
                f"bad store URL {redact(clean)!r}: it names no socket (unix:///path/to/redis.sock)"
            )
    elif scheme in SENTINEL_SCHEMES:
        _host_list(clean, default_port=DEFAULT_SENTINEL_PORT)
        segments = [p for p in unquote(parts.path).split("/") if p]
        if not segments or len(segments) > 2:
            raise ValueError(
                f"expected /service_name[/db] after the sentinels in {redact(clean)!r} "
                "(redis+sentinel://host:port[,host:port...]/service_name[/db])"
            )
        if len(segments) == 2:
            _db_number(segments[1], clean)
    else:  # a Cluster
        _host_list(clean, default_port=6379)
        if unquote(parts.path).strip("/") or any(int(v) for v in dbs):
            raise ValueError(
                f"bad store URL {redact(clean)!r}: it selects a database, but a Redis "
                "Cluster has only database 0 (redis+cluster://host:port[,host:port...])"
            )


def _check_option_names(opts: list[str]) -> None:
    """``ValueError`` for a query option that is a misspelling of one of the
    store's own (``partitons=4``): redis-py would take it as one of its
    connection options and fail on first use, or ignore it."""
    import difflib  # only when the URL has query options

    for name in opts:
        if name in STORE_OPTIONS:
            continue
        close = difflib.get_close_matches(name, STORE_OPTIONS, n=1, cutoff=0.8)
        if close:
            raise ValueError(
                f"unknown store URL option {name!r} (did you mean {close[0]!r}?); "
                f"the store's own are {', '.join(STORE_OPTIONS)}, the rest go to redis-py"
            )


@attrs.frozen
class StoreUrl:
    """A Redis store URL as read by :func:`parse_store_url`."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    #: The URL without the store's own options (what redis-py reads).
    url: str
    #: Its scheme, lower case.
    scheme: str
    namespace: str
    default_partitions: int
    wait_replicas: int
    wait_timeout: float
    #: Whether a success kept a while is rewritten compactly (see RedisStore).
    compact_succeeded: bool = False

    @property
    def description(self) -> str:
        """The URL with any password replaced (for messages and logs)."""
        return redact(self.url)


def parse_store_url(
    url: str,
    *,
    namespace: str | None = None,
    default_partitions: int | None = None,
    wait_replicas: int | None = None,
    wait_timeout: float | None = None,
    socket_timeout: float = 5.0,
) -> StoreUrl:
    """Read a Redis store URL and its options (explicit arguments win over
    the query's). ``ValueError`` naming the bad part for a scheme that is
    not Redis's, a malformed URL (see :func:`_check_url`: a database that
    is not a number, a bad port, ...), a bad or misspelled option, or a
    ``wait_timeout`` that is not below ``socket_timeout`` (a WAIT's reply
    must come back before the socket times out)."""
    clean, opts = split_store_options(url)
    scheme = urlsplit(clean).scheme.lower()
    if scheme not in redis_schemes():
        raise ValueError(
            f"unsupported Redis URL {redact(clean)!r}; expected one of "
            + ", ".join(f"{s}://" for s in redis_schemes())
        )
    _check_url(clean, scheme)
    query = urlsplit(clean).query
    if query:
        _check_option_names([k for k, _ in parse_qsl(query, keep_blank_values=True)])
    if "namespace" in opts and not opts["namespace"]:
        raise ValueError(f"store URL option namespace is empty in {redact(url)!r}")
    if wait_replicas is None:
        wait_replicas = _int_option(opts, "wait_replicas", 0, 0)
    if wait_timeout is None:
        wait_timeout = _float_option(opts, "wait_timeout", 0.1)
    if wait_replicas and not wait_timeout < socket_timeout:
        raise ValueError(
            f"wait_timeout ({wait_timeout:g}s) must be below socket_timeout ({socket_timeout:g}s)"
        )
    return StoreUrl(
        clean,
        scheme,
        namespace or opts.get("namespace") or "chronos",
        default_partitions or _int_option(opts, "partitions", 1, 1),
        wait_replicas,
        wait_timeout,
        _bool_option(opts, "compact_succeeded"),
    )


@attrs.frozen
class NodeAddress:
    """One Redis node as a plain URL names it, read by :func:`node_address`."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    #: TCP host and port; unused when :attr:`path` is set.
    host: str
    port: int
    #: A Unix socket's path (``unix://``), else None.
    path: str | None
    db: int
    username: str | None
    password: str | None
    socket_timeout: float
    connect_timeout: float


#: The query options :func:`node_address` reads; a URL with any other is
#: left to redis-py (its client then supplies the native path's settings).
NODE_OPTIONS = {"db": int, "socket_timeout": float, "socket_connect_timeout": float}


def node_address(
    url: str, *, socket_timeout: float = 5.0, connect_timeout: float = 5.0
) -> NodeAddress | None:
    """``url`` (no store options in it) read as redis-py's ``from_url`` reads
    it, with ``socket_timeout`` and ``connect_timeout`` as its defaults, when
    it is a plain ``redis://`` or ``unix://`` URL whose query holds no
    options but :data:`NODE_OPTIONS`; None for any other URL (TLS, Cluster,
    Sentinel, other options, or anything malformed: redis-py reports that on
    first use, as before). Never imports redis-py."""
    if not url.startswith(("redis://", "unix://")):
        return None
    try:
        parts = urlparse(url)
        query: dict[str, Any] = {}
        for name, values in parse_qs(parts.query).items():
            parse = NODE_OPTIONS.get(name)
            if parse is None:
                return None
            if values:
                query[name] = parse(values[0])
        if parts.scheme == "unix":
            if not parts.path:
                return None
            path: str | None = unquote(parts.path)
            host, port, db = "localhost", 6379, query.get("db", 0)
        else:
            path = None
            host = unquote(parts.hostname) if parts.hostname else "localhost"
            port = int(parts.port) if parts.port else 6379
            db = query.get("db")
            if db is None:
                db = 0
                if parts.path:  # redis-py: a path that is not a number selects nothing
                    with contextlib.suppress(ValueError):
                        db = int(unquote(parts.path).replace("/", ""))
    except ValueError:  # a bad port or option value: redis-py's error, on first use
        return None
    timeout = query.get("socket_timeout", socket_timeout) or 5.0
    return NodeAddress(
        host=host,
        port=port,
        path=path,
        db=db,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        socket_timeout=float(timeout),
        connect_timeout=float(query.get("socket_connect_timeout", connect_timeout) or timeout),
    )


def _client_options(socket_timeout: float, connect_timeout: float, retry: Any) -> dict[str, Any]:
    import redis.backoff

    return {
        "decode_responses": False,  # payloads are raw bytes
        "protocol": 2,  # fixed reply shapes, whatever redis-py's default becomes
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        # A couple of quick retries hide a pooled connection that died with a
        # restarted server; more would only delay the StoreError when Redis is down.
        "retry": retry(redis.backoff.ExponentialWithJitterBackoff(base=0.01, cap=0.2), retries=2),
    }


@attrs.frozen
class _Clients:
    """The redis-py classes of one flavor (blocking or asyncio)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    redis: Any
    cluster: Any
    cluster_node: Any
    sentinel: Any
    retry: Any
    sentinel_connection: Any
    sentinel_ssl_connection: Any


def _clients(flavor: Flavor) -> _Clients:
    if flavor == "blocking":
        import redis.cluster
        import redis.retry
        import redis.sentinel

        from ._sentinel import SentinelConnection, SentinelSSLConnection

        return _Clients(
            redis.Redis,
            redis.cluster.RedisCluster,
            redis.cluster.ClusterNode,
            redis.sentinel.Sentinel,
            redis.retry.Retry,
            SentinelConnection,
            SentinelSSLConnection,
        )
    # imported here: a program that never uses asyncio never loads it
    from redis.asyncio import cluster as aio_cluster
    from redis.asyncio import retry as aio_retry
    from redis.asyncio import sentinel as aio_sentinel
    from redis.asyncio.client import Redis as AsyncioRedis

    return _Clients(
        AsyncioRedis,
        aio_cluster.RedisCluster,
        aio_cluster.ClusterNode,
        aio_sentinel.Sentinel,
        aio_retry.Retry,
        aio_sentinel.SentinelManagedConnection,
        aio_sentinel.SentinelManagedSSLConnection,
    )


@overload
def connect(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 5.0,
    flavor: Literal["blocking"] = "blocking",
    **extra: Any,
) -> redis.Redis | redis.cluster.RedisCluster: ...


@overload
def connect(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 5.0,
    flavor: Flavor,
    **extra: Any,
) -> Any: ...


def connect(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 5.0,
    flavor: Flavor = "blocking",
    **extra: Any,
) -> Any:
    """A redis-py client for ``url`` (no store options in it; see module
    doc): ``redis.Redis`` or ``redis.cluster.RedisCluster``, or with
    ``flavor="asyncio"`` their ``redis.asyncio`` counterparts. ``ValueError``
    for a scheme that is not Redis's or a malformed URL."""
    scheme = url.partition("://")[0].lower()
    kinds = _clients(flavor)
    # The store depends on raw bytes and RESP2 reply shapes: those two are not optional.
    options = {
        **_client_options(socket_timeout, connect_timeout, kinds.retry),
        **extra,
        "decode_responses": False,
        "protocol": 2,
    }
    if scheme in ("redis", "rediss", "unix"):
        return kinds.redis.from_url(url, **options)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_master(url, options, kinds)
    if scheme not in ("redis+cluster", "rediss+cluster"):
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r}; expected one of {redis_schemes()}"
        )
    parts = urlsplit(url)
    nodes = [kinds.cluster_node(host, port) for host, port in _host_list(url, default_port=6379)]
    kwargs = _query_and_credentials(parts.query, parts.netloc)
    kwargs.pop("db", None)
    if scheme == "rediss+cluster":
        kwargs["ssl"] = True
    return kinds.cluster(startup_nodes=nodes, **{**kwargs, **options})


def _host_list(url: str, *, default_port: int) -> list[tuple[str, int]]:
    """The comma-separated ``host[:port]`` list of a multi-host URL."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    found = []
    for hostport in hosts.split(","):
        hostport = hostport.strip()
        if not hostport:
            continue
        if hostport.startswith("["):  # [IPv6]:port
            host, _, rest = hostport[1:].partition("]")
            port = rest.removeprefix(":") or str(default_port)
        else:
            host, colon, port = hostport.rpartition(":")
            if not colon:
                host, port = hostport, str(default_port)
        try:
            found.append((host, int(port)))
        except ValueError:
            raise ValueError(f"bad host:port {hostport!r} in {redact(url)!r}") from None
    if not found:
        raise ValueError(f"no host in {redact(url)!r}")
    return found


def _query_and_credentials(query: str, netloc: str) -> dict[str, Any]:
    """redis-py's reading of ``query`` (exactly as for a plain URL) plus the
    username and password of ``netloc``'s userinfo."""
    import redis.connection

    kwargs: dict[str, Any] = redis.connection.parse_url(f"redis://localhost/?{query}")  # type: ignore[no-untyped-call]
    kwargs.pop("host", None)
    userinfo, at, _ = netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            kwargs["username"] = unquote(user)
        if colon:
            kwargs["password"] = unquote(password)
    return kwargs


def _sentinel_master(url: str, options: dict[str, Any], kinds: _Clients) -> Any:
    """A client of the master of the Sentinel service named in ``url``:
    redis-py's ``Sentinel.master_for``, whose pool asks the sentinels for the
    master's address whenever it opens a connection (see ``_sentinel``)."""
    import redis.backoff

    parts = urlsplit(url)
    sentinels = _host_list(url, default_port=DEFAULT_SENTINEL_PORT)
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError(
            f"expected /service_name[/db] after the sentinels in {redact(url)!r} "
            "(redis+sentinel://host:port[,host:port...]/service_name[/db])"
        )
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in SENTINEL_OPTIONS}
    kwargs = _query_and_credentials(
        urlencode([(k, v) for k, v in pairs if k not in SENTINEL_OPTIONS]), parts.netloc
    )
    if len(path) == 2:
        try:
            kwargs["db"] = int(path[1])
        except ValueError:
            raise ValueError(f"db must be a number, got {path[1]!r} in {redact(url)!r}") from None
    extra_sentinel_kwargs = options.pop("sentinel_kwargs", None) or {}
    kwargs = {**kwargs, **options}
    tls = parts.scheme.lower() == "rediss+sentinel"
    # The sentinels get the timeouts and TLS settings, and their own
    # credentials: never the master's password, which they have no use for.
    sentinel_kwargs: dict[str, Any] = {
        k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl_"))
    }
    sentinel_kwargs["protocol"] = 2
    # No retries: a lookup asks every sentinel in turn anyway, and redis-py's
    # default (3 retries backing off from 1 s) made one lookup with a dead or
    # refusing sentinel take seconds per sentinel.
    sentinel_kwargs["retry"] = kinds.retry(redis.backoff.NoBackoff(), 0)
    if tls:
        sentinel_kwargs["ssl"] = True
    if ours.get("sentinel_username"):
        sentinel_kwargs["username"] = ours["sentinel_username"]
    if "sentinel_password" in ours:
        sentinel_kwargs["password"] = ours["sentinel_password"]
    sentinel_kwargs.update(extra_sentinel_kwargs)
    manager = kinds.sentinel(sentinels, sentinel_kwargs=sentinel_kwargs)
    kind = kinds.sentinel_ssl_connection if tls else kinds.sentinel_connection
    return manager.master_for(path[0], connection_class=kind, **kwargs)
