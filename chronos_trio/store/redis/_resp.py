"""The Redis protocol as every runtime's own connections speak it: no
Trio, no asyncio, no redis-py until one of its exceptions or callbacks is
needed.

The Trio-native path (``_native``) and the producers' nodes (the blocking
``_blocking_node`` and the asyncio ``_asyncio_node``) share these: packing
commands into one RESP request with hiredis (:func:`pack`), turning replies
into what redis-py would have returned (:func:`parse_reply` with
:class:`ReplyCallbacks` or a redis-py client's callbacks; an error reply as
redis-py's exception, ``NOSCRIPT`` as :class:`~._errors.NoScript`), the
handshake of a new connection (:func:`handshake`; :func:`plain_node_settings`
reads a redis-py client's), and :class:`Dead`, how a connection's failure is
told apart from an error reply. The two producer nodes also share their
failures as redis-py's exceptions (:func:`lost`, :func:`no_reply`,
:func:`connect_error`, :func:`handshake_failed`, :func:`hello_error`) and
their idle pool (:class:`NodePool`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

import hiredis

from ._errors import NoScript, exceptions, reply_error
from ._packed import PackedCommand

if TYPE_CHECKING:
    import socket

#: Bytes asked of the socket per read.
READ_SIZE = 65536


def read_replies(sock: socket.socket, reader: Any, replies: list[Any], count: int) -> bool:
    """Read what the non-blocking ``sock`` has (a ``poll`` said it is
    readable) and parse it with the hiredis ``reader`` into ``replies``:
    whether all ``count`` are there now. Raises ConnectionResetError at the
    end of the stream, OSError, ``hiredis.ProtocolError``."""
    try:
        chunk = sock.recv(READ_SIZE)
    except BlockingIOError:
        return False  # (a spurious wake-up)
    if not chunk:
        raise ConnectionResetError("Redis closed the connection")
    reader.feed(chunk)
    while (reply := reader.gets()) is not False:
        replies.append(reply)
        if len(replies) == count:
            return True
    return False


class Dead(Exception):
    """The connection failed; ``replied`` tells whether any reply had arrived."""

    def __init__(self, cause: BaseException, replied: bool) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause
        self.replied = replied


def encode_arg(arg: Any) -> bytes:
    """An argument as redis-py's encoder writes it."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, bool):
        raise exceptions().DataError(f"invalid argument {arg!r}: booleans are not sent")
    if isinstance(arg, int | float):
        return repr(arg).encode()
    if isinstance(arg, memoryview | bytearray):
        return bytes(arg)
    raise exceptions().DataError(f"invalid argument of type {type(arg).__name__}")


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """The commands as one RESP request. hiredis packs str (UTF-8), bytes,
    int and float itself, floats as repr() writes them, exactly as redis-py's
    encoder would; anything else (a bool, a bytearray) takes the slow path,
    which converts or refuses it as redis-py does. A
    :class:`~._packed.PackedCommand` is sent as it was packed."""
    try:
        return b"".join(
            [
                # (hiredis' stub types the argument as a 1-tuple; any length is fine)
                hiredis.pack_command(c)  # type: ignore[arg-type, unused-ignore]
                if type(c) is tuple
                else c.resp
                if type(c) is PackedCommand
                else hiredis.pack_command(tuple(c))  # type: ignore[arg-type, unused-ignore]
                for c in commands
            ]
        )
    except TypeError:
        return b"".join(
            c.resp
            if type(c) is PackedCommand
            else hiredis.pack_command(tuple(encode_arg(a) for a in c))  # type: ignore[arg-type]
            for c in commands
        )


def error_of(reply: hiredis.ReplyError) -> Exception:
    """An error reply as the redis-py exception its parser would make, but
    NOSCRIPT as a :class:`~._errors.NoScript` (the adapter reloads the script)."""
    text = str(reply)
    return NoScript(text) if text.startswith("NOSCRIPT ") else reply_error(text)


def is_readonly(reply: Any) -> bool:
    return isinstance(reply, hiredis.ReplyError) and str(reply).startswith("READONLY ")


class Callbacks(Protocol):
    """Response callbacks by command name (upper or lower case), as
    redis-py's ``client.response_callbacks`` holds them."""

    def get(self, name: str) -> Callable[..., Any] | None: ...


def parse_reply(callbacks: Callbacks, command: Sequence[Any], reply: Any) -> Any:
    """``reply`` to ``command`` as redis-py returns it: an error reply as its
    exception (:func:`error_of`), else through the command's callback."""
    if isinstance(reply, hiredis.ReplyError):
        return error_of(reply)
    name = command[0]
    callback = callbacks.get(name if isinstance(name, str) else name.decode())
    return reply if callback is None else callback(reply)


