"""The Trio-native round trips to a single Redis node (``store.redis._native``):
which connections use them, database selection, Unix sockets, a hung or
restarted server, a cancelled caller. (The thread path it replaces runs the
conformance suite in test_redis_conformance.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions
import trio

from chronos_trio import NewJob
from chronos_trio.store import QueueWeight, StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._connect import connect, node_address
from chronos_trio.store.redis._native import (
    AS_SENT,
    CONVERTED,
    NativeNode,
    NodeClient,
    ReplyCallbacks,
    redis_py_callbacks,
)
from chronos_trio.testing.redis_server import RedisServer

pytestmark = pytest.mark.redis


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"\x00\xffraw")


def uses_native(store: RedisStore) -> bool:
    return store._adapter._native is not None


async def test_plain_tcp_uses_the_native_path_and_threads_stay_available(redis_url: str) -> None:
    native = RedisStore.from_url(redis_url)
    threads = RedisStore.from_url(redis_url, native=False)
    try:
        await native.enqueue_many([job("a")])
        await threads.enqueue_many([job("b")])
        assert uses_native(native) and not uses_native(threads)
        # Both see the same data, byte for byte.
        for store in (native, threads):
            for job_id in ("a", "b"):
                got = await store.get_job(job_id)
                assert got is not None and got.payload == b"\x00\xffraw"
        await native.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=5)  # loads it
        before = native.statistics().round_trips
        await native.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=5)
        assert native.statistics().round_trips == before + 1, "one pipeline, no hop"
    finally:
        await native.aclose()
        await threads.aclose()


async def test_database_number_in_the_url_is_selected(redis_server: RedisServer) -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{redis_server.port}/3")
    try:
        await store.enqueue_many([job("in-db-3")])
        assert uses_native(store)
    finally:
        await store.aclose()
    admin = redis.Redis(port=redis_server.port, db=3)
    other = redis.Redis(port=redis_server.port, db=0)
    try:
        assert any(b"in-db-3" in k for k in admin.keys("*"))
        assert not any(b"in-db-3" in k for k in other.keys("*"))
    finally:
        admin.close()
        other.close()


async def test_unix_socket_url(tmp_path: Path) -> None:
    sock = tmp_path / "redis.sock"
    with RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"]):
        store = RedisStore.from_url(f"unix://{sock}")
        try:
            with trio.fail_after(10):
                await store.enqueue_many([job("over-unix")])
                got = await store.get_job("over-unix")
            assert got is not None and uses_native(store)
        finally:
            await store.aclose()


async def test_hung_server_fails_within_the_socket_timeout_then_recovers() -> None:
    with RedisServer() as server:
        store = RedisStore.from_url(server.url, socket_timeout=1.0)
        try:
            await store.enqueue_many([job("before")])
            assert server._proc is not None
            os.kill(server._proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                with trio.fail_after(10), pytest.raises(StoreError, match="within 1s"):
                    await store.enqueue_many([job("during")])
                assert time.monotonic() - started < 3
            finally:
                os.kill(server._proc.pid, signal.SIGCONT)
            # The timed-out connection was dropped: the next call works.
            with trio.fail_after(10):
                await store.enqueue_many([job("after")])
                assert await store.get_job("after") is not None
        finally:
            await store.aclose()


async def test_restarted_server_is_reconnected_transparently() -> None:
    with RedisServer() as server:
        store = RedisStore.from_url(server.url)
        try:
            async with trio.open_nursery() as nursery:  # several pooled connections
                for k in range(4):
                    nursery.start_soon(store.get_job, f"x{k}")
            assert len(store._adapter._native._idle) > 1  # type: ignore[union-attr]
            server.restart()  # empty again, and every pooled connection is dead
            with trio.fail_after(10):
                [result] = await store.enqueue_many([job("y")])
            assert result.created, "the dead pooled connection was replaced, scripts reloaded"
            assert store.statistics().script_loads >= 1
        finally:
            await store.aclose()


async def test_cancelled_caller_still_completes_its_round_trip() -> None:
    with RedisServer() as server:
        store = RedisStore.from_url(server.url)
        assert server._proc is not None
        pid = server._proc.pid
        returned = []

        async def call(scope: trio.CancelScope) -> None:
            with scope:
                returned.append(await store.enqueue_many([job("shielded")]))
                await trio.lowlevel.checkpoint()  # the cancellation lands here

        try:
            await store.enqueue_many([job("warm")])
            scope = trio.CancelScope()
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        nursery.start_soon(call, scope)
                        await trio.sleep(0.3)  # the call waits on the stopped server
                        scope.cancel()
                        await trio.sleep(0.3)
                    finally:
                        os.kill(pid, signal.SIGCONT)
            # Like a thread hop, the round trip ran to the end and returned.
            assert scope.cancelled_caught
            assert [r.job_id for r in returned[0]] == ["shielded"]
            assert await store.get_job("shielded") is not None
        finally:
            await store.aclose()


@pytest.mark.parametrize("native", [True, False])
async def test_a_cancelled_wait_ends_at_once_and_takes_nothing_from_the_next_waiter(
    redis_url: str, native: bool
) -> None:
    """A waiter cancelled while its XREAD blocks returns at once (it never
    waits on the store); the read it abandoned takes nothing from anyone, so
    a waiter blocked when the job comes wakes at once; natively, the
    abandoned connection is read to the end in the background and kept for
    the next wait (not leaked, not closed)."""
    store = RedisStore.from_url(redis_url, namespace=f"wake-{native}", native=native)
    try:
        await store.stats(["q"])  # the queue's topology, read once
        with trio.fail_after(10):
            with trio.CancelScope() as first:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.wait_ready, ["q"], 20.0)
                    await trio.sleep(0.3)  # blocked in XREAD now
                    cancelled_at = trio.current_time()
                    first.cancel()
            assert trio.current_time() - cancelled_at < 0.2, "the cancel waited on the store"
            woke: list[float] = []

            async def second() -> None:
                await store.wait_ready(["q"], 20.0)
                woke.append(trio.current_time())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(second)
                await trio.sleep(0.3)  # blocked too, beside the abandoned read
                sent = trio.current_time()
                await store.enqueue_many([job("j1")])
            assert woke[0] - sent < 1.0, "the wake-up did not reach the waiter"
            if native:
                # the abandoned read got the wake-up too: its connection is back
                native_node = store._adapter._native
                assert native_node is not None
                while len(native_node._blocking) < 2:
                    await trio.sleep(0.01)
    finally:
        await store.aclose()


# -- a node without redis-py (NodeClient) ---------------------------------------------------
def _outcome(callback: Any, reply: Any) -> Any:
    """What a callback makes of ``reply`` (the reply itself without one)."""
    if callback is None:
        return reply
    try:
        return callback(reply)
    except Exception as exc:
        return ("raises", type(exc))


def test_reply_callbacks_give_what_redis_pys_give() -> None:
    """The table a NodeClient parses replies with (no redis-py) gives, for
    each command in it, what redis-py's own callbacks give; other commands
    get redis-py's callback itself."""
    ours, theirs = ReplyCallbacks(), redis_py_callbacks()
    samples: list[Any] = [None, 0, 7, b"", b"OK", b"x", [], [b"1764000000", b"250000"]]
    samples += [[b"a", b"1", b"b", b"2"], [b"m", b"1.5"], [[b"k", b"v"]]]
    samples += [[[b"1-1", [b"n", b"1"]], [b"2-0", [b"due", b"1.5", b"x", b"y"]]], [None]]
    for name in sorted(AS_SENT | set(CONVERTED)):
        for spelled in (name, name.lower()):
            for reply in samples:
                assert _outcome(ours.get(spelled), reply) == _outcome(theirs.get(name), reply), (
                    spelled,
                    reply,
                )
    for name in ("SET", "HSCAN", "PING", "BLPOP"):
        assert name not in AS_SENT and name not in CONVERTED
        assert ours.get(name) is theirs.get(name) is not None


