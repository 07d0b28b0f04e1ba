"""Trio-native round trips to one Redis node: Trio sockets, hiredis for the
protocol, no thread hop.

A hop through ``trio.to_thread`` costs more than a local Redis round trip
itself (about 130 us of CPU here), which capped one-at-a-time enqueues and
added to every batch of the worker's hot path. This path serves plain TCP
and Unix-socket connections to a single node, the common deployment, and the
master of a Redis Sentinel service, and each master of a Redis Cluster (one
node per master, see ``_cluster``); TLS, custom credential providers and the
blocking reads of a Cluster or behind Sentinel keep using redis-py in
threads (see ``_adapter``).

It behaves like the thread hop it replaces:

* a round trip, once started, runs to completion or fails; cancelling the
  caller waits for it (the outcome of a state change is never lost between
  the store and the worker), bounded by the socket timeout;
* at most :data:`MAX_OPEN` round trips run at once per node; more wait
  (cancellably: nothing was sent) for a connection;
* every failure surfaces as a redis-py ``ConnectionError``/``TimeoutError``
  (the adapter turns those into ``StoreError``), and the connection is dropped;
* a pooled connection that turns out dead before any reply (the server
  restarted since) is replaced and the batch sent again once, as redis-py's
  retry does;
* replies go through redis-py's own response callbacks, and error replies
  become redis-py's exception classes (``NoScriptError`` and friends), so
  callers see exactly what redis-py would have returned; ``NOSCRIPT`` is a
  :class:`~._errors.NoScript` until the adapter has reloaded the script.

A :class:`NodeClient` is this path without a redis-py client at all, for a
plain ``redis://`` or ``unix://`` URL: the node's settings come from the
URL (``_connect.node_address``), the callbacks of the store's own commands
from a table that gives what redis-py's give (:class:`ReplyCallbacks`), and
redis-py is imported only when something needs it (a result waiter's
subscription, another command's callback, an exception).

Behind Redis Sentinel (a :class:`~._sentinel.MasterWatch`), the node is
whichever the sentinels name as the master:

* a new connection goes to the address the watch knows (asking the sentinels
  when it knows none) and checks with ``ROLE`` that the node is a master, so
  reads never come from a replica (a remembered address that turns out to be
  a replica is looked up again at once; one the sentinels still name is a
  ConnectionError: they have not finished a failover);
* a dead connection, or a refused connect, makes the watch forget the
  address, so the next connection asks the sentinels again (after a master's
  death, that is the promoted replica once the failover is done);
* a ``READONLY`` reply (the node was demoted under a pooled connection)
  drops the idle connections, forgets the address, and sends the commands
  that got it once more on a new connection: a command refused with
  READONLY did not run, so that is as safe as the ``NOSCRIPT`` retry;
* before each round trip the watch may start its periodic lookup (never
  waited for); idle connections to an address that is no longer the master
  are closed instead of used.
"""

from __future__ import annotations

import contextlib
import functools
import math
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import hiredis
import trio

from . import _quiet
from ._batch import with_waits as with_waits
from ._errors import exceptions, reply_error
from ._resp import (
    AS_SENT as AS_SENT,
)
from ._resp import (
    CONVERTED as CONVERTED,
)
from ._resp import (
    READ_SIZE,
    Callbacks,
    Dead,
    ReplyCallbacks,
    client_handshake,
    handshake,
    is_readonly,
    pack,
    parse_replies,
    read_replies,
)
from ._resp import (
    redis_py_callbacks as redis_py_callbacks,
)

if TYPE_CHECKING:
    import redis
    import redis.cluster

    from ._connect import NodeAddress
    from ._sentinel import Address, MasterWatch

#: Connections in use per node at most: more round trips at once wait for
#: one (1,000 result waiters reading their jobs at once opened 1,000
#: connections, and the churn cost more than the reads).
MAX_OPEN = 32
#: Idle connections kept per node (as many as may be open: a burst reuses them).
MAX_IDLE = MAX_OPEN
#: Idle connections kept for blocking waits (a worker has two waiters).
MAX_BLOCKING_IDLE = 4


@functools.cache
def _not_master() -> type[Exception]:
    """The ConnectionError of a node the watch named that says it is not a
    master (made on first use: only behind Sentinel, where redis-py is imported)."""

    class NotMaster(exceptions().ConnectionError):  # type: ignore[misc, name-defined, unused-ignore]
        pass

    return NotMaster


def _at(address: Address | None) -> str:
    return "" if address is None else f" at {address[0]}:{address[1]}"


def _connect_failure(exc: OSError) -> str:
    """Why a connect failed, in the system's words ("Connection refused"): Trio
    reports "all attempts ... failed" with each attempt's error as the cause."""
    cause: BaseException | None = exc
    while cause is not None and not (isinstance(cause, OSError) and cause.strerror):
        if isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]
        else:
            cause = cause.__cause__
    if isinstance(cause, OSError) and cause is not exc:
        return f"{exc} ({cause.strerror})"
    return str(exc)