def parse_replies(
    callbacks: Callbacks,
    by_name: dict[Any, Callable[..., Any] | None],
    commands: Sequence[Sequence[Any]],
    replies: list[Any],
) -> list[Any]:
    """:func:`parse_reply` of each reply, each command name's callback
    looked up in ``callbacks`` once and kept in ``by_name`` (for a client of
    the store's own, whose callbacks do not change)."""
    parsed = []
    for c, r in zip(commands, replies, strict=True):
        if isinstance(r, hiredis.ReplyError):
            parsed.append(error_of(r))
            continue
        name = c[0]
        try:
            callback = by_name[name]
        except KeyError:
            callback = callbacks.get(name if isinstance(name, str) else name.decode())
            if len(by_name) < 1000:  # command names: a few
                by_name[name] = callback
        parsed.append(r if callback is None else callback(r))
    return parsed


def handshake(
    username: str | None, password: str | None, db: int, client_name: str | None = None
) -> list[tuple[Any, ...]]:
    """What a new connection sends first: AUTH (with a password), CLIENT
    SETNAME (with a name, as redis-py's connections send it), SELECT (db > 0)."""
    handshake: list[tuple[Any, ...]] = []
    if password is not None:
        handshake.append(("AUTH", username, password) if username else ("AUTH", password))
    if client_name:
        handshake.append(("CLIENT", "SETNAME", client_name))
    if db:
        handshake.append(("SELECT", db))
    return handshake


