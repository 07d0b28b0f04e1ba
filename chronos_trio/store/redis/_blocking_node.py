"""Blocking round trips to one Redis node on plain sockets, hiredis for the
protocol: the synchronous producer's transport on a plain ``redis://`` or
``unix://`` client (the blocking twin of ``_native.NativeNode``; the asyncio
producer's is ``_asyncio_node.AsyncioNode``).

redis-py's pipeline costs several times a loopback round trip in Python
(connection bookkeeping, observability hooks, per-argument encoding), and a
producer's enqueue is one round trip: this path writes the packed commands
and reads the replies, nothing else. It covers plain TCP and Unix-socket
connections, with user, password, database and client name from the
client's settings (``_resp.plain_node_settings``); TLS, Sentinel, Cluster,
custom connection classes and credential providers, and clients speaking
RESP3, keep redis-py (``_blocking.lean_pipeline``).

It behaves as the Trio-native path does:

* a round trip, once started, runs to completion or fails, bounded by the
  client's socket timeout (a ``TimeoutError``, never retried: the commands
  may be running);
* every failure is redis-py's ``ConnectionError``/``TimeoutError`` and the
  connection is closed, never pooled half-read (also when the caller is
  interrupted mid round trip);
* an idle connection that turns out dead before any reply (the server
  restarted since it was last used: the commands never ran) is replaced, the
  other idle ones dropped, and the commands sent once more;
* replies go through the client's own response callbacks and error replies
  become redis-py's exceptions, ``NOSCRIPT`` a :class:`~._errors.NoScript`
  (the transport reloads the script), so callers see what redis-py's
  pipeline gives.

Many threads may share a node: each round trip takes a connection of its
own from the idle list (popping and appending a list are atomic). A node
used in a child process after ``fork`` forgets the parent's connections.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hiredis

from ._errors import exceptions
from ._resp import (
    READ_SIZE,
    Callbacks,
    Dead,
    NodePool,
    connect_error,
    handshake_failed,
    hello_error,
    lost,
    no_reply,
    pack,
    plain_node_settings,
)

if TYPE_CHECKING:
    import redis


class _Connection:
    __slots__ = ("reader", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = hiredis.Reader()

    def round_trip(self, data: bytes, count: int) -> list[Any]:
        """Send ``data`` (``count`` commands), read ``count`` replies.
        Raises :class:`Dead` (telling whether any reply came) or the
        socket's ``TimeoutError``."""
        replies: list[Any] = []
        sock, reader = self.sock, self.reader
        try:
            sock.sendall(data)
            while len(replies) < count:
                reply = reader.gets()
                if reply is False:
                    chunk = sock.recv(READ_SIZE)
                    if not chunk:
                        raise ConnectionResetError("Redis closed the connection")
                    reader.feed(chunk)
                    continue
                replies.append(reply)
        except TimeoutError:
            raise
        except OSError as exc:
            raise Dead(exc, bool(replies)) from exc
        except hiredis.ProtocolError as exc:
            raise Dead(exc, True) from exc
        return replies

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - closing a socket hardly fails
            pass


class BlockingNode(NodePool[_Connection]):
    """A small pool of blocking connections to one Redis node (see the
    module doc). ``address`` is (host, port) or a Unix socket path."""

    def __init__(
        self,
        address: tuple[str, int] | str,
        *,
        hello: list[tuple[Any, ...]],
        timeout: float,
        connect_timeout: float,
        callbacks: Callbacks,
    ) -> None:
        super().__init__(
            address,
            hello=hello,
            timeout=timeout,
            connect_timeout=connect_timeout,
            callbacks=callbacks,
        )
        self._pid = os.getpid()

    @classmethod
    def for_client(cls, client: redis.Redis) -> BlockingNode | None:
        """A node with ``client``'s settings (address, timeouts, and AUTH,
        CLIENT SETNAME, SELECT as its connections send them), or None when
        this path does not cover its connection kind (see
        ``_resp.plain_node_settings``: TLS, Sentinel, a custom connection
        class, connect function or credential provider, a pinned connection)."""
        import redis.connection

        plain = plain_node_settings(
            client, redis.connection.Connection, redis.connection.UnixDomainSocketConnection
        )
        if plain is None:
            return None
        return cls(
            plain.address,
            hello=plain.hello,
            timeout=plain.timeout,
            connect_timeout=plain.connect_timeout,
            callbacks=client.response_callbacks,
        )

    def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` as one pipeline; their replies as redis-py's
        pipeline returns them (error replies as exception instances).
        Raises redis-py's ConnectionError or TimeoutError."""
        if self._closed:
            raise exceptions().ConnectionError("the producer is closed")
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()  # the parent's: never used here
        data = pack(commands)
        for attempt in (1, 2):
            try:
                conn: _Connection | None = self._idle.pop()
            except IndexError:
                conn = None
            pooled = conn is not None
            if conn is None:
                conn = self._open()
            try:
                replies = conn.round_trip(data, len(commands))
            except Dead as dead:
                conn.close()
                if pooled and not dead.replied and attempt == 1:
                    self._drop_idle()
                    continue
                raise lost(dead) from dead.cause
            except TimeoutError as exc:
                conn.close()
                raise no_reply(self._timeout) from exc
            except BaseException:
                conn.close()  # interrupted mid round trip: never pooled half-read
                raise
            self._put_back(conn)
            return self._parse(commands, replies)
        raise AssertionError("unreachable")  # pragma: no cover

    def _open(self) -> _Connection:
        address = self._address
        try:
            if isinstance(address, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self._connect_timeout)
                try:
                    sock.connect(address)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(address, timeout=self._connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise connect_error(address, exc, self._connect_timeout) from exc
        conn = _Connection(sock)
        try:
            sock.settimeout(self._timeout)
            if self._hello:
                try:
                    replies = conn.round_trip(pack(self._hello), len(self._hello))
                except (Dead, TimeoutError) as exc:
                    raise handshake_failed(exc) from exc
                error = hello_error(replies)
                if error is not None:
                    raise error
        except BaseException:
            conn.close()  # a failed or interrupted handshake: never used
            raise
        return conn
