"""The asyncio producer's own non-blocking connections to a plain Redis node
(``store.redis._asyncio_node``): used for plain URLs, replies as redis-py's
pipeline gives them, and every failure mode (a restarted server, a hung or
blackholed one, a cancelled task, a closed producer) loses nothing and
leaves the producer usable.

Every test runs on the stdlib asyncio loop and on uvloop (when installed),
each program bounded by ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

import pytest
import redis
import redis.asyncio
import trio

from chronos_trio import App, JobContext
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.store import StoreError
from chronos_trio.store.redis._asyncio_node import AsyncioNode
from chronos_trio.store.redis._errors import NoScript
from chronos_trio.store.redis._resp import MAX_IDLE
from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import RedisServer
from tests._support import ready_ids

pytestmark = pytest.mark.redis


class Run(Protocol):
    def __call__(self, program: Coroutine[Any, Any, Any], timeout: float = 30) -> Any: ...


uvloop: Any
try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

LOOPS = ["asyncio", *(["uvloop"] if uvloop is not None else [])]


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Run:
    """Runs a program to its end on a new loop of the parameter's kind,
    within 30 seconds."""

    def run(program: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        factory = uvloop.new_event_loop if request.param == "uvloop" else None
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(asyncio.wait_for(program, timeout))

    return run


async def _node(producer: AsyncioProducer) -> AsyncioNode | None:
    await producer._exec.client()  # made on first use
    return producer._exec._node


def _node_of(url: str, **options: Any) -> AsyncioNode:
    node = AsyncioNode.for_client(redis.asyncio.Redis.from_url(url, protocol=2, **options))
    assert node is not None
    return node


def test_a_plain_url_uses_the_node_and_others_keep_redis_py(
    own_redis_server: RedisServer, run: Run
) -> None:
    async def program() -> None:
        async with AsyncioProducer(own_redis_server.url) as producer:
            assert isinstance(await _node(producer), AsyncioNode)
            handle = await producer.enqueue("k", {"x": 1})
            assert handle.created
            assert (await handle.status()).state.value == "ready"

    run(program())
    for client in (
        redis.asyncio.Redis.from_url(own_redis_server.url, single_connection_client=True),
        redis.asyncio.Redis.from_url(own_redis_server.url, protocol=3),
        redis.asyncio.Redis.from_url(
            own_redis_server.url.replace("redis://", "rediss://"), protocol=2
        ),
    ):
        assert AsyncioNode.for_client(client) is None
    unix = redis.asyncio.Redis.from_url("unix:///tmp/none.sock?db=2", protocol=2)
    node = AsyncioNode.for_client(unix)
    assert node is not None and node._address == "/tmp/none.sock"
    assert node._hello == [("SELECT", 2)]


def test_a_unix_socket_url(run: Run) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # short: sun_path is ~107 bytes
        path = f"{where}/redis.sock"
        with RedisServer(extra_args=["--unixsocket", path, "--unixsocketperm", "700"]):

            async def program() -> None:
                async with AsyncioProducer(f"unix://{path}?db=1") as producer:
                    node = await _node(producer)
                    assert node is not None and node._address == path
                    handle = await producer.enqueue("k", 1, job_id="over-unix")
                    assert handle.created
                    assert (await handle.status()).state.value == "ready"
                    [db] = await node.execute([("CLIENT", "INFO")])
                    assert b" db=1 " in db

            run(program())


def test_replies_are_what_redis_pys_pipeline_gives(own_redis_server: RedisServer, run: Run) -> None:
    commands: list[tuple[Any, ...]] = [
        ("SET", "a", "1"),
        ("TIME",),
        ("HSET", "h", "f", b"\x00\xff", "g", 2.5),
        ("HGETALL", "h"),
        ("LPUSH", "a", "x"),  # WRONGTYPE: an error reply, in place
        ("EVALSHA", "0" * 40, 0),  # NOSCRIPT: the transport reloads it
        ("GET", "a"),
    ]

    async def program() -> tuple[list[Any], list[Any]]:
        node = _node_of(own_redis_server.url)
        ours = await node.execute(commands)
        client = redis.asyncio.Redis.from_url(own_redis_server.url, protocol=2)
        await client.delete("h")
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        theirs = list(await pipe.execute(raise_on_error=False))
        await client.aclose()
        node.close()
        return ours, theirs

    ours, theirs = run(program())
    assert ours[0] is True and theirs[0] is True
    assert isinstance(ours[1], tuple) and len(ours[1]) == 2
    assert ours[2:4] == theirs[2:4] == [2, {b"f": b"\x00\xff", b"g": b"2.5"}]
    assert type(ours[4]) is type(theirs[4]) is redis.exceptions.ResponseError
    assert str(ours[4]) == str(theirs[4])
    assert isinstance(ours[5], NoScript)
    assert isinstance(theirs[5], redis.exceptions.NoScriptError)
    assert ours[6] == theirs[6] == b"1"


def test_many_commands_and_large_values_in_one_round_trip(
    own_redis_server: RedisServer, run: Run
) -> None:
    """A request larger than the socket's send buffer (the loop waits until
    it can write) and replies larger than one read come through whole."""
    big = bytes(range(256)) * 16384  # 4 MiB

    async def program() -> None:
        node = _node_of(own_redis_server.url)
        commands = [("SET", f"k{i}", big if i % 250 == 0 else i) for i in range(1000)]
        assert await node.execute(commands) == [True] * 1000
        replies = await node.execute([("GET", f"k{i}") for i in range(1000)])
        assert replies[0] == replies[500] == big
        assert replies[1] == b"1" and replies[999] == b"999"
        assert len(node._idle) == 1
        node.close()

    run(program())


def test_connections_are_reused_and_idle_ones_capped(
    own_redis_server: RedisServer, run: Run
) -> None:
    async def program() -> None:
        node = _node_of(own_redis_server.url)
        [first] = await node.execute([("CLIENT", "ID")])
        [again] = await node.execute([("CLIENT", "ID")])
        assert first == again and len(node._idle) == 1  # one connection, reused
        # a burst of concurrent round trips opens a connection each
        burst = MAX_IDLE + 8
        gate = [("BLPOP", "never", 0.2)]  # each holds its connection a while
        ids = await asyncio.gather(*(node.execute([*gate, ("CLIENT", "ID")]) for _ in range(burst)))
        assert len({reply[1] for reply in ids}) == burst
        assert len(node._idle) == MAX_IDLE  # the rest were closed
        deadline = time.monotonic() + 5  # the server sees the closes soon after
        while True:
            [info] = await node.execute([("INFO", "clients")])
            if info["connected_clients"] == MAX_IDLE or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert info["connected_clients"] == MAX_IDLE
        node.close()
        assert node._idle == []
        with pytest.raises(redis.exceptions.ConnectionError, match="closed"):
            await node.execute([("PING",)])

    run(program())


def test_a_restarted_server_costs_no_enqueue(own_redis_server: RedisServer, run: Run) -> None:
    """The idle connection died with the old server: the next enqueue is
    sent again once on a new connection, and both jobs are stored once."""

    async def program() -> None:
        async with AsyncioProducer(own_redis_server.url + "?socket_timeout=5") as producer:
            await producer.enqueue("k", 1)
            node = await _node(producer)
            assert node is not None and len(node._idle) == 1
            own_redis_server.restart()  # no persistence: the first job is gone with it
            second = await producer.enqueue("k", 2, job_id="after-restart")
            assert second.created
            again = await producer.enqueue("k", 2, job_id="after-restart")
            assert not again.created  # stored exactly once

    run(program())
    assert ready_ids(own_redis_server.url) == {b"after-restart"}


def test_a_dead_server_is_a_store_error_and_the_producer_recovers(
    own_redis_server: RedisServer, run: Run
) -> None:
    async def program() -> None:
        async with AsyncioProducer(own_redis_server.url, connect_timeout=1) as producer:
            await producer.enqueue("k", 1)
            own_redis_server.kill()
            with pytest.raises(StoreError, match="Redis"):
                await producer.enqueue("k", 2, job_id="while-down")
            own_redis_server.start()
            assert (await producer.enqueue("k", 3, job_id="back-up")).created

    run(program())
    assert ready_ids(own_redis_server.url) == {b"back-up"}


def test_a_hung_server_is_a_timeout_and_the_connection_is_not_reused(
    own_redis_server: RedisServer, run: Run
) -> None:
    """No reply within the socket timeout: a StoreError, the connection
    closed (a late reply is never read as the next call's); the next call
    works once the server answers."""

    async def program() -> None:
        async with AsyncioProducer(own_redis_server.url + "?socket_timeout=0.3") as producer:
            await producer.enqueue("k", 1)
            node = await _node(producer)
            assert node is not None
            own_redis_server.pause()
            try:
                started = time.monotonic()
                with pytest.raises(StoreError, match=r"no reply from Redis within 0\.3s"):
                    await producer.enqueue("k", 2, job_id="during-pause")
                assert time.monotonic() - started < 3
                assert node._idle == []
            finally:
                own_redis_server.resume()
            handle = await producer.enqueue("k", 3, job_id="after-pause")
            assert handle.created
            # the paused call ran once the server went on (it may or may not, as
            # StoreError says): either way a retry with its ID stores it once
            await producer.enqueue("k", 2, job_id="during-pause")
            assert not (await producer.enqueue("k", 2, job_id="during-pause")).created

    run(program())
    assert {b"after-pause", b"during-pause"} <= ready_ids(own_redis_server.url)


@contextmanager
def _proxy(upstream: int) -> Iterator[tuple[TcpProxy, Callable[[Callable[[], Any]], Any]]]:
    """The loopback proxy served by Trio in a thread of its own; the second
    value calls a function in that thread (the proxy's switches are Trio's)."""
    proxy = TcpProxy(upstream_port=upstream)
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                box["scope"] = nursery.cancel_scope
                await nursery.start(proxy.run)
                started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(10)

    def call(fn: Callable[[], Any]) -> Any:
        return trio.from_thread.run_sync(fn, trio_token=box["token"])

    try:
        yield proxy, call
    finally:
        call(box["scope"].cancel)
        thread.join(10)


def test_a_blackholed_link_is_a_timeout_and_heals(own_redis_server: RedisServer, run: Run) -> None:
    """A link that stops forwarding (no reset, nothing read): the call ends
    at the socket timeout with a StoreError, and once the link heals the
    producer works on a new connection (the old one's late reply is never
    read)."""
    with _proxy(own_redis_server.port) as (proxy, call):
        url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=0.4"

        async def program() -> None:
            async with AsyncioProducer(url) as producer:
                await producer.enqueue("k", 1, job_id="before")
                node = await _node(producer)
                assert node is not None and len(node._idle) == 1
                call(proxy.blackhole)
                started = time.monotonic()
                with pytest.raises(StoreError, match=r"within 0\.4s"):
                    await producer.enqueue("k", 2, job_id="blackholed")
                assert 0.3 < time.monotonic() - started < 3
                assert node._idle == []
                call(proxy.heal)
                handle = await producer.enqueue("k", 3, job_id="healed")
                assert handle.created
                [got] = await node.execute([("EXISTS", "nothing")])
                assert got == 0

        run(program())
    assert {b"before", b"healed"} <= ready_ids(own_redis_server.url)


def test_a_cancelled_call_never_pools_its_connection(
    own_redis_server: RedisServer, run: Run
) -> None:
    """The awaiting task is cancelled mid round trip (its reply not read):
    that connection is closed, never pooled, so the late reply can never be
    read as the next call's."""

    async def program() -> None:
        node = _node_of(own_redis_server.url)
        await node.execute([("SET", "x", "before")])
        assert len(node._idle) == 1
        [pooled] = node._idle
        own_redis_server.pause()
        try:
            call = asyncio.ensure_future(node.execute([("SET", "x", "cancelled"), ("GET", "x")]))
            await asyncio.sleep(0.2)
            assert not call.done() and node._idle == []
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert pooled.sock.fileno() == -1  # closed
            assert node._idle == []
        finally:
            own_redis_server.resume()
        assert await node.execute([("SET", "y", "next"), ("GET", "y")]) == [True, b"next"]
        # the cancelled commands may have run (they were sent): as StoreError says
        assert (await node.execute([("GET", "x")]))[0] in (b"before", b"cancelled")
        node.close()

    run(program())


def test_a_password_database_and_client_name(run: Run) -> None:
    """AUTH, SELECT and CLIENT SETNAME as redis-py's connections send them;
    the blocking node (the synchronous producer's) sends the name too."""
    with RedisServer(extra_args=["--requirepass", "s3cret"]) as secured:
        base = secured.url.replace("redis://", "redis://:s3cret@").rsplit("/", 1)[0]
        url = f"{base}/3?client_name=aio-producer"

        async def program() -> list[bytes]:
            async with AsyncioProducer(url) as producer:
                assert isinstance(await _node(producer), AsyncioNode)
                await producer.enqueue("k", 1, job_id="in-db-3")
            async with AsyncioProducer(url.replace("s3cret", "wrong")) as producer:
                with pytest.raises(StoreError):
                    await producer.enqueue("k", 1)
            node = _node_of(url)
            [listing] = await node.execute([("CLIENT", "LIST")])
            node.close()
            return cast("list[bytes]", listing.splitlines())

        listing = run(program())
        [mine] = [line for line in listing if b" name=aio-producer " in line]
        assert b" db=3 " in mine
        with redis.Redis.from_url(f"{base}/0") as client:

            def names() -> list[str]:
                return [c["name"] for c in cast("list[dict[str, Any]]", client.client_list())]

            with SyncProducer(f"{base}/2?client_name=sync-producer") as producer:
                producer.enqueue("k", 1)
                assert "sync-producer" in names()
            # closing the producer closed its connections (the server sees it soon after)
            deadline = time.monotonic() + 5
            while "sync-producer" in names() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "sync-producer" not in names()
            assert not client.keys("*:j:in-db-3")
        with redis.Redis.from_url(f"{base}/3") as client:
            assert client.keys("*:j:in-db-3")


def test_a_closed_producer_refuses(own_redis_server: RedisServer, run: Run) -> None:
    async def program() -> None:
        producer = AsyncioProducer(own_redis_server.url)
        await producer.enqueue("k", 1)
        node = await _node(producer)
        await producer.aclose()
        assert node is not None and node._closed and node._idle == []
        with pytest.raises(StoreError):
            await producer.enqueue("k", 2)

    run(program())


def test_a_write_that_waits_is_bounded_by_the_timeout(
    own_redis_server: RedisServer, run: Run
) -> None:
    """A paused server stops reading: a request larger than the socket
    buffers waits to be written, within the same timeout."""

    async def program() -> None:
        node = _node_of(own_redis_server.url, socket_timeout=0.5)
        await node.execute([("PING",)])
        own_redis_server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError):
                await node.execute([("SET", "big", b"x" * (32 << 20))])
            assert time.monotonic() - started < 5
            assert node._idle == []
        finally:
            own_redis_server.resume()
        assert await node.execute([("PING",)]) == [True]
        node.close()

    run(program(), 60)