#: URLs a NodeClient serves, each read by redis-py for comparison.
PLAIN_URLS = [
    "redis://localhost",
    "redis://127.0.0.1:6380/2",
    "redis://:s3cret@db.example:7000/0",
    "redis://app:p%40ss@Db.Example/3",
    "redis://user@h/1",
    "redis://h/?db=4",
    "redis://h/5?db=6",
    "redis://h/not-a-number",
    "redis://h?socket_timeout=2.5",
    "redis://h?socket_connect_timeout=1&socket_timeout=3",
    "redis://[::1]:7001/1",
    "unix:///tmp/r.sock",
    "unix:///tmp/r.sock?db=2",
    "unix://:pw@/tmp/r%20s.sock",
]


@pytest.mark.parametrize("url", PLAIN_URLS)
def test_node_address_reads_a_plain_url_as_redis_py_does(url: str) -> None:
    address = node_address(url, socket_timeout=5.0, connect_timeout=4.0)
    assert address is not None
    client = connect(url, socket_timeout=5.0, connect_timeout=4.0)
    try:
        theirs = NativeNode.for_client(client)
        kw = client.connection_pool.connection_kwargs
    finally:
        client.close()
    assert theirs is not None
    ours = NativeNode.for_address(address)
    assert ours._handshake == theirs._handshake
    assert (ours._timeout, ours._connect_timeout) == (theirs._timeout, theirs._connect_timeout)
    if url.startswith("unix://"):
        assert address.path == kw["path"]
    else:
        assert address.path is None
        assert (address.host, address.port) == (kw.get("host", "localhost"), kw.get("port", 6379))