class _Connection:
    def __init__(self, stream: trio.abc.Stream, address: Address | None = None) -> None:
        self.stream = stream
        #: The socket under a SocketStream: round trips use it directly (the
        #: stream's conflict detection and error translation cost about as
        #: much as the system calls, and one task uses a connection at a time).
        self.sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        #: The stdlib socket under it (non-blocking), when Trio's socket has
        #: one: a round trip then writes at once and waits for the reply in
        #: one scheduler pass (Trio's socket methods make one more per send).
        raw = getattr(self.sock, "_sock", None)
        self.raw: socket.socket | None = raw if isinstance(raw, socket.socket) else None
        self.reader = hiredis.Reader()
        #: The master this connection was opened to (Sentinel only).
        self.address = address
        #: The round trip begun on the stdlib socket (:meth:`begin`): what is
        #: left to write, how many replies it waits for, those that came.
        self._out = _NOTHING_TO_WRITE
        self._count = 0
        self._got: list[Any] = []
        #: Set by the :class:`_Timer` when a round trip passed its deadline
        #: (the socket is being closed: never pooled again).
        self.expired = False
        #: Redis's ID of this connection (``CLIENT ID``), once a blocking
        #: wait asked for it (:meth:`NativeNode.block_then`).
        self.client_id: int | None = None
        #: :meth:`pump_quiet`'s ``poll`` object, and the epoll it watches.
        self._poll: Any = None
        self._poll_epoll = -1

    def begin(self, commands: Sequence[Sequence[Any]]) -> None:
        """Begin a round trip of ``commands`` on the stdlib socket
        (:attr:`raw`); :meth:`pump` carries it out."""
        self._out = memoryview(pack(commands))
        self._count = len(commands)
        self._got = []

    async def pump(self) -> list[Any]:
        """Carry out the round trip :meth:`begin` began: write what the
        socket takes now (waiting for room only when it is full), then wait
        for replies until every one came; they are returned. The one wait
        is a checkpoint, as Trio's socket methods are. Resumable: a
        Cancelled at one of its waits leaves the round trip where it was,
        and calling this again goes on from there. Raises :class:`Dead`."""
        raw = self.raw
        assert raw is not None
        replies = self._got
        try:
            view = self._out
            while view:
                try:
                    view = self._out = view[raw.send(view) :]
                except BlockingIOError:
                    if self.expired:  # (between two waits: see _Timer)
                        raise trio.ClosedResourceError("the round trip timed out") from None
                    await trio.lowlevel.wait_writable(raw)
            self._out = _NOTHING_TO_WRITE  # (an empty slice would keep the request alive)
            reader = self.reader
            count = self._count
            while True:
                reply = reader.gets()
                if reply is not False:
                    replies.append(reply)
                    if len(replies) == count:
                        self._got = []  # an idle connection holds no replies
                        return replies
                    continue
                if self.expired:  # (between two waits: see _Timer)
                    raise trio.ClosedResourceError("the round trip timed out")
                await trio.lowlevel.wait_readable(raw)
                try:
                    chunk = raw.recv(READ_SIZE)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise ConnectionResetError("Redis closed the connection")
                reader.feed(chunk)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise Dead(exc, bool(replies)) from exc
        except hiredis.ProtocolError as exc:
            raise Dead(exc, True) from exc

    def pump_quiet(self, epoll_fd: int, budget: float) -> list[Any] | None:
        """:meth:`pump` without Trio's scheduler, in a quiet run (see
        ``_quiet``): write, then block in ``poll()`` for the replies for at
        most ``budget`` seconds. The replies, or None when it gave up (the
        socket's buffer full, the budget spent) or ``_quiet.BUSY``
        (``epoll_fd`` ready) when it gave up: the round trip stands where it
        got to, for :meth:`pump` to go on.
        Raises :class:`Dead`."""
        raw = self.raw
        assert raw is not None
        replies = self._got
        try:
            if not self._write_now(raw):
                return None
            poll = self._poll
            if poll is None or self._poll_epoll != epoll_fd:
                poll = self._poll = _quiet.poller(raw.fileno(), epoll_fd)
                self._poll_epoll = epoll_fd
            reader = self.reader
            count = self._count
            until = time.perf_counter() + budget
            wait = budget
            while True:
                # (milliseconds, rounded up: as Trio's own wait rounds them)
                ready = poll.poll(wait * 1000.0)
                if not ready:
                    return None  # the budget is spent
                if len(ready) != 1 or ready[0][0] == epoll_fd:
                    return _quiet.BUSY  # the run has work
                if read_replies(raw, reader, replies, count):
                    self._got = []  # an idle connection holds no replies
                    return replies
                wait = until - time.perf_counter()
        except OSError as exc:
            raise Dead(exc, bool(replies)) from exc
        except hiredis.ProtocolError as exc:
            raise Dead(exc, True) from exc

    def _write_now(self, raw: socket.socket) -> bool:
        """Write what the socket takes now; whether all of it is written."""
        view = self._out
        if not view:
            return True
        try:
            sent = raw.send(view)
        except BlockingIOError:
            return False
        while sent != len(view):
            view = self._out = view[sent:]
            try:
                sent = raw.send(view)
            except BlockingIOError:
                return False
        self._out = _NOTHING_TO_WRITE  # (an empty slice would keep the request alive)
        return True

    def write_begun(self) -> None:
        """Write what the socket takes now of the round trip :meth:`begin`
        began (no wait: :meth:`pump` writes the rest). A write that fails
        is left for :meth:`pump`, which meets the same error."""
        assert self.raw is not None
        with contextlib.suppress(OSError):
            self._write_now(self.raw)

    def take_ready(self) -> list[Any] | None:
        """The replies of the round trip :meth:`begin` began, when every
        one is there already (it was written while another round trip was
        waited for), read with no wait; None when some are still to come
        (:meth:`pump` goes on from there). Raises :class:`Dead`."""
        if self._out:
            return None
        try:
            if read_replies(self.raw, self.reader, self._got, self._count):  # type: ignore[arg-type]
                replies, self._got = self._got, []
                return replies
        except OSError as exc:
            raise Dead(exc, bool(self._got)) from exc
        except hiredis.ProtocolError as exc:
            raise Dead(exc, True) from exc
        return None

    async def round_trip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        if self.raw is not None:
            self.begin(commands)
            return await self.pump()
        replies: list[Any] = []
        try:
            await self.send(pack(commands))
            await self.read(len(commands), replies)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise Dead(exc, bool(replies)) from exc
        except hiredis.ProtocolError as exc:
            raise Dead(exc, True) from exc
        return replies

    async def send(self, data: bytes) -> None:
        sock = self.sock
        if sock is not None:
            sent = await sock.send(data)
            if sent < len(data):
                view = memoryview(data)[sent:]
                while view:
                    view = view[await sock.send(view) :]
        else:
            await self.stream.send_all(data)

    async def read(self, count: int, replies: list[Any]) -> None:
        """Append the next replies to ``replies`` until it holds ``count``."""
        sock = self.sock
        while len(replies) < count:
            reply = self.reader.gets()
            if reply is False:
                chunk = (
                    await sock.recv(READ_SIZE)
                    if sock is not None
                    else await self.stream.receive_some(READ_SIZE)
                )
                if not chunk:
                    raise ConnectionResetError("Redis closed the connection")
                self.reader.feed(bytes(chunk) if isinstance(chunk, bytearray) else chunk)
                continue
            replies.append(reply)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)