def client_handshake(kw: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """:func:`handshake` for a redis-py pool's ``connection_kwargs`` (blocking
    or asyncio): its user, password, database and client name."""
    return handshake(
        kw.get("username"), kw.get("password"), int(kw.get("db") or 0), kw.get("client_name")
    )


class PlainNode(NamedTuple):
    """How to reach one plain Redis node on a socket of one's own."""

    #: (host, port), or a Unix socket's path.
    address: tuple[str, int] | str
    #: What a new connection sends first (:func:`handshake`).
    hello: list[tuple[Any, ...]]
    #: Seconds a round trip may take (the client's socket timeout; 5 unset).
    timeout: float
    #: Seconds a connection may take to open (else ``timeout``).
    connect_timeout: float


def plain_node_settings(client: Any, tcp: type, unix: type) -> PlainNode | None:
    """The node of a redis-py client (blocking or asyncio) whose connection
    class is exactly ``tcp`` or ``unix`` (that flavor's plain classes), or
    None when a socket of one's own would not speak as the client does:
    another connection class (TLS, Sentinel, a custom one), a connect
    function or credential provider, a pinned connection, or RESP3 (redis-py
    8 speaks RESP3 unless told 2)."""
    pool = client.connection_pool
    kind = pool.connection_class
    kw = pool.connection_kwargs
    if (
        client.connection is not None
        or kw.get("credential_provider") is not None
        or kw.get("redis_connect_func") is not None
        or kw.get("protocol") not in (2, "2")
    ):
        return None
    address: tuple[str, int] | str
    if kind is tcp:
        address = (kw.get("host") or "localhost", int(kw.get("port") or 6379))
    elif kind is unix:
        address = kw["path"]
    else:
        return None
    timeout = float(kw.get("socket_timeout") or 5.0)
    return PlainNode(
        address, client_handshake(kw), timeout, float(kw.get("socket_connect_timeout") or timeout)
    )


def where(address: tuple[str, int] | str) -> str:
    """A node's address as errors name it."""
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"


# -- the producer nodes' failures, as redis-py's exceptions ------------------------------
def _redis_py(kind: str, message: str) -> Exception:
    """redis-py's exception ``kind`` (ConnectionError, TimeoutError) with ``message``."""
    error: Exception = getattr(exceptions(), kind)(message)
    return error


def lost(dead: Dead) -> Exception:
    """A connection that failed mid round trip: redis-py's ConnectionError."""
    return _redis_py("ConnectionError", f"lost the connection to Redis: {dead}")


def no_reply(timeout: float) -> Exception:
    """No reply within the round trip's ``timeout``: redis-py's TimeoutError."""
    return _redis_py("TimeoutError", f"no reply from Redis within {timeout:g}s")


def connect_error(
    address: tuple[str, int] | str, exc: OSError, connect_timeout: float
) -> Exception:
    """A connection that could not be opened: redis-py's TimeoutError when
    ``exc`` is a timeout, else its ConnectionError."""
    if isinstance(exc, TimeoutError):
        return _redis_py(
            "TimeoutError",
            f"could not connect to Redis at {where(address)} within {connect_timeout:g}s",
        )
    return _redis_py(
        "ConnectionError", f"could not connect to Redis at {where(address)}: {exc.strerror or exc}"
    )


def handshake_failed(exc: Exception) -> Exception:
    """The handshake's round trip failed (:class:`Dead` or a timeout):
    redis-py's ConnectionError."""
    return _redis_py("ConnectionError", f"Redis handshake failed: {exc}")


def hello_error(replies: Sequence[Any]) -> Exception | None:
    """The first error reply to the handshake (a wrong password, a database
    out of range) as redis-py's exception, or None when all went well."""
    for reply in replies:
        if isinstance(reply, hiredis.ReplyError):
            return reply_error(str(reply))
    return None


#: Idle connections a producer node keeps (a burst opens more; the rest are closed).
MAX_IDLE = 32


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class NodePool(Generic[C]):
    """What the producers' nodes share: one node's settings and its idle
    connections (at most :data:`MAX_IDLE`); each node opens connections and
    runs round trips its own way (blocking or on the asyncio loop)."""

    def __init__(
        self,
        address: tuple[str, int] | str,
        *,
        hello: list[tuple[Any, ...]],
        timeout: float,
        connect_timeout: float,
        callbacks: Callbacks,
    ) -> None:
        self._address = address
        self._hello = hello
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._callbacks = callbacks
        self._idle: list[C] = []
        self._closed = False
        #: Each command name's callback, looked up once (the node's client
        #: is the producer's own: its callbacks do not change).
        self._by_name: dict[Any, Callable[..., Any] | None] = {}

    def _put_back(self, conn: C) -> None:
        """Pool ``conn`` after a whole round trip, or close it (pool full, node closed)."""
        if len(self._idle) < MAX_IDLE and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()

    def _parse(self, commands: Sequence[Sequence[Any]], replies: list[Any]) -> list[Any]:
        """The replies to ``commands`` as redis-py's pipeline returns them."""
        return parse_replies(self._callbacks, self._by_name, commands, replies)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close the idle connections; round trips in flight finish on theirs
        (closed as they end), later ones raise ConnectionError."""
        self._closed = True
        self._drop_idle()


# -- redis-py's callbacks, without redis-py --------------------------------------------
def _time(reply: Any) -> tuple[int, int]:
    return (int(reply[0]), int(reply[1]))


def _ok(reply: Any) -> bool:
    return (reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply) == "OK"


def _pairs(reply: Any) -> dict[Any, Any]:
    return dict(zip(reply[::2], reply[1::2], strict=False)) if reply else {}


def _entries(reply: Any) -> Any:
    """Stream entries (XRANGE, XREVRANGE) as (id, fields dict) pairs."""
    if reply is None:
        return None
    out: list[tuple[Any, dict[Any, Any] | None]] = []
    for entry in reply:
        if entry is None:
            out.append((None, None))
        else:
            fields = iter(entry[1])
            out.append((entry[0], dict(zip(fields, fields, strict=False))))
    return out


#: Commands whose replies redis-py (RESP2, called as ``execute_command``
#: calls them: without options) returns as they come: the store's own and
#: common ones of handlers (tests hold it to redis-py's table).
AS_SENT = frozenset(
    {
        "DECR", "DECRBY", "DEL", "EVAL", "EVALSHA", "EXISTS", "GET", "HDEL", "HGET",
        "HINCRBY", "HKEYS", "HLEN", "HMGET", "HSET", "HSETNX", "INCR", "INCRBY", "LLEN",
        "LPUSH", "MGET", "PUBLISH", "RPUSH", "SADD", "SCARD", "SCRIPT", "SMISMEMBER",
        "SREM", "WAIT", "XADD", "ZCARD", "ZRANGE", "ZREM",
    }
)  # fmt: skip
#: Commands redis-py converts, converted the same way (TIME as a tuple, OK
#: as True, HGETALL as a dict, stream entries as (id, fields dict) pairs).
CONVERTED: dict[str, Callable[[Any], Any]] = {
    "TIME": _time, "LTRIM": _ok, "HGETALL": _pairs, "XRANGE": _entries, "XREVRANGE": _entries,
}  # fmt: skip


class ReplyCallbacks:
    """redis-py's response callbacks for a node without a redis-py client:
    :data:`AS_SENT` and :data:`CONVERTED` give what redis-py's give for
    those commands; any other command's callback is redis-py's own, read
    (importing redis-py) on first need."""

    def __init__(self) -> None:
        self._redis_py: Callbacks | None = None

    def get(self, name: str) -> Callable[..., Any] | None:
        name = name.upper()
        if name in AS_SENT:
            return None
        converted = CONVERTED.get(name)
        if converted is not None:
            return converted
        if self._redis_py is None:
            self._redis_py = redis_py_callbacks()
        return self._redis_py.get(name)


def redis_py_callbacks() -> Callbacks:
    """The response callbacks of a redis-py client as the store makes them
    (RESP2, raw bytes), without connecting anywhere."""
    import redis

    client = redis.Redis(protocol=2, decode_responses=False)
    callbacks: Callbacks = client.response_callbacks
    client.close()
    return callbacks
