"""Round trips to one Redis node on non-blocking plain sockets driven by the
running asyncio loop, hiredis for the protocol: the asyncio producer's
transport on a plain ``redis://`` or ``unix://`` client (the asyncio twin of
``_blocking_node.BlockingNode``, which it mirrors).

redis-py's asyncio pipeline costs far more than a loopback round trip in
Python (its connection bookkeeping, locks, observability hooks, per-argument
encoding, a ``wait_for`` per read), and a producer's enqueue is one round
trip: this path writes the packed commands and reads the replies, nothing
else. A write is tried on the socket at once (it nearly always takes the
whole request); the task waits on the loop only for what the socket cannot
do now (a reply not yet there, a full send buffer), by one ``add_reader``
(``add_writer``) and one timer per wait. On a stdlib loop with nothing
else to do, the reply is waited for without the loop's passes: blocked in
``poll()`` on the socket and the loop's epoll descriptor, at most 2 ms and
never past the loop's next timer, given up as soon as the loop has work
(``_asyncio_quiet``). It covers what ``BlockingNode``
covers (plain TCP and Unix-socket connections; user, password, database and
client name from the client's settings); TLS, Sentinel, Cluster, custom
connection classes and credential providers, and clients speaking RESP3,
keep redis-py's asyncio pipeline (``_asyncio.AsyncioExecutor``).

It fails as ``BlockingNode`` fails:

* a round trip, once started, runs to completion or fails, bounded by the
  client's socket timeout (a ``TimeoutError``, never retried: the commands
  may be running);
* every failure is redis-py's ``ConnectionError``/``TimeoutError`` and the
  connection is closed, never pooled half-read, also when the awaiting task
  is cancelled mid round trip (``CancelledError`` goes on, the commands may
  have run);
* an idle connection that turns out dead before any reply (the server
  restarted since it was last used: the commands never ran) is replaced, the
  other idle ones dropped, and the commands sent once more;
* replies go through the client's own response callbacks and error replies
  become redis-py's exceptions, ``NOSCRIPT`` a :class:`~._errors.NoScript`
  (the transport reloads the script), so callers see what redis-py's
  pipeline gives.

Every task of the loop may share a node: each round trip takes a
connection of its own from the idle list (at most ``_resp.MAX_IDLE`` kept).
Its sockets belong to the loop that uses it first (``RuntimeError`` in
another: the executor checks this before any call).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hiredis

from ._asyncio_quiet import QuietLoop, poller
from ._errors import exceptions
from ._resp import (
    READ_SIZE,
    Dead,
    NodePool,
    connect_error,
    handshake_failed,
    hello_error,
    lost,
    no_reply,
    pack,
    plain_node_settings,
    read_replies,
)

if TYPE_CHECKING:
    import redis.asyncio


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Connection:
    __slots__ = ("fd", "poll", "poll_epoll", "reader", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.reader = hiredis.Reader()
        #: :meth:`_block`'s ``poll`` object (made on its first block), and
        #: the epoll descriptor it watches.
        self.poll: Any = None
        self.poll_epoll = -1

    async def round_trip(
        self,
        loop: asyncio.AbstractEventLoop,
        data: bytes,
        count: int,
        timeout: float,
        quiet: QuietLoop | None = None,
    ) -> list[Any]:
        """Send ``data`` (``count`` commands), read ``count`` replies, all
        within ``timeout`` seconds; in a ``quiet`` loop, blocked for without
        the loop's passes (``_asyncio_quiet``) as long as it stays quiet.
        Raises :class:`Dead` (telling whether any reply came) or
        ``TimeoutError``."""
        replies: list[Any] = []
        sock, reader = self.sock, self.reader
        now = loop.time()
        deadline = now + timeout
        try:
            sent = 0
            if quiet is not None:
                budget = quiet.budget()
                if budget:
                    if budget > timeout:
                        budget = timeout
                    try:
                        sent = sock.send(data)
                    except BlockingIOError:
                        pass
                    if sent == len(data):
                        if self._block(quiet.epoll_fd, count, replies, budget, now + budget):
                            quiet.blocked += 1
                            return replies
                        quiet.interrupted += 1
            view = memoryview(data)[sent:]
            while view:
                try:
                    view = view[sock.send(view) :]
                except BlockingIOError:
                    await self._ready(loop, deadline, write=True)
            while len(replies) < count:
                reply = reader.gets()
                if reply is False:
                    try:
                        chunk = sock.recv(READ_SIZE)
                    except BlockingIOError:
                        await self._ready(loop, deadline, write=False)
                        continue
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

    def _block(
        self, epoll_fd: int, count: int, replies: list[Any], wait: float, until: float
    ) -> bool:
        """Block in ``poll()`` for the replies of a sent request, ``wait``
        seconds at first and never past ``until`` (``time.monotonic()``),
        while the loop's epoll descriptor ``epoll_fd`` stays unready;
        whether all ``count`` came (those that did are in ``replies``, the
        rest for :meth:`round_trip` to read). Raises OSError,
        ``hiredis.ProtocolError``."""
        poll = self.poll
        if poll is None or self.poll_epoll != epoll_fd:
            poll = self.poll = poller(self.fd, epoll_fd)
            self.poll_epoll = epoll_fd
        sock, reader, fd = self.sock, self.reader, self.fd
        while True:
            # (milliseconds, rounded up: as the loop's own select rounds them)
            ready = poll.poll(wait * 1000.0)
            if len(ready) != 1 or ready[0][0] != fd:
                return False  # the budget is spent, or the loop has work
            if read_replies(sock, reader, replies, count):
                return True
            wait = until - time.monotonic()
            if wait <= 0.0:
                return False

    async def _ready(
        self, loop: asyncio.AbstractEventLoop, deadline: float, *, write: bool
    ) -> None:
        """Until the socket can be read (written), or ``TimeoutError`` at ``deadline``."""
        waiter: asyncio.Future[None] = loop.create_future()
        fd = self.fd
        if write:
            loop.add_writer(fd, _wake, waiter)
        else:
            loop.add_reader(fd, _wake, waiter)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if write:
                loop.remove_writer(fd)
            else:
                loop.remove_reader(fd)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - closing a socket hardly fails
            pass


class AsyncioNode(NodePool[_Connection]):
    """A small pool of non-blocking connections to one Redis node, driven by
    the running asyncio loop (see the module doc). ``address`` is (host,
    port) or a Unix socket path."""

    #: The quiet state of the loop the node belongs to (``_asyncio_quiet``),
    #: made on its first round trip.
    _quiet: QuietLoop | None = None

    @classmethod
    def for_client(cls, client: redis.asyncio.Redis) -> AsyncioNode | None:
        """A node with ``client``'s settings (address, timeouts, and AUTH,
        CLIENT SETNAME, SELECT as its connections send them), or None when
        this path does not cover its connection kind (see
        ``_resp.plain_node_settings``: TLS, Sentinel, a custom connection
        class, connect function or credential provider, a pinned connection,
        RESP3)."""
        import redis.asyncio.connection

        plain = plain_node_settings(
            client,
            redis.asyncio.connection.Connection,
            redis.asyncio.connection.UnixDomainSocketConnection,
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

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` as one pipeline; their replies as redis-py's
        pipeline returns them (error replies as exception instances).
        Raises redis-py's ConnectionError or TimeoutError; cancelling the
        awaiting task closes the connection it was using."""
        if self._closed:
            raise exceptions().ConnectionError("the producer is closed")
        loop = asyncio.get_running_loop()
        quiet = self._quiet
        if quiet is None or quiet.loop is not loop:
            quiet = self._quiet = QuietLoop(loop)
        data = pack(commands)
        for attempt in (1, 2):
            try:
                conn: _Connection | None = self._idle.pop()
            except IndexError:
                conn = None
            pooled = conn is not None
            if conn is None:
                conn = await self._open(loop)
            try:
                replies = await conn.round_trip(loop, data, len(commands), self._timeout, quiet)
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
                conn.close()  # cancelled mid round trip: never pooled half-read
                raise
            self._put_back(conn)
            return self._parse(commands, replies)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        address = self._address
        try:
            async with asyncio.timeout(self._connect_timeout):
                sock = await _connect(loop, address)
        except OSError as exc:  # TimeoutError too
            raise connect_error(address, exc, self._connect_timeout) from exc
        conn = _Connection(sock)
        if self._hello:
            try:
                try:
                    replies = await conn.round_trip(
                        loop, pack(self._hello), len(self._hello), self._timeout
                    )
                except (Dead, TimeoutError) as exc:
                    raise handshake_failed(exc) from exc
                error = hello_error(replies)
                if error is not None:
                    raise error
            except BaseException:
                conn.close()  # a failed or cancelled handshake: never used
                raise
        return conn


async def _connect(
    loop: asyncio.AbstractEventLoop, address: tuple[str, int] | str
) -> socket.socket:
    """A connected non-blocking socket to ``address`` (a host name is
    resolved by the loop, each address tried in turn). Raises OSError."""
    if isinstance(address, str):
        targets: list[tuple[int, Any]] = [(socket.AF_UNIX, address)]
    else:
        host, port = address
        try:  # an IP address: no look-up, nothing to wait for
            infos = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        except socket.gaierror:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        targets = [(family, sockaddr) for family, _, _, _, sockaddr in infos]
    error: OSError | None = None
    for family, sockaddr in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    assert error is not None  # getaddrinfo gives one address at least, or raises
    raise error