@pytest.mark.parametrize(
    "url",
    [
        "rediss://h",  # TLS
        "redis+cluster://h:7000",
        "redis+sentinel://h:26379/mymaster",
        "redis://h?client_name=worker",  # an option only redis-py reads
        "redis://h?health_check_interval=10",
        "redis://h:abc/0",  # malformed: redis-py says so, on first use
        "redis://h:99999",
        "redis://h?db=x",
        "unix://",
        "REDIS://h",
    ],
)
def test_other_urls_are_left_to_redis_py(url: str) -> None:
    assert node_address(url) is None


async def test_a_plain_url_is_served_without_a_redis_py_client(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url)
    try:
        assert isinstance(await store._adapter.client(), NodeClient)
        with trio.fail_after(10):
            await store.enqueue_many([job("plain")])
            assert (await store.get_job("plain")) is not None
        assert uses_native(store)
    finally:
        await store.aclose()
    # redis_kwargs (or native=False) need redis-py's own client
    for other in (
        RedisStore.from_url(redis_url, health_check_interval=5),
        RedisStore.from_url(redis_url, native=False),
    ):
        try:
            assert not isinstance(await other._adapter.client(), NodeClient)
        finally:
            await other.aclose()


async def test_a_script_that_stays_missing_is_redis_pys_error(redis_url: str) -> None:
    """NOSCRIPT for a script the store did not send (a handler's EVALSHA of
    an unknown SHA) comes back as redis-py's NoScriptError, as before."""
    store = RedisStore.from_url(redis_url)
    try:
        with trio.fail_after(10):
            with pytest.raises(redis.exceptions.NoScriptError):
                await store.commands().execute("EVALSHA", "0" * 40, 0)
            # and the store's own scripts load after a flush, as always
            await store.enqueue_many([job("before")])
            await store.commands().execute("SCRIPT", "FLUSH")
            loads = store.statistics().script_loads
            [result] = await store.enqueue_many([job("after")])
            assert result.created and store.statistics().script_loads == loads + 1
    finally:
        await store.aclose()