_NOTHING_TO_WRITE = memoryview(b"")


class _Timer:
    """Times the round trips of one Trio run that take no cancel scope (a
    lone enqueue's, see :meth:`NativeNode.execute`), to their deadlines: a
    system task that marks each round trip past its deadline ``expired``
    and ends its wait with ``notify_closing`` (the caller closes its
    connection: it is never used again). Entering and leaving a cancel
    scope costs about 48,000 instructions under Trio 0.35; this costs a
    clock reading, a dict entry and a comparison per round trip.

    It sleeps until the earliest deadline in flight, for ever when none is;
    a round trip whose deadline comes before its planned wake-up moves the
    wake-up (:meth:`add`), so no deadline is missed and an idle run never
    wakes it."""

    def __init__(self) -> None:
        #: Round trips in flight: connection -> deadline (trio.current_time()).
        self.inflight: dict[_Connection, float] = {}
        self._wake = math.inf
        self._nap: trio.CancelScope | None = None
        #: The run's quiet state (``_quiet``), kept here: one per run too.
        self.quiet = _quiet.QuietRun()

    def add(self, conn: _Connection, timeout: float) -> None:
        """Time a round trip on ``conn`` beginning now (remove it from
        :attr:`inflight` once it ended)."""
        deadline = trio.current_time() + timeout
        self.inflight[conn] = deadline
        if deadline < self._wake:
            self._wake = deadline
            if self._nap is not None:
                self._nap.deadline = deadline

    async def run(self) -> None:
        while True:
            now = trio.current_time()
            wake = math.inf
            for conn, deadline in list(self.inflight.items()):
                if deadline <= now:
                    del self.inflight[conn]
                    conn.expired = True
                    if conn.raw is not None:  # (a timed one has; this task must never raise)
                        with contextlib.suppress(OSError, ValueError):
                            trio.lowlevel.notify_closing(conn.raw)
                elif deadline < wake:
                    wake = deadline
            self._wake = wake
            with trio.CancelScope(deadline=wake) as self._nap:
                await trio.sleep_forever()