# -- the producer end to end, with a worker draining its jobs -----------------------------


def _app(url: str) -> App:
    app = App(url)

    @app.task("double")
    async def double(n: int, job: JobContext) -> int:
        return 2 * n

    return app


async def _producer_program(url: str, app: App) -> dict[str, Any]:
    async with AsyncioProducer(url, app=app) as producer:
        assert isinstance(await _node(producer), AsyncioNode)
        one = await producer.enqueue("double", 21)
        many = await producer.enqueue_many("double", list(range(50)))
        concurrent = await asyncio.gather(*(producer.enqueue("double", 100 + i) for i in range(40)))
        results = {
            "one": await one.result(timeout=20),
            "many": [await h.result(timeout=20) for h in many],
            "concurrent": [await h.result(timeout=20) for h in concurrent],
        }
        before = producer.statistics()
        await producer.enqueue("double", 7)
        results["one_more"] = producer.statistics().round_trips - before.round_trips
        return results


async def test_the_asyncio_producer_on_the_node_with_a_worker(redis_url: str) -> None:
    app = _app(redis_url)
    async with app.open_worker(poll_interval=0.5):
        for loop in LOOPS:

            def program(loop: str = loop) -> dict[str, Any]:
                factory = uvloop.new_event_loop if loop == "uvloop" else None
                with asyncio.Runner(loop_factory=factory) as runner:
                    return runner.run(asyncio.wait_for(_producer_program(redis_url, app), 40))

            with trio.fail_after(60):
                out = await trio.to_thread.run_sync(program, abandon_on_cancel=True)
            assert out["one"] == 42
            assert out["many"] == [2 * i for i in range(50)]
            assert out["concurrent"] == [2 * (100 + i) for i in range(40)]
            assert out["one_more"] == 1  # one enqueue, one round trip
