"""The loopback fault proxy (chronos_trio.testing.proxy) against an echo server
in this process: it forwards, blackholes (holding bytes, delivering them in
order once healed, or cutting connections), delays without limiting
bandwidth, resets, closes clients whose upstream is down, and refuses
anything but loopback. Real sockets, so the real clock, every wait bounded."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import free_port


@attrs.define
class Echo:
    port: int = 0
    accepted: int = 0


@asynccontextmanager
async def echo_and_proxy() -> AsyncIterator[tuple[Echo, TcpProxy]]:
    echo = Echo()

    async def handle(stream: trio.SocketStream) -> None:
        echo.accepted += 1
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        echo.port = listener.socket.getsockname()[1]
        proxy = TcpProxy(echo.port)
        await nursery.start(proxy.run)
        yield echo, proxy
        nursery.cancel_scope.cancel()


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {data!r}")
        data += chunk
    return data


async def test_forwards_both_ways() -> None:
    with trio.fail_after(10):
        async with echo_and_proxy() as (echo, proxy):
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            for i in range(20):
                await client.send_all(b"x%d;" % i)
                assert await receive_exactly(client, len(b"x%d;" % i)) == b"x%d;" % i
            await client.aclose()
            stats = proxy.statistics()
    assert stats.accepted == 1 and echo.accepted == 1
    assert stats.bytes_up == stats.bytes_down == len(b"".join(b"x%d;" % i for i in range(20)))


async def test_blackhole_holds_bytes_and_new_connections_until_healed() -> None:
    with trio.fail_after(10):
        async with echo_and_proxy() as (echo, proxy):
            old = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await old.send_all(b"warm")
            assert await receive_exactly(old, 4) == b"warm"
            proxy.blackhole()
            for part in (b"one,", b"two,", b"three"):
                await old.send_all(part)
            new = await trio.open_tcp_stream("127.0.0.1", proxy.port)  # the kernel accepts
            await new.send_all(b"hello")
            with trio.move_on_after(0.5) as waited:
                await old.receive_some(100)
            assert waited.cancelled_caught, "nothing gets through a blackhole"
            assert echo.accepted == 1, "no new connection reached the server"
            proxy.heal()
            assert await receive_exactly(old, 13) == b"one,two,three"  # in order, none lost
            assert await receive_exactly(new, 5) == b"hello"
            assert echo.accepted == 2


async def test_heal_with_reset_cuts_what_the_blackhole_held() -> None:
    with trio.fail_after(10):
        async with echo_and_proxy() as (_, proxy):
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await client.send_all(b"a")
            assert await receive_exactly(client, 1) == b"a"
            proxy.blackhole()
            await client.send_all(b"held")
            await trio.sleep(0.1)
            proxy.heal(reset=True)
            with pytest.raises((trio.BrokenResourceError, EOFError)):
                await receive_exactly(client, 4)
            assert proxy.statistics().resets == 1
            fresh = await trio.open_tcp_stream("127.0.0.1", proxy.port)  # healed
            await fresh.send_all(b"ok")
            assert await receive_exactly(fresh, 2) == b"ok"


async def test_delay_is_latency_not_a_bandwidth_limit() -> None:
    """Every chunk arrives ``delay`` late each way, chunks in flight overlap:
    one sent every 0.1 s with a 0.3 s delay comes back 0.6 s after it left,
    not later (a proxy sleeping between reads would make them queue up)."""
    delay, chunks = 0.3, 10
    with trio.fail_after(10):
        async with echo_and_proxy() as (_, proxy):
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            proxy.set_delay(delay)
            sent: list[float] = []
            back: list[float] = []

            async def send() -> None:
                for i in range(chunks):
                    sent.append(trio.current_time())
                    await client.send_all(b"%d" % i)
                    await trio.sleep(0.1)

            async def receive() -> None:
                while len(back) < chunks:
                    data = await client.receive_some(100)
                    assert data, "closed"
                    back.extend(trio.current_time() for _ in data)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                nursery.start_soon(receive)
            proxy.set_delay(0)
            start = trio.current_time()
            await client.send_all(b"fast")
            assert await receive_exactly(client, 4) == b"fast"
            after = trio.current_time() - start
    latencies = [b - s for s, b in zip(sent, back, strict=True)]
    assert min(latencies) >= 2 * delay - 0.01, latencies  # each way is delayed
    assert max(latencies) < 2 * delay + 0.25, latencies  # and no chunk waits for another
    assert after < delay
    with pytest.raises(ValueError, match="delay must be >= 0"):
        proxy.set_delay(-1)


async def test_reset_all_cuts_every_open_connection() -> None:
    with trio.fail_after(10):
        async with echo_and_proxy() as (_, proxy):
            clients = [await trio.open_tcp_stream("127.0.0.1", proxy.port) for _ in range(3)]
            for c in clients:
                await c.send_all(b"x")
                assert await receive_exactly(c, 1) == b"x"
            assert proxy.reset_all() == 3
            for c in clients:
                with pytest.raises((trio.BrokenResourceError, EOFError)):
                    await receive_exactly(c, 1)
            while proxy.statistics().open:
                await trio.sleep(0.01)


async def test_upstream_down_closes_the_client() -> None:
    proxy = TcpProxy(free_port())  # nobody listens there
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            assert await client.receive_some(10) == b""
            assert proxy.statistics().refused_upstream == 1
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "options",
    [
        {"upstream_host": "10.1.2.3"},
        {"upstream_host": "example.com"},
        {"listen_host": "0.0.0.0"},
    ],
)
def test_loopback_only(options: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="loopback addresses only"):
        TcpProxy(6380, **options)  # type: ignore[arg-type]