_TIMER: trio.lowlevel.RunVar[_Timer] = trio.lowlevel.RunVar("chronos_trio_redis_timer")


def _timer() -> _Timer:
    """This Trio run's :class:`_Timer` (started on first use)."""
    try:
        return _TIMER.get()
    except LookupError:
        timer = _Timer()
        _TIMER.set(timer)
        trio.lowlevel.spawn_system_task(timer.run, name="chronos-redis-round-trip-timer")
        return timer


def _tcp(host: str, port: int) -> Callable[[], Awaitable[trio.abc.Stream]]:
    async def connect() -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    return connect


def _unix(path: str) -> Callable[[], Awaitable[trio.abc.Stream]]:
    async def connect() -> trio.abc.Stream:
        return await trio.open_unix_socket(path)

    return connect


class NativeNode:
    """A small pool of Trio connections to one Redis node."""

    def __init__(
        self,
        *,
        connect: Callable[[], Awaitable[trio.abc.Stream]] | None,
        handshake: list[tuple[Any, ...]],
        timeout: float,
        connect_timeout: float,
        callbacks: Callbacks,
        watch: MasterWatch | None = None,
    ) -> None:
        self._connect = connect
        self._watch = watch
        self._handshake = handshake
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._callbacks = callbacks
        #: Each command name's callback, looked up once (``parse_replies``).
        self._by_name: dict[Any, Callable[..., Any] | None] = {}
        self._idle: list[_Connection] = []
        self._stale: list[_Connection] = []
        self._closed = False
        self._slots = trio.Semaphore(MAX_OPEN)
        #: Idle connections for blocking waits (XREAD BLOCK), apart from the pool.
        self._blocking: list[_Connection] = []

    @classmethod
    def for_address(cls, address: NodeAddress) -> NativeNode:
        """A native node for a plain URL's node (see :class:`NodeClient`)."""
        path = address.path
        return cls(
            connect=_tcp(address.host, address.port) if path is None else _unix(path),
            handshake=handshake(address.username, address.password, address.db),
            timeout=address.socket_timeout,
            connect_timeout=address.connect_timeout,
            callbacks=ReplyCallbacks(),
        )

    @classmethod
    def for_client(
        cls,
        client: redis.Redis,
        watch: MasterWatch | None = None,
        *,
        connect_func: Callable[..., Any] | None = None,
    ) -> NativeNode | None:
        """A native node with ``client``'s settings, or None when this path does
        not cover its connection kind (TLS, custom connection classes or
        credential providers): redis-py in threads then. ``watch``: the client
        is a Sentinel master's, and the node is the master ``watch`` names.
        ``connect_func``: the client's ``redis_connect_func`` when the caller
        knows it sends nothing beyond AUTH/SELECT (a Cluster node's client
        has the cluster's own, which adds ``READONLY`` only for replica reads);
        any other one means this path does not cover the client."""
        import redis.connection  # imported already: there is a client

        from ._sentinel import SentinelConnection

        pool = client.connection_pool
        kind = pool.connection_class
        kw = pool.connection_kwargs
        on_connect = kw.get("redis_connect_func")
        if kw.get("credential_provider") is not None or (
            on_connect is not None and on_connect != connect_func
        ):
            return None
        connect: Callable[[], Awaitable[trio.abc.Stream]] | None
        if kind is redis.connection.Connection:
            connect = _tcp(kw.get("host", "localhost"), int(kw.get("port", 6379)))
        elif kind is redis.connection.UnixDomainSocketConnection:
            connect = _unix(kw["path"])
        elif kind is SentinelConnection and watch is not None:
            connect = None  # to the master the watch names (see _open)
        else:
            return None
        hello = client_handshake(kw)
        timeout = kw.get("socket_timeout") or 5.0
        if watch is not None:
            hello.append(("ROLE",))  # checked in _open: a master, or not used
        return cls(
            connect=connect,
            handshake=hello,
            timeout=float(timeout),
            connect_timeout=float(kw.get("socket_connect_timeout") or timeout),
            callbacks=client.response_callbacks,
            watch=watch,
        )

    async def execute(self, commands: Sequence[Sequence[Any]], lone: bool = False) -> list[Any]:
        """Send ``commands`` as one pipeline; their replies, error replies as
        redis-py exception instances. Raises redis-py's ConnectionError or
        TimeoutError when the node cannot be reached in time.

        ``lone``: the caller is a plan that must run to completion even if
        its caller is cancelled (``StoreContext.run_shielded``), as a
        shielded scope around it would make it, without one: every wait
        here is then shielded (a wait for a connection slot, a connect in a
        shielded scope each; a round trip on a stdlib socket by finishing,
        in a shielded scope, one whose wait a cancellation ended, and
        otherwise in its usual scope), and such a round trip is timed by
        this run's :class:`_Timer` instead of a scope's deadline, to the
        same timeout and error. The cancellation is delivered at the
        caller's next checkpoint (Trio's cancellation stays until its scope
        is left). The same guarantees either way."""
        if self._closed:
            raise exceptions().ConnectionError("the store is closed")
        # Waiting for a connection is cancellable (unless lone); a round trip
        # once started is not (see the module docstring).
        try:
            # no scheduler pass when a slot is free (acquire() always makes one)
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            if not lone:
                await self._slots.acquire()
            else:
                with trio.CancelScope(shield=True):
                    await self._slots.acquire()
        try:
            replies = await self._execute(commands, lone)
            if self._watch is not None:
                readonly = [i for i, r in enumerate(replies) if is_readonly(r)]
                refused = with_waits(commands, readonly)
                if refused:
                    # Demoted under us: those commands did not run; send them
                    # once more to whoever the sentinels name now.
                    self._watch.forget()
                    await self._drop_idle()
                    again = await self._execute([commands[i] for i in refused], lone)
                    for i, reply in zip(refused, again, strict=True):
                        replies[i] = reply
        finally:
            self._slots.release()
        return parse_replies(self._callbacks, self._by_name, commands, replies)

    # -- several nodes at once (a Cluster's masters) ------------------------------------
    def can_begin(self) -> bool:
        """Whether :meth:`begin_nowait` can begin a round trip now: an idle
        connection on a stdlib socket and a free slot (not behind Sentinel,
        not closed)."""
        idle = self._idle
        return (
            bool(idle)
            and idle[-1].raw is not None
            and self._slots.value > 0
            and self._watch is None
            and not self._closed
        )

    def begin_nowait(self, commands: Sequence[Sequence[Any]]) -> _Connection | None:
        """Begin a round trip of ``commands`` on an idle connection, written
        as far as its socket takes it now, with no wait, for :meth:`finish`:
        a caller talking to several nodes writes to each of them before it
        waits for any (one scheduler pass for all their replies, no task
        per node). None, having sent nothing, when :meth:`can_begin` is not
        true (use :meth:`execute` then)."""
        if not self.can_begin():
            return None
        self._slots.acquire_nowait()
        conn = self._idle.pop()
        conn.begin(commands)
        conn.write_begun()
        return conn

    async def finish(
        self, conn: _Connection, commands: Sequence[Sequence[Any]], begun_at: float
    ) -> list[Any]:
        """The replies of the round trip :meth:`begin_nowait` began on
        ``conn`` at ``begun_at`` (Trio's clock), as :meth:`execute` returns
        them, with its guarantees: never abandoned once sent (a shielded
        wait), within the socket timeout of ``begun_at``, a pooled
        connection that died before any reply replaced and the commands
        sent once more. Raises as :meth:`execute` does."""
        try:
            replies = await self._finish(conn, begun_at + self._timeout)
        finally:
            self._slots.release()
        if replies is None:  # died before any reply: the batch never ran
            return await self.execute(commands)
        return parse_replies(self._callbacks, self._by_name, commands, replies)

    async def _finish(self, conn: _Connection, deadline: float) -> list[Any] | None:
        try:
            replies = conn.take_ready()
            if replies is None:
                with trio.CancelScope(shield=True, deadline=deadline) as scope:
                    replies = await conn.pump()
                if scope.cancelled_caught:
                    await conn.aclose()
                    raise exceptions().TimeoutError(
                        f"no reply from Redis within {self._timeout:g}s"
                    )
        except Dead as dead:
            await conn.aclose()
            if not dead.replied:
                await self._drop_idle()  # as stale as the one that died
                return None
            raise exceptions().ConnectionError(f"lost the connection to Redis: {dead}") from (
                dead.cause
            )
        if len(self._idle) < MAX_IDLE and not self._closed:
            self._idle.append(conn)
        else:
            await conn.aclose()
        return replies

    async def abandon(self, conn: _Connection) -> None:
        """Give up the round trip :meth:`begin_nowait` began on ``conn``
        (its caller failed before :meth:`finish`): the connection is closed
        and its slot freed."""
        self._slots.release()
        await conn.aclose()

    def _take_idle(self) -> _Connection | None:
        """An idle connection, skipping (and closing) those opened to a node
        the watch no longer names as the master."""
        watch = self._watch
        if watch is not None:
            watch.poke()
        while self._idle:
            conn = self._idle.pop()
            if watch is None or watch.address is None or conn.address == watch.address:
                return conn
            self._stale.append(conn)
        return None

    async def _execute(self, commands: Sequence[Sequence[Any]], lone: bool) -> list[Any]:
        for attempt in (1, 2):
            conn = self._take_idle()
            if self._stale:
                await self._close_stale()
            pooled = conn is not None
            try:
                if conn is None:
                    if not lone:
                        conn = await self._open()
                    else:
                        with trio.CancelScope(shield=True):
                            conn = await self._open()
                        assert conn is not None  # (the scope cancels nothing)
                if lone and conn.raw is not None:
                    replies, timed_out = await self._lone_round_trip(conn, commands)
                else:
                    # One scope is both the shield (once sent, a round trip is
                    # never abandoned: see the module docstring) and its timeout.
                    with trio.CancelScope(
                        shield=True, deadline=trio.current_time() + self._timeout
                    ) as scope:
                        replies = await conn.round_trip(commands)
                    timed_out = scope.cancelled_caught
                if timed_out:
                    await conn.aclose()
                    raise exceptions().TimeoutError(
                        f"no reply from Redis within {self._timeout:g}s"
                    )
            except Dead as dead:
                await conn.aclose()  # type: ignore[union-attr]
                if self._watch is not None:
                    self._watch.forget()
                # A pooled connection that died before any reply: the server
                # went away since it was last used, so the batch never ran,
                # and the other idle connections are as stale: drop them all
                # and send once more on a new connection.
                if pooled and not dead.replied and attempt == 1:
                    await self._drop_idle()
                    continue
                raise exceptions().ConnectionError(
                    f"lost the connection to Redis: {dead}"
                ) from dead.cause
            if len(self._idle) < MAX_IDLE and not self._closed and not conn.expired:
                self._idle.append(conn)
            else:
                await conn.aclose()
            return replies
        raise AssertionError("unreachable")  # pragma: no cover

    async def _lone_round_trip(
        self, conn: _Connection, commands: Sequence[Sequence[Any]]
    ) -> tuple[list[Any], bool]:
        """A round trip on ``conn``'s stdlib socket with no scope (see
        :meth:`execute`): in a quiet run, blocked for without Trio's
        scheduler (``_quiet``); otherwise, or once that gave up, timed by
        the run's :class:`_Timer` and finished in a shielded scope when a
        cancellation ends its wait. The replies and whether it timed out
        (no replies then); raises :class:`Dead`."""
        timer = _timer()
        quiet = timer.quiet
        conn.begin(commands)
        budget = quiet.budget()
        if budget:
            got = conn.pump_quiet(quiet.epoll_fd, budget)
            if got:
                quiet.blocked += 1
                return got, False
            quiet.gave_up(got is _quiet.BUSY)
        timer.add(conn, self._timeout)
        probe = quiet.probe()
        try:
            try:
                return await conn.pump(), False
            except trio.Cancelled:
                # Sent (or being sent): never abandoned. The caller's scope
                # stays cancelled, so its next checkpoint raises again.
                with trio.CancelScope(shield=True):
                    replies = await conn.pump()
                return replies, False
        except Dead:
            if conn.expired:  # the timer woke the wait: its deadline passed
                return [], True
            raise
        finally:
            timer.inflight.pop(conn, None)
            if probe is not None:
                quiet.probed(probe)

    async def _open(self) -> _Connection:
        if self._watch is None:
            return await self._open_once()
        lookups = self._watch.lookups
        try:
            return await self._open_once()
        except _not_master():
            if self._watch.lookups != lookups:
                raise  # the sentinels were asked just now: they still name it
        # The address was remembered from before: ask the sentinels once more.
        return await self._open_once()

    async def _open_once(self) -> _Connection:
        address: Address | None = None
        try:
            if self._watch is not None:
                address = await self._watch.current()
            with trio.fail_after(self._connect_timeout):
                if address is not None:
                    stream: trio.abc.Stream = await trio.open_tcp_stream(*address)
                elif self._connect is not None:
                    stream = await self._connect()
                else:
                    raise exceptions().ConnectionError("no address to connect to")
                conn = _Connection(stream, address)
        except trio.TooSlowError:
            self._forget()
            raise exceptions().TimeoutError(
                f"could not connect to Redis{_at(address)} within {self._connect_timeout:g}s"
            ) from None
        except OSError as exc:
            self._forget()
            raise exceptions().ConnectionError(
                f"could not connect to Redis{_at(address)}: {_connect_failure(exc)}"
            ) from exc
        if self._handshake:
            try:
                with trio.fail_after(self._timeout):
                    replies = await conn.round_trip(self._handshake)
            except (Dead, trio.TooSlowError) as exc:
                await conn.aclose()
                self._forget()
                raise exceptions().ConnectionError(f"Redis handshake failed: {exc}") from exc
            for reply in replies:
                if isinstance(reply, hiredis.ReplyError):
                    await conn.aclose()
                    raise reply_error(str(reply))
            if self._watch is not None:
                role = replies[-1]
                if not (isinstance(role, list) and role and role[0] == b"master"):
                    await conn.aclose()
                    self._forget()
                    what = role[0].decode() if isinstance(role, list) and role else repr(role)
                    raise _not_master()(
                        f"Redis{_at(address)} is not the master of "
                        f"{self._watch.service!r} (its role is {what}); "
                        "the sentinels have not finished a failover"
                    )
        return conn

    def _forget(self) -> None:
        if self._watch is not None:
            self._watch.forget()

    async def _close_stale(self) -> None:
        stale, self._stale = self._stale, []
        for conn in stale:
            await conn.aclose()

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()

    async def close_idle(self) -> None:
        """Close the idle connections (the node failed, or is no longer the
        one to talk to); round trips in flight finish on theirs, and later
        ones open new connections."""
        await self._drop_idle()

    # -- blocking waits ---------------------------------------------------------------
    async def block(self, command: Sequence[Any], block: float, slack: float) -> Any:
        """Send ``command``, a blocking read that ends within ``block``
        seconds (``XREAD BLOCK``), on a connection of its own (blocking waits
        never hold a round-trip slot), and return its reply. Cancellable at
        once: a cancelled wait's connection is handed to a background reader,
        which drops the reply (a blocking read changes nothing, so nothing
        is lost) and keeps the connection for the next wait. Raises
        redis-py's ConnectionError/TimeoutError like :meth:`execute`; a reply
        later than ``block + slack`` is a TimeoutError."""
        if self._closed:
            raise exceptions().ConnectionError("the store is closed")
        for attempt in (1, 2):
            pooled = bool(self._blocking)
            conn = self._blocking.pop() if pooled else await self._open()
            sent = False
            replies: list[Any] = []
            try:
                with trio.CancelScope(deadline=trio.current_time() + block + slack) as scope:
                    await conn.send(pack([command]))
                    sent = True
                    await conn.read(1, replies)
                break
            except trio.Cancelled:
                if sent:
                    trio.lowlevel.spawn_system_task(
                        self._finish_block, conn, block + slack, name="chronos-block-abandoned"
                    )
                else:
                    await conn.aclose()  # maybe half a command on the wire
                raise
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                await conn.aclose()
                if pooled and attempt == 1:
                    continue  # it died idle (a server restart): once more on a new one
                raise exceptions().ConnectionError(f"lost the connection to Redis: {exc}") from exc
            except hiredis.ProtocolError as exc:
                await conn.aclose()
                raise exceptions().ConnectionError(f"bad reply from Redis: {exc}") from exc
        if scope.cancelled_caught:
            await conn.aclose()
            raise exceptions().TimeoutError(f"no reply to {command[0]} within {block + slack:g}s")
        self._keep_blocking(conn)
        reply = replies[0]
        if isinstance(reply, hiredis.ReplyError):
            raise reply_error(str(reply))
        return reply

    async def block_then(
        self,
        command: Sequence[Any],
        then: Sequence[Sequence[Any]],
        block: float,
        slack: float,
        *,
        salvage: Callable[[list[Any]], Awaitable[None]],
        grace: float,
    ) -> tuple[Any, list[Any]]:
        """Send the blocking read ``command`` (``XREAD BLOCK``, ending within
        ``block`` seconds) and ``then`` in one pipeline on a connection of
        its own, and return the read's raw reply and the replies of
        ``then`` (parsed as :meth:`execute` does, error replies as
        exceptions). Redis runs ``then`` right after the read returns (a
        blocked client's later commands wait in its buffer), so a command
        there that changes something (a lease) runs exactly when the read
        ends, and its reply is never left unread by choice:

        Cancelled after sending, this ends the read at once (``CLIENT
        UNBLOCK``, sent on a round-trip connection), reads every reply
        within ``grace`` seconds, shielded, hands the replies of ``then``
        to ``salvage`` (within the same ``grace``; it must not raise), then
        re-raises. When
        they do not come in time (``CLIENT UNBLOCK`` refused, a stalled
        link) the connection is closed: if Redis still held the read, it
        drops ``then`` unrun; if not, what ``then`` did is never known here
        (a lease is then recovered when it expires, as one whose reply was
        lost). Raises redis-py's ConnectionError/TimeoutError like
        :meth:`block`; the read's own error reply as its exception."""
        if self._closed:
            raise exceptions().ConnectionError("the store is closed")
        for attempt in (1, 2):
            pooled = bool(self._blocking)
            conn = self._blocking.pop() if pooled else await self._open()
            ask_id = conn.client_id is None
            commands = [*((("CLIENT", "ID"),) if ask_id else ()), command, *then]
            sent = False
            replies: list[Any] = []
            try:
                with trio.CancelScope(deadline=trio.current_time() + block + slack) as scope:
                    await conn.send(pack(commands))
                    sent = True
                    await conn.read(len(commands), replies)
                break
            except trio.Cancelled:
                if not sent:
                    await conn.aclose()  # maybe half a command on the wire
                    raise
                with trio.CancelScope(shield=True):
                    deadline = trio.current_time() + grace
                    await self._unblock(conn, commands, replies, salvage, deadline)
                raise
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                await conn.aclose()
                if pooled and attempt == 1 and not replies:
                    continue  # it died idle (a server restart): once more on a new one
                raise exceptions().ConnectionError(f"lost the connection to Redis: {exc}") from exc
            except hiredis.ProtocolError as exc:
                await conn.aclose()
                raise exceptions().ConnectionError(f"bad reply from Redis: {exc}") from exc
        if scope.cancelled_caught:
            await conn.aclose()
            raise exceptions().TimeoutError(f"no reply to {command[0]} within {block + slack:g}s")
        if ask_id:
            conn.client_id = int(replies.pop(0))
        self._keep_blocking(conn)
        read = replies[0]
        if isinstance(read, hiredis.ReplyError):
            raise reply_error(str(read))
        return read, parse_replies(self._callbacks, self._by_name, then, replies[1:])

    async def _unblock(
        self,
        conn: _Connection,
        commands: Sequence[Sequence[Any]],
        replies: list[Any],
        salvage: Callable[[list[Any]], Awaitable[None]],
        deadline: float,
    ) -> None:
        """:meth:`block_then`'s cancelled wait (the caller shields it): end
        the read, read every reply of ``commands`` and salvage those after
        the read, by ``deadline``; close ``conn`` when they do not come by
        then. Never raises."""
        ask_id = commands[0] == ("CLIENT", "ID")
        with trio.move_on_at(deadline):
            try:
                if ask_id:
                    await conn.read(1, replies)
                    conn.client_id = int(replies[0])
                if len(replies) < len(commands):
                    # An error reply (CLIENT UNBLOCK refused by an ACL) is
                    # returned, not raised: then the read ends on its own.
                    await self.execute([("CLIENT", "UNBLOCK", conn.client_id)])
                await conn.read(len(commands), replies)
            except Exception:  # out of reach: the connection goes below
                pass
        if len(replies) < len(commands):
            await conn.aclose()
            return
        self._keep_blocking(conn)
        skip = 2 if ask_id else 1
        then = parse_replies(self._callbacks, self._by_name, commands[skip:], replies[skip:])
        with trio.move_on_at(deadline):
            await salvage(then)

    async def _finish_block(self, conn: _Connection, wait: float) -> None:
        """A cancelled blocking read's reply, read in the background and
        dropped; the connection is kept if it came. Never raises (a system
        task)."""
        try:
            replies: list[Any] = []
            with trio.move_on_after(wait):
                await conn.read(1, replies)
            if not replies:
                await conn.aclose()
                return
            self._keep_blocking(conn)
        except Exception:
            await conn.aclose()

    def _keep_blocking(self, conn: _Connection) -> None:
        if len(self._blocking) < MAX_BLOCKING_IDLE and not self._closed:
            self._blocking.append(conn)
        else:
            self._stale.append(conn)

    async def aclose(self) -> None:
        self._closed = True
        await self._drop_idle()
        blocking, self._blocking = self._blocking, []
        for conn in blocking:
            await conn.aclose()


