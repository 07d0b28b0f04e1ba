"""The quiet wait of a lone round trip (issue 27, item 1; ``store/redis/_quiet``):
a lone enqueue in a Trio run with nothing else to do blocks in ``poll()``
for its reply instead of a pass of Trio's scheduler, and gives up (the
round trip goes on in the scheduler's wait) as soon as the run has work;
replies, errors, timeouts, cancellation and retries stay as they were."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
import trio.testing

from chronos_trio import App, JobContext, JobState, NewJob
from chronos_trio.store import StoreError
from chronos_trio.store.redis import RedisStore, _quiet
from chronos_trio.store.redis._native import Dead, _Connection, _timer
from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import RedisServer


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


@asynccontextmanager
async def store_at(url: str, **kw: float) -> AsyncIterator[RedisStore]:
    store = RedisStore.from_url(url, **kw)
    try:
        await store.enqueue_many([job("warm")])  # the native node and a pooled connection
        yield store
    finally:
        await store.aclose()


def grant(quiet: _quiet.QuietRun, n: int = 1000) -> None:
    """Let the next ``n`` lone round trips block, whatever a probe would say."""
    quiet._credit = n


@contextmanager
def proxy_in_thread(upstream_port: int) -> Iterator[tuple[TcpProxy, trio.lowlevel.TrioToken]]:
    """A TcpProxy served by a Trio run of its own thread: its tasks are not
    the test run's, which stays quiet. Its switches are flipped from the
    test through the token."""
    proxy = TcpProxy(upstream_port)
    started = threading.Event()
    holder: list[trio.lowlevel.TrioToken] = []
    stop = threading.Event()

    async def serve() -> None:
        holder.append(trio.lowlevel.current_trio_token())
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            started.set()
            while not stop.is_set():
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield proxy, holder[0]
    finally:
        stop.set()
        thread.join(10)


def flip(token: trio.lowlevel.TrioToken, switch: Callable[..., object], *args: object) -> None:
    """Call a proxy switch in the proxy's own run, and wait until it is done
    (blocking this thread for a moment: the proxy's run is another thread)."""
    done = threading.Event()

    def call() -> None:
        switch(*args)
        done.set()

    token.run_sync_soon(call)
    assert done.wait(5)


def test_trio_internals_in_use() -> None:
    """The Trio internals the quiet wait reads exist on the installed Trio
    (if not, every wait silently takes the scheduler: this says so)."""

    async def main() -> None:
        quiet = _timer().quiet
        assert quiet._runner is not None and quiet.epoll_fd >= 0

    trio.run(main)


async def test_a_quiet_producer_blocks_for_its_replies(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_quiet, "CAP", 1.0)  # a loaded machine's slow replies still block
    with trio.fail_after(20):
        async with store_at(server.url) as store:
            quiet = _timer().quiet
            before = quiet.blocked
            results = [await store.enqueue_many([job(f"q{i}")]) for i in range(300)]
            assert [r.job_id for [r] in results] == [f"q{i}" for i in range(300)]
            assert all(r.created for [r] in results)
            # (a signal or a thread waking the run ends a block and sends the
            # next 64 to the scheduler: the bound leaves room for two)
            assert quiet.blocked - before >= 150, (quiet.blocked, quiet.probes)
            assert quiet.probes <= 20
            for i in (0, 150, 299):
                assert await store.get_job(f"q{i}") is not None


async def test_a_block_gives_up_when_another_tasks_io_is_ready(server: RedisServer) -> None:
    """The proxy runs in this run: while the enqueue blocks, the proxy's
    socket has the request, Trio's epoll becomes ready, and the block gives
    up (else the request would never be forwarded: the call would wait for
    the block's whole budget, then in the scheduler)."""
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            proxy = TcpProxy(server.port)
            await nursery.start(proxy.run)
            async with store_at(f"redis://127.0.0.1:{proxy.port}/0") as store:
                quiet = _timer().quiet
                for i in range(5):
                    await trio.testing.wait_all_tasks_blocked()  # the proxy waits for bytes
                    grant(quiet)
                    before = quiet.interrupted
                    [r] = await store.enqueue_many([job(f"p{i}")])
                    assert r.created and r.job_id == f"p{i}"
                    assert quiet.interrupted == before + 1
                    assert quiet.budget() == 0.0, "no credit left after the run had work"
            nursery.cancel_scope.cancel()


async def test_a_block_ends_before_another_tasks_deadline(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sleeping task's deadline bounds the block (the proxy, in a thread
    of its own, delays the reply by 0.2 s: the sleeper wakes on time)."""
    with trio.fail_after(20), proxy_in_thread(server.port) as (proxy, token):
        async with store_at(f"redis://127.0.0.1:{proxy.port}/0") as store:
            monkeypatch.setattr(_quiet, "CAP", 5.0)
            flip(token, proxy.set_delay, 0.2)
            woke: list[float] = []

            async def sleeper() -> None:
                start = time.perf_counter()
                await trio.sleep(0.02)
                woke.append(time.perf_counter() - start)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper)
                await trio.sleep(0.001)  # the sleeper is asleep
                quiet = _timer().quiet
                grant(quiet)
                before = quiet.interrupted
                [r] = await store.enqueue_many([job("late")])
            assert r.created
            assert quiet.interrupted == before + 1, "the block ended at the deadline"
            assert woke and woke[0] < 0.1, woke


async def test_a_hung_server_times_out_after_a_block_as_before(server: RedisServer) -> None:
    with trio.fail_after(20), proxy_in_thread(server.port) as (proxy, token):
        async with store_at(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=0.5) as store:
            flip(token, proxy.blackhole)
            quiet = _timer().quiet
            grant(quiet)
            before = quiet.interrupted
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"no reply from Redis within 0\.5s"):
                await store.enqueue_many([job("hung")])
            assert 0.5 <= time.monotonic() - started < 3.0
            assert quiet.interrupted == before + 1, "the block gave up, the timer took over"
            node = store._adapter._native
            assert node is not None and not node._idle, "the timed-out connection is closed"
            flip(token, lambda: proxy.heal(reset=True))
            [r] = await store.enqueue_many([job("after")])
            assert r.created


async def test_a_connection_lost_in_a_block_is_retried_on_a_new_one(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request is held by the proxy, the block waits (a long budget),
    the proxy cuts the connection: the pooled connection died before any
    reply, so the batch is sent once more on a new connection, as on the
    scheduler's path."""
    with trio.fail_after(20), proxy_in_thread(server.port) as (proxy, token):
        async with store_at(f"redis://127.0.0.1:{proxy.port}/0") as store:
            monkeypatch.setattr(_quiet, "CAP", 5.0)
            flip(token, proxy.set_delay, 0.3)
            cut = threading.Timer(
                0.1, lambda: trio.from_thread.run_sync(proxy.reset_all, trio_token=token)
            )
            quiet = _timer().quiet
            grant(quiet)
            blocked = quiet.blocked
            cut.start()
            [r] = await store.enqueue_many([job("cut")])
            cut.join()
            assert r.created and r.job_id == "cut"
            assert proxy.statistics().resets == 1
            assert proxy.statistics().accepted == 2, "sent once more on a new connection"
            # it waited blocking (at least once: on a loaded machine a timer of
            # the run may end a block, and the wait blocks again after it)
            assert quiet.blocked > blocked
            assert await store.get_job("cut") is not None


async def test_a_caller_cancelled_after_a_block_gave_up_gets_its_result_first(
    server: RedisServer,
) -> None:
    """A block ends at a sleeping task's deadline; that task cancels the
    caller while the round trip waits in the scheduler: the round trip is
    finished, the caller gets its result, the cancellation lands at its
    next checkpoint."""
    with trio.fail_after(20), proxy_in_thread(server.port) as (proxy, token):
        async with store_at(f"redis://127.0.0.1:{proxy.port}/0") as store:
            flip(token, proxy.set_delay, 0.3)
            got = []
            scope = trio.CancelScope()

            async def canceller() -> None:
                await trio.sleep(0.05)
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(canceller)
                await trio.sleep(0.001)
                quiet = _timer().quiet
                grant(quiet)
                with scope:
                    got.append(await store.enqueue_many([job("cancelled")]))
                    await trio.lowlevel.checkpoint()
                    got.append(None)  # never: the checkpoint raises
            assert scope.cancelled_caught
            assert [r.job_id for r in got[0]] == ["cancelled"]
            assert await store.get_job("cancelled") is not None
            node = store._adapter._native
            assert node is not None and node._idle, "its connection went back with no reply unread"
            [r] = await store.enqueue_many([job("next")])
            assert r.job_id == "next" and r.created


async def test_concurrent_callers_found_by_a_probe_share_round_trips(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet producer has credit; then twenty callers enqueue at once,
    ten times each: within a few round trips a probe sees them, and they
    go as groups again (a caller blocks ahead of its batch mates for at
    most the credit it had)."""
    monkeypatch.setattr(_quiet, "CAP", 1.0)  # a loaded machine's slow replies still block
    with trio.fail_after(20):
        async with store_at(server.url) as store:
            for i in range(200):
                await store.enqueue_many([job(f"solo{i}")])
            quiet = _timer().quiet
            assert quiet.blocked > 100
            results: dict[str, str] = {}

            async def one(i: int) -> None:
                for k in range(10):
                    [r] = await store.enqueue_many([job(f"c{i}-{k}")])
                    results[f"c{i}-{k}"] = r.job_id

            blocked = quiet.blocked
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
            assert results == {k: k for k in results} and len(results) == 200
            assert quiet.blocked - blocked <= _quiet.CREDIT
            assert store._enqueues.groups_sent >= 5, "waiting callers went as groups"


def test_a_block_raises_dead_when_the_peer_closes_midway() -> None:
    """Connection loss mid-reply in a block: Dead, with ``replied`` set
    once a reply came (the batch may have run: never sent again)."""

    async def main() -> None:
        quiet = _timer().quiet
        for partial, replied in ((b"", False), (b"+OK\r\n", True)):
            a, b = socket.socketpair()
            conn = _Connection(trio.SocketStream(trio.socket.from_stdlib_socket(a)))
            conn.begin([("PING",), ("PING",)])

            def answer(b: socket.socket = b, partial: bytes = partial) -> None:
                b.recv(100)
                b.sendall(partial)
                b.close()

            t = threading.Timer(0.05, answer)
            t.start()
            with pytest.raises(Dead) as caught:
                conn.pump_quiet(quiet.epoll_fd, 5.0)
            t.join()
            assert caught.value.replied is replied
            a.close()

    trio.run(main)


async def test_a_finished_jobs_result_is_one_lone_round_trip(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``result()`` of a finished job, the subscription confirmed: one
    round trip, a lone one (blocked for in a quiet run, no cancel scope, no
    scheduler pass: issue 29, a chain's result read); a status read too."""
    monkeypatch.setattr(_quiet, "CAP", 1.0)  # a loaded machine's slow replies still block
    with trio.fail_after(20):
        async with store_at(server.url) as store:
            app = App(store)

            @app.task("add")
            async def add(payload: int, job: JobContext) -> int:
                return payload + 1

            async with app.open_worker(poll_interval=0.05):
                handle = await app.tasks["add"].enqueue(1)
                assert await handle.result(timeout=10) == 2  # subscribed since
            quiet = _timer().quiet
            grant(quiet)
            trips, blocked = store.statistics().round_trips, quiet.blocked
            assert await handle.result(timeout=10) == 2
            assert (await handle.status()).state is JobState.SUCCEEDED
            assert store.statistics().round_trips - trips == 2
            assert quiet.blocked - blocked == 2
