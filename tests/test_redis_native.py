"""The Trio-native round trips to a single Redis node (``store.redis._native``):
which connections use them, database selection, Unix sockets, a hung or
restarted server, a cancelled caller. (The thread path it replaces runs the
conformance suite in test_redis_conformance.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import NewJob
from chronos_trio.store import QueueWeight, StoreError
from chronos_trio.store.redis import RedisStore
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
async def test_a_cancelled_wait_gives_its_wake_up_to_the_next_waiter(
    redis_url: str, native: bool
) -> None:
    """A waiter cancelled while its BLPOP blocks: the token that BLPOP pops
    later is pushed back, so the next waiter wakes at once instead of
    sleeping out its timeout (the wake-up is never lost)."""
    store = RedisStore.from_url(redis_url, namespace=f"wake-{native}", native=native)
    try:
        await store.stats(["q"])  # the queue's topology, read once
        with trio.CancelScope() as first:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.wait_ready, ["q"], 20.0)
                await trio.sleep(0.3)  # blocked in BLPOP now
                first.cancel()
        # the token arrives after the cancel: the abandoned BLPOP pops it
        await store.enqueue_many([NewJob("j1", "q", "k", b"{}")])
        await trio.sleep(0.3)
        # no ready job left, so the next wait blocks on the token alone
        [got] = await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=5)
        assert got.job.id == "j1"
        with trio.fail_after(5):
            start = trio.current_time()
            await store.wait_ready(["q"], 3.0)
            assert trio.current_time() - start < 1.0, "the wake-up token was lost"
    finally:
        await store.aclose()
