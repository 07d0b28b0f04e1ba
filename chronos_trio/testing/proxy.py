"""A loopback TCP proxy that can blackhole, delay and cut traffic, on Trio.

For fault tests: point clients at :attr:`TcpProxy.port` instead of the
server's port, then make the network misbehave while they run::

    proxy = TcpProxy(upstream_port=redis.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        ...                      # clients use redis://127.0.0.1:{proxy.port}/0
        proxy.blackhole()        # a partition: nothing flows either way
        proxy.heal()             # held bytes flow again, in order
        proxy.set_delay(0.2)     # every chunk arrives 200 ms late
        proxy.reset_all()        # every connection is cut (RST)

Faults, as TCP would see them:

* **blackhole**: bytes are read but not delivered, and connections opened
  meanwhile are accepted but not connected upstream, until :meth:`heal`.
  Like a partition that heals before TCP gives up, nothing is lost or
  reordered: held bytes flow once healed (``heal(reset=True)`` cuts every
  connection instead, as when the partition outlived the connections).
  Reading goes on into a bounded buffer, so a long blackhole ends up pushing
  back on the sender, as a full TCP window would.
* **delay**: each chunk is delivered ``delay`` seconds after it was read
  (latency, not a bandwidth limit: chunks in flight overlap).
* **reset**: every open connection is closed with an RST at once.

Either side closing (or failing) closes the other. An upstream that refuses
a connection (the server is down) closes the client's at once. The proxy
listens and connects only on loopback addresses (``ValueError`` otherwise):
it is test support, never a network tool.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

import attrs
import trio

__all__ = ["ProxyStatistics", "TcpProxy"]

#: Chunks read but not yet delivered, per direction of one connection.
HELD_CHUNKS = 256
_READ_SIZE = 65536


def _loopback(host: str) -> str:
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(f"the proxy works on loopback addresses only, not {host!r}")


@attrs.frozen
class ProxyStatistics:
    """What the proxy did so far. ``bytes_up`` went client -> server."""

    accepted: int
    open: int
    refused_upstream: int
    resets: int
    bytes_up: int
    bytes_down: int
    blackholed: bool
    delay: float


class _Connection:
    def __init__(self, client: trio.SocketStream) -> None:
        self.client = client
        self.upstream: trio.SocketStream | None = None
        self.scope = trio.CancelScope()
        self.reset = False

    def cut(self) -> None:
        """Close both sides with an RST (SO_LINGER 0), now."""
        self.reset = True
        for stream in (self.client, self.upstream):
            if stream is not None:
                try:
                    stream.socket.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                except OSError:
                    pass
        self.scope.cancel()


class TcpProxy:
    """Forwards each connection to ``127.0.0.1:upstream_port`` (or
    ``upstream_host``, a loopback address); see the module docstring for the
    faults. ``listen_port`` 0 (default) picks a free port, known once
    :meth:`run` has started. Fault switches are synchronous and take effect
    at once, for every connection, open or future."""

    def __init__(
        self,
        upstream_port: int,
        *,
        upstream_host: str = "127.0.0.1",
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.upstream_host = _loopback(upstream_host)
        self.upstream_port = upstream_port
        self.listen_host = _loopback(listen_host)
        self._listen_port = listen_port
        self.port = listen_port
        self._connections: set[_Connection] = set()
        self._healed = trio.Event()
        self._healed.set()
        self._delay = 0.0
        self._accepted = 0
        self._refused = 0
        self._resets = 0
        self._bytes = {"up": 0, "down": 0}

    # -- faults ----------------------------------------------------------------------
    @property
    def blackholed(self) -> bool:
        return not self._healed.is_set()

    def blackhole(self) -> None:
        """Stop delivering anything, both ways, until :meth:`heal`."""
        if self._healed.is_set():
            self._healed = trio.Event()

    def heal(self, *, reset: bool = False) -> None:
        """End a blackhole: held bytes flow again, or with ``reset`` every
        connection is cut first (so nothing held is ever delivered)."""
        if reset:
            self.reset_all()
        self._healed.set()

    def set_delay(self, seconds: float) -> None:
        """Deliver every chunk read from now on ``seconds`` late (0: at once)."""
        if not seconds >= 0:
            raise ValueError(f"delay must be >= 0 seconds, got {seconds!r}")
        self._delay = float(seconds)

    def reset_all(self) -> int:
        """Cut every open connection with an RST; returns how many."""
        connections = list(self._connections)
        for connection in connections:
            connection.cut()
        self._resets += len(connections)
        return len(connections)

    def statistics(self) -> ProxyStatistics:
        return ProxyStatistics(
            accepted=self._accepted,
            open=len(self._connections),
            refused_upstream=self._refused,
            resets=self._resets,
            bytes_up=self._bytes["up"],
            bytes_down=self._bytes["down"],
            blackholed=self.blackholed,
            delay=self._delay,
        )

    # -- serving -----------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled; ``nursery.start(proxy.run)``
        returns the port it listens on. Cancelling closes every connection."""
        listeners = await trio.open_tcp_listeners(self._listen_port, host=self.listen_host)
        self.port = int(listeners[0].socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            try:
                while True:
                    client = await listeners[0].accept()
                    self._accepted += 1
                    nursery.start_soon(self._serve, client)
            finally:
                for listener in listeners:
                    await listener.aclose()

    async def _serve(self, client: trio.SocketStream) -> None:
        connection = _Connection(client)
        self._connections.add(connection)
        try:
            with connection.scope:
                # A partition also keeps new connections from getting through.
                await self._healed.wait()
                try:
                    connection.upstream = await trio.open_tcp_stream(
                        self.upstream_host, self.upstream_port
                    )
                except OSError:
                    self._refused += 1
                    return
                async with trio.open_nursery() as nursery:
                    for src, dst, way in (
                        (client, connection.upstream, "up"),
                        (connection.upstream, client, "down"),
                    ):
                        nursery.start_soon(self._pipe, src, dst, way, nursery.cancel_scope)
        finally:
            self._connections.discard(connection)
            with trio.CancelScope(shield=True):
                for stream in (client, connection.upstream):
                    if stream is not None:
                        await trio.aclose_forcefully(stream)

    async def _pipe(
        self,
        src: trio.SocketStream,
        dst: trio.SocketStream,
        way: str,
        connection_scope: trio.CancelScope,
    ) -> None:
        """One direction: a reader stamps each chunk with its delivery time,
        a writer holds it through any blackhole and until that time."""
        send, receive = trio.open_memory_channel[tuple[float, bytes]](HELD_CHUNKS)

        async def read() -> None:
            async with send:
                try:
                    while data := await src.receive_some(_READ_SIZE):
                        await send.send((trio.current_time() + self._delay, data))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

        async def write() -> None:
            async with receive:
                async for due, data in receive:
                    while True:
                        await self._healed.wait()
                        await trio.sleep_until(due)
                        if self._healed.is_set():
                            break
                    try:
                        await dst.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        break
                    self._bytes[way] += len(data)
            # EOF or an error on either end: the whole connection goes.
            connection_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            nursery.start_soon(write)
