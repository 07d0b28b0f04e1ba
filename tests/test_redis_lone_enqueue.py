"""The lone Trio enqueue (issue 27, item 1): a caller with no concurrent
enqueue runs its plan with no cancel scope (``StoreContext.run_shielded``,
``NativeNode.execute(lone=True)``), and keeps every guarantee of the
shielded path: a sent round trip is never abandoned (the cancellation comes
at the caller's next checkpoint), a hung server still times out with the
same error, concurrent callers still share round trips."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

import chronos_trio
from chronos_trio import NewJob
from chronos_trio.store import StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._native import _TIMER
from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import RedisServer


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


@attrs.frozen
class Note:
    text: str


@asynccontextmanager
async def proxied_store(socket_timeout: float = 5.0) -> AsyncIterator[tuple[RedisStore, TcpProxy]]:
    """A store on a private redis-server behind a TcpProxy, warmed (its
    native node made, a pooled connection) so the next enqueue is lone."""
    with RedisServer() as server:
        async with trio.open_nursery() as nursery:
            proxy = TcpProxy(server.port)
            await nursery.start(proxy.run)
            store = RedisStore.from_url(
                f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=socket_timeout
            )
            try:
                await store.enqueue_many([job("warm")])
                assert store._adapter._native is not None  # the lone path applies
                yield store, proxy
            finally:
                proxy.heal()
                await store.aclose()
                nursery.cancel_scope.cancel()


@pytest.mark.parametrize("longer_first", [False, True])
async def test_a_hung_server_times_out_a_lone_enqueue_with_the_usual_error(
    longer_first: bool,
) -> None:
    """``longer_first``: a store with a 5 s timeout used the run's timer
    first (its deadline passed, the timer idle): the shorter timeout of the
    next round trip still wakes it in time."""
    with RedisServer() as other:
        longer = RedisStore.from_url(other.url, socket_timeout=5.0)
        try:
            if longer_first:
                await longer.enqueue_many([job("first")])
                assert not _TIMER.get().inflight  # its round trip is over
            await _hung_times_out()
        finally:
            await longer.aclose()


async def _hung_times_out() -> None:
    with trio.fail_after(20):
        async with proxied_store(socket_timeout=0.5) as (store, proxy):
            node = store._adapter._native
            assert node is not None
            proxy.blackhole()
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"no reply from Redis within 0\.5s"):
                await store.enqueue_many([job("hung")])
            waited = time.monotonic() - started
            assert 0.5 <= waited < 3.0, waited
            assert not node._idle, "the timed-out connection is closed, not pooled"
            assert not _TIMER.get().inflight, "nothing left for the timer"
            proxy.heal(reset=True)
            [result] = await store.enqueue_many([job("after")])
            assert result.created, "a new connection after the timeout"


async def test_a_caller_cancelled_while_its_lone_enqueue_waits_gets_its_handle_first() -> None:
    with trio.fail_after(20):
        async with proxied_store() as (store, proxy):
            app = chronos_trio.App(store)
            task = app.task("lone.note")(_note)
            handles: list[chronos_trio.JobHandle[None]] = []
            scope = trio.CancelScope()

            async def call() -> None:
                with scope:
                    handles.append(await task.enqueue(Note("sent")))
                    await trio.lowlevel.checkpoint()  # the cancellation lands here
                    handles.append(await task.enqueue(Note("never")))

            async with trio.open_nursery() as nursery:
                proxy.blackhole()  # holds the request: the call waits for its reply
                nursery.start_soon(call)
                await trio.sleep(0.3)
                scope.cancel()
                await trio.sleep(0.3)
                assert not handles, "the sent round trip is not abandoned"
                proxy.heal()  # the held request goes on, and its reply comes
            assert scope.cancelled_caught
            [handle] = handles
            stored = await store.get_job(handle.job_id)
            assert stored is not None and stored.kind == "lone.note"
            assert not _TIMER.get().inflight  # the lone path ran, and left nothing timed


async def test_an_already_cancelled_caller_still_stores_its_lone_enqueue() -> None:
    with trio.fail_after(20):
        async with proxied_store() as (store, _proxy):
            got = []
            with trio.CancelScope() as scope:
                scope.cancel()
                got.append(await store.enqueue_many([job("pre-cancelled")]))
                await trio.lowlevel.checkpoint()
            assert scope.cancelled_caught
            assert [r.job_id for r in got[0]] == ["pre-cancelled"]
            assert await store.get_job("pre-cancelled") is not None
            assert not _TIMER.get().inflight  # the lone path ran, and left nothing timed


async def test_concurrent_callers_still_share_round_trips() -> None:
    with trio.fail_after(20):
        async with proxied_store() as (store, _proxy):
            results: dict[int, str] = {}

            async def one(i: int) -> None:
                [r] = await store.enqueue_many([job(f"c{i}")])
                results[i] = r.job_id

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
            assert results == {i: f"c{i}" for i in range(20)}
            assert store._enqueues.groups_sent >= 1, "waiting callers went as groups"


async def _note(note: Note) -> None:
    return None


async def test_an_idle_connection_holds_neither_its_last_request_nor_its_replies() -> None:
    """A pooled connection keeps nothing of its last round trip: 20 jobs of
    100 kB each would otherwise stay alive (2 MB) until its next use."""
    with RedisServer() as server:
        store = RedisStore.from_url(server.url)
        try:
            with trio.fail_after(20):
                big = [
                    NewJob(id=f"big-{i}", queue="q", kind="k", payload=b'"' + b"x" * 100_000 + b'"')
                    for i in range(20)
                ]
                assert all(r.created for r in await store.enqueue_many(big))
            node = store._adapter._native
            assert node is not None and node._idle
            for conn in node._idle:
                assert conn._out.nbytes == 0 and len(conn._out.obj) == 0
                assert conn._got == []
        finally:
            await store.aclose()