class NodeClient:
    """One Redis node over Trio sockets, with no redis-py client: what
    ``RedisStore.from_url`` makes for a plain ``redis://`` or ``unix://``
    URL (see the module doc). :attr:`node` makes every round trip and
    blocking wait. ``redis_py`` makes redis-py's client for the same URL,
    for what only redis-py does here (the subscription of result waiters):
    it is called once, in a thread, on first need."""

    def __init__(
        self, address: NodeAddress, redis_py: Callable[[], redis.Redis | redis.cluster.RedisCluster]
    ) -> None:
        self.address = address
        self.node = NativeNode.for_address(address)
        self._factory = redis_py
        self._redis_py: redis.Redis | redis.cluster.RedisCluster | None = None
        self._lock = trio.Lock()

    async def redis_py(
        self, limiter: trio.CapacityLimiter
    ) -> redis.Redis | redis.cluster.RedisCluster:
        """redis-py's client for this node (made on first use; it raises
        what redis-py raises)."""
        async with self._lock:
            if self._redis_py is None:
                self._redis_py = await trio.to_thread.run_sync(self._factory, limiter=limiter)
            return self._redis_py

    def close(self) -> None:
        """Close redis-py's client, if one was made (blocking). The node is
        closed by its owner (``aclose``)."""
        client, self._redis_py = self._redis_py, None
        if client is not None:
            client.close()
