"""The quiet wait of the asyncio producer's round trips (issue 27, item 1;
``store/redis/_asyncio_quiet``): a round trip on a stdlib asyncio loop with
nothing else to do blocks in ``poll()`` for its reply instead of passes of
the event loop, and gives up (the round trip goes on in the loop's wait,
within the same timeout) as soon as the loop has work: a ready callback,
a timer due, another socket's I/O, a thread's ``call_soon_threadsafe``, a
signal. Replies, errors, timeouts, cancellation and the retry of a dead
pooled connection stay as they were.

Delays come from ``BLPOP`` on a key nobody pushes (its reply comes after
its timeout), the loop's other work from tasks, threads and signals."""

from __future__ import annotations

import asyncio
import collections
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from chronos_trio.producers import AsyncioProducer
from chronos_trio.store.redis import _asyncio_quiet
from chronos_trio.store.redis._asyncio_node import AsyncioNode, _Connection
from chronos_trio.store.redis._asyncio_quiet import QuietLoop
from chronos_trio.store.redis._resp import Dead, pack
from chronos_trio.testing.redis_server import RedisServer

pytestmark = pytest.mark.redis

uvloop: Any
try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


def run(program: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
    """Runs ``program`` on a new stdlib loop, within ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(program, timeout))


def node_of(url: str, **options: Any) -> AsyncioNode:
    node = AsyncioNode.for_client(redis.asyncio.Redis.from_url(url, protocol=2, **options))
    assert node is not None
    return node


def quiet_of(node: AsyncioNode) -> QuietLoop:
    quiet = node._quiet
    assert quiet is not None and quiet.epoll_fd >= 0
    return quiet


async def warm(node: AsyncioNode) -> QuietLoop:
    """One round trip (a pooled connection); the loop's quiet state, its
    counts from zero."""
    assert await node.execute([("PING",)]) == [True]
    quiet = quiet_of(node)
    quiet.blocked = quiet.interrupted = 0
    return quiet


def later(delay: float, fn: Callable[[], Any]) -> threading.Timer:
    """``fn`` called from another thread ``delay`` seconds from now."""
    timer = threading.Timer(delay, fn)
    timer.start()
    return timer


def test_asyncio_internals_in_use() -> None:
    """The asyncio internals the quiet wait reads exist on this Python (if
    not, every wait silently takes the loop's passes: this says so)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert type(loop) is asyncio.SelectorEventLoop
        assert type(loop._selector) is selectors.EpollSelector  # type: ignore[attr-defined]
        assert isinstance(loop._ready, collections.deque)  # type: ignore[attr-defined]
        assert isinstance(loop._scheduled, list)  # type: ignore[attr-defined]
        assert loop._stopping is False  # type: ignore[attr-defined]
        assert abs(loop.time() - time.monotonic()) < 0.5  # the loop's clock
        quiet = QuietLoop(loop)
        assert quiet.epoll_fd == loop._selector._selector.fileno()  # type: ignore[attr-defined]
        assert quiet.budget() == _asyncio_quiet.CAP
        handle = loop.call_soon(lambda: None)
        assert quiet.budget() == 0.0, "a ready callback: not quiet"
        handle.cancel()
        assert quiet.budget() == _asyncio_quiet.CAP, "a cancelled one does not count"
        timer = loop.call_later(0.0005, lambda: None)
        assert 0.0 < quiet.budget() <= 0.0005, "the block ends at the next timer"
        assert timer.when() == loop._scheduled[0]._when  # type: ignore[attr-defined]
        timer.cancel()
        await asyncio.sleep(0)

    asyncio.run(main())


@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")
def test_other_loops_never_block(server: RedisServer) -> None:
    """uvloop (internals unknown): every wait is the loop's, replies as before."""

    async def main() -> None:
        node = node_of(server.url)
        assert await node.execute([("SET", "u", "1"), ("GET", "u")]) == [True, b"1"]
        assert node._quiet is not None and node._quiet.epoll_fd == -1
        assert node._quiet.blocked == node._quiet.interrupted == 0
        node.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(main(), 30))


def test_a_quiet_producer_blocks_for_its_replies(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_asyncio_quiet, "CAP", 1.0)  # a loaded machine's slow replies still block

    async def main() -> None:
        async with AsyncioProducer(server.url) as producer:
            handles = [await producer.enqueue("k", i, job_id=f"q{i}") for i in range(300)]
            node = producer._exec._node
            assert node is not None
            quiet = quiet_of(node)
            assert [h.job_id for h in handles] == [f"q{i}" for i in range(300)]
            assert all(h.created for h in handles)
            assert quiet.blocked >= 295, (quiet.blocked, quiet.interrupted)
            for i in (0, 150, 299):
                assert (await producer.job(f"q{i}").status()).state.value == "ready"
            assert not (await producer.enqueue("k", 0, job_id="q0")).created
            # error replies come back in place, as redis-py's pipeline gives them
            before = quiet.blocked
            ok, wrong = await node.execute([("SET", "s", "1"), ("LPUSH", "s", "x")])
            assert ok is True and type(wrong) is redis.exceptions.ResponseError
            assert "WRONGTYPE" in str(wrong)
            assert quiet.blocked == before + 1

    run(main())


def test_a_ready_callback_or_a_due_timer_takes_the_loops_wait(server: RedisServer) -> None:
    async def main() -> None:
        node = node_of(server.url)
        quiet = await warm(node)
        before = quiet.blocked
        asyncio.get_running_loop().call_soon(lambda: None)
        assert await node.execute([("PING",)]) == [True]
        asyncio.get_running_loop().call_later(-1, lambda: None)
        assert await node.execute([("PING",)]) == [True]
        assert quiet.blocked == before and quiet.interrupted == 0
        node.close()

    run(main())


def test_a_block_ends_at_another_tasks_timer(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sleeping task's timer bounds the block: it wakes on time, not when
    the 0.4 s reply comes (nor at a long cap)."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 5.0)

    async def main() -> None:
        node = node_of(server.url)
        quiet = await warm(node)
        late: list[float] = []

        async def sleeper() -> None:
            start = time.monotonic()
            await asyncio.sleep(0.03)
            late.append(time.monotonic() - start - 0.03)

        task = asyncio.create_task(sleeper())
        await asyncio.sleep(0.001)  # the sleeper sleeps
        assert await node.execute([("BLPOP", "never", 0.4)]) == [None]
        await task
        assert quiet.interrupted == 1 and quiet.blocked == 0
        assert late[0] < 0.2, late
        node.close()

    run(main())


def test_a_block_gives_up_when_another_sockets_io_is_ready(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task waits on a socket a thread writes to: its bytes wake the loop's
    epoll, the block gives up and the reader runs long before the reply."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 5.0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        node = node_of(server.url)
        quiet = await warm(node)
        theirs, ours = socket.socketpair()
        ours.setblocking(False)
        got: list[float] = []

        async def reader() -> None:
            assert await loop.sock_recv(ours, 10) == b"x"
            got.append(time.monotonic())

        task = asyncio.create_task(reader())
        await asyncio.sleep(0)  # the reader waits on its socket
        start = time.monotonic()
        timer = later(0.03, lambda: theirs.send(b"x"))
        assert await node.execute([("BLPOP", "never", 0.5)]) == [None]
        await task
        timer.join()
        theirs.close()
        ours.close()
        assert quiet.interrupted == 1 and quiet.blocked == 0
        assert got[0] - start < 0.3, got[0] - start
        node.close()

    run(main())


@pytest.mark.parametrize("wake", ["call_soon_threadsafe", "signal"])
def test_a_wake_up_from_outside_ends_a_block(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, wake: str
) -> None:
    """A thread's ``call_soon_threadsafe``, or a signal handled by
    ``add_signal_handler``: its callback runs long before the reply."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 5.0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        node = node_of(server.url)
        quiet = await warm(node)
        called: list[float] = []

        def note() -> None:
            called.append(time.monotonic())

        if wake == "signal":
            loop.add_signal_handler(signal.SIGUSR1, note)
            outside = lambda: os.kill(os.getpid(), signal.SIGUSR1)  # noqa: E731
        else:
            outside = lambda: loop.call_soon_threadsafe(note)  # noqa: E731
        try:
            start = time.monotonic()
            timer = later(0.03, outside)
            assert await node.execute([("BLPOP", "never", 0.5)]) == [None]
            timer.join()
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        assert quiet.interrupted == 1 and quiet.blocked == 0
        assert called and called[0] - start < 0.3, called
        node.close()

    run(main())


def test_a_task_cancelled_mid_round_trip_closes_its_connection(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block ends at the canceller's timer; the cancellation lands in
    the loop's wait: CancelledError, the connection closed, never pooled;
    a timeout around the call is the same."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 5.0)

    async def main() -> None:
        node = node_of(server.url)
        quiet = await warm(node)
        [pooled] = node._idle
        call = asyncio.create_task(node.execute([("SET", "c", "1"), ("BLPOP", "never", 0.5)]))
        await asyncio.sleep(0.05)
        assert not call.done()
        start = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert time.monotonic() - start < 0.2
        assert quiet.interrupted == 1
        assert pooled.sock.fileno() == -1 and node._idle == []
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await node.execute([("BLPOP", "never", 0.5)])
        assert time.monotonic() - start < 0.3
        assert quiet.interrupted == 2 and node._idle == []
        assert await node.execute([("GET", "c")]) == [b"1"]  # sent: it ran
        node.close()

    run(main())


def test_a_hung_server_times_out_after_a_block_as_before(
    own_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block lasts no longer than the round trip's timeout: then the
    same TimeoutError, the connection closed."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 5.0)

    async def main() -> None:
        node = node_of(own_redis_server.url, socket_timeout=0.3, socket_connect_timeout=10)
        quiet = await warm(node)
        own_redis_server.pause()
        try:
            start = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError, match=r"within 0\.3s"):
                await node.execute([("PING",)])
            assert 0.25 < time.monotonic() - start < 2
            assert quiet.interrupted == 1 and node._idle == []
        finally:
            own_redis_server.resume()
        assert await node.execute([("PING",)]) == [True]
        node.close()

    run(main())


def test_a_pooled_connection_found_dead_in_a_block_is_retried_once(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server closed the idle connection: the block reads its end
    before any reply, and the commands are sent once more on a new one."""
    monkeypatch.setattr(_asyncio_quiet, "CAP", 1.0)

    async def main() -> None:
        node = node_of(server.url)
        [client_id] = await node.execute([("CLIENT", "ID")])
        quiet = quiet_of(node)
        with redis.Redis.from_url(server.url) as other:
            other.delete("once")
            assert other.client_kill_filter(_id=client_id) == 1
        [count, new_id] = await node.execute([("INCR", "once"), ("CLIENT", "ID")])
        assert count == 1 and new_id != client_id
        assert quiet.blocked == 2  # the first call's and the retry's
        node.close()

    run(main())


def test_a_block_raises_dead_when_the_peer_closes_midway() -> None:
    """One reply of two, then the end of the stream: ``Dead`` with the
    reply noted (the commands ran: never sent again)."""

    async def main() -> None:
        theirs, ours = socket.socketpair()
        ours.setblocking(False)
        conn = _Connection(ours)
        quiet = QuietLoop(asyncio.get_running_loop())

        def answer_half() -> None:
            theirs.recv(100)
            theirs.sendall(b"+OK\r\n")
            theirs.close()

        timer = later(0.02, answer_half)
        with pytest.raises(Dead) as dead:
            await conn.round_trip(
                asyncio.get_running_loop(), pack([("PING",), ("PING",)]), 2, 5.0, quiet
            )
        timer.join()
        assert dead.value.replied
        assert quiet.blocked == 0
        conn.close()

    run(main())
