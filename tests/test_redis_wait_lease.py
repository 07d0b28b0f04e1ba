"""An idle worker's wait and lease in one round trip (``_wait_lease``, issue
27 item 5), on one Redis node: the lease sent behind ``XREAD BLOCK`` runs
when the wake-up comes and its jobs come back with it; a cancelled wait
(shutdown) gives back what its lease got; NOSCRIPT while blocked; a worker
killed while such a wait is out (its jobs are recovered)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import trio

from chronos_trio import JobState, NewJob
from chronos_trio.store import LeaseResult, QueueWeight, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore, _wait_lease
from tests import test_wake_stall
from tests._support import Recorder, Work, wait_for
from tests.test_wake_stall import Starts, Worker
from tests.test_wake_stall import blocked_clients as blocked
from tests.tests_app import Record, make_app

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]
Q = [QueueWeight("q")]


def job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


#: Worker processes (``workers(url, name, *options)``), continued and killed
#: after each test: the wake-stall tests' fixture.
workers = test_wake_stall.workers


def command_calls(url: str, name: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


async def idle(worker: RedisStore, producer: RedisStore) -> None:
    """The calling task as an idle leaser is: the queue exists and the
    scripts are loaded (one job run), it has seen the wake-up stream, and
    its lease since (the look) found nothing."""
    await producer.enqueue_many([job("warm")])  # the topology read: enqueue.lua
    await producer.enqueue_many([job("warm2")])  # a lone plain job's: enqueue_plain.lua
    jobs = (await worker.lease(Q, 4, worker_id="w", lease_duration=30)).jobs
    assert len(jobs) == 2
    done = [Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in jobs]
    assert (await worker.settle(done)).settled == (True, True)
    await worker.wait_ready(["q"], 5.0, held=True)  # reads the stream's last ID, returns
    assert (await worker.lease(Q, 4, worker_id="w", lease_duration=30)).jobs == ()


async def wait_lease(worker: RedisStore, timeout: float = 10.0) -> LeaseResult | None:
    return await worker.wait_lease(Q, 4, worker_id="w", lease_duration=30, timeout=timeout)


async def test_a_job_enqueued_while_blocked_comes_back_leased_with_the_wake_up(
    redis_store: Factory, redis_url: str
) -> None:
    worker, producer = await redis_store(), await redis_store()
    got: list[LeaseResult | None] = []
    with trio.fail_after(10):

        async def wait(task_status: trio.TaskStatus[int]) -> None:
            await idle(worker, producer)  # this task's, as the leaser's would be
            task_status.started(command_calls(redis_url, "evalsha"))
            got.append(await wait_lease(worker))

        async with trio.open_nursery() as nursery:
            evalsha = await nursery.start(wait)
            await blocked(redis_url, 1)
            await producer.enqueue_many([job("a")])
        [result] = got
        assert result is not None
        [lj] = result.jobs
        assert (lj.job.id, lj.job.attempts) == ("a", 1)
        # one enqueue script and one lease script: the lease was not sent apart
        assert command_calls(redis_url, "evalsha") == evalsha + 2
        assert (await worker.settle([Settlement(lj.ref, SettleKind.SUCCEEDED)])).settled == (True,)
        assert await worker.get_job("a") is None


async def test_a_wait_that_times_out_leases_nothing_and_blocks_from_the_last_entry(
    redis_store: Factory, redis_url: str
) -> None:
    worker, producer = await redis_store(), await redis_store()
    with trio.fail_after(10):
        await idle(worker, producer)  # this task's, as the leaser's would be
        started = time.monotonic()
        result = await wait_lease(worker, timeout=0.3)
        assert result is not None and result.jobs == ()
        assert 0.25 < time.monotonic() - started < 2.0


async def test_not_offered_before_the_task_has_seen_the_stream(redis_store: Factory) -> None:
    worker, producer = await redis_store(), await redis_store()
    with trio.fail_after(10):
        await producer.enqueue_many([job("a")])
        assert await wait_lease(worker) is None  # nothing was leased
        assert (await worker.get_job("a")).state is JobState.READY  # type: ignore[union-attr]


async def test_a_cancelled_wait_gives_back_what_its_lease_got_at_once(
    redis_store: Factory, redis_url: str
) -> None:
    """Cancelled while blocked (shutdown), the wait ends the read with CLIENT
    UNBLOCK; Redis then runs the lease queued behind it, which here finds a
    ready job (its wake-up lies before the ID the read blocks from): the
    wait reads that reply and releases the job before it lets the
    cancellation go on. Without the release the job would stay leased to a
    worker that never knew of it until its lease expired (30 s here)."""
    worker, producer = await redis_store(), await redis_store()
    with trio.fail_after(10):
        unblocks = command_calls(redis_url, "client|unblock")

        async def wait(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            await idle(worker, producer)
            await producer.enqueue_many([job("a")])
            seen = worker._ctx.wake_seen()
            seen.ids[worker._ctx.keys.wake_ready("q")] = b"99999999999999-0"  # never reached
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await wait_lease(worker)
            assert scope.cancelled_caught

        async with trio.open_nursery() as nursery:
            scope = await nursery.start(wait)
            await blocked(redis_url, 1)
            evalsha = command_calls(redis_url, "evalsha")
            cancelled_at = time.monotonic()
            scope.cancel()
        assert time.monotonic() - cancelled_at < 1.0  # the 3 s block was ended
        assert command_calls(redis_url, "client|unblock") == unblocks + 1
        # the lease ran (and leased "a"), then the release's settle
        assert command_calls(redis_url, "evalsha") == evalsha + 2
        back = await worker.get_job("a")
        assert back is not None and back.state is JobState.READY and back.lease_owner == ""
        [lj] = (await worker.lease(Q, 4, worker_id="other", lease_duration=30)).jobs
        assert (lj.job.id, lj.job.attempts) == ("a", 1)  # the released attempt is not counted


async def test_noscript_while_blocked_leases_after_loading_the_script(
    redis_store: Factory, redis_url: str
) -> None:
    worker, producer = await redis_store(), await redis_store()
    got: list[LeaseResult | None] = []
    with trio.fail_after(10):

        async def wait(task_status: trio.TaskStatus[int]) -> None:
            await idle(worker, producer)
            task_status.started(worker.statistics().script_loads)
            got.append(await wait_lease(worker))

        async with trio.open_nursery() as nursery:
            loads = await nursery.start(wait)
            await blocked(redis_url, 1)
            admin = redis.Redis.from_url(redis_url)
            admin.script_flush()
            admin.close()
            await producer.enqueue_many([job("a")])
        [result] = got
        assert result is not None and [lj.job.id for lj in result.jobs] == ["a"]
        assert worker.statistics().script_loads > loads


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Jobs each wait_lease call came back with."""
    counts: list[int] = []
    real = _wait_lease.wait_lease

    async def counting(*args: Any, **kwargs: Any) -> LeaseResult | None:
        result = await real(*args, **kwargs)
        if result is not None:
            counts.append(len(result.jobs))
        return result

    monkeypatch.setattr(_wait_lease, "wait_lease", counting)
    return counts


async def test_jobs_leased_with_their_wake_ups_run_and_settle(
    redis_store: Factory, counted: list[int]
) -> None:
    store = await redis_store()
    rec = Recorder(store)
    n = 30
    with trio.fail_after(30):
        async with rec.app.open_worker(queues="default", concurrency=16):
            for i in range(n):
                await rec.work.enqueue(Work(i))
                await trio.sleep(0.02)
            await wait_for(lambda: len(rec.finished) >= n)
        assert sum(rec.finished.values()) == n  # each once
        assert sum(counted) >= n // 2  # most came with their wake-ups
        assert await rec.states() == {}  # nothing left leased or ready


async def test_a_shutdown_while_blocked_loses_nothing_and_leaves_nothing_leased(
    redis_store: Factory, redis_url: str, counted: list[int]
) -> None:
    """Each round: a worker runs a job (so it waits with wait_lease), then a
    job is enqueued as the worker shuts down. However the two meet, the job
    is never left leased once the worker is gone; a last worker runs every
    job, each once."""
    store = await redis_store()
    rec = Recorder(store)
    rounds = 8
    with trio.fail_after(60):
        for i in range(rounds):
            async with rec.app.open_worker(queues="default", concurrency=4):
                await rec.work.enqueue(Work(1000 + i))
                await wait_for(lambda done=i + 1: len(rec.finished) >= done)
                await blocked(redis_url, 2)  # the leaser and the promoter
                await rec.work.enqueue(Work(i), delay=None)
                exit_at = time.monotonic()
            assert time.monotonic() - exit_at < 1.5  # no wait for a block to end
            assert JobState.LEASED not in await rec.states()
        assert counted  # the workers waited with wait_lease
        async with rec.app.open_worker(queues="default", concurrency=4):
            await wait_for(lambda: len(rec.finished) >= 2 * rounds)
        assert set(rec.finished.values()) == {1}
        assert await rec.states() == {}


async def test_a_worker_killed_while_its_wait_lease_is_out_has_its_job_recovered(
    workers: Callable[..., Worker], redis_url: str
) -> None:
    """The exposure the wait's lease brings (``wait_lease_window``, 1 s by default): a
    worker stopped right after a job, its wait (with the lease behind it)
    still out, takes the next job into that lease although it never runs
    it. Killed (-9), the job is recovered when that lease expires (2 s) and
    runs on another worker, once."""
    producer = make_app(redis_url)
    starts = Starts(redis_url, "kill")
    first = workers(redis_url, "first", "--lease-duration", "2", "--queues", "default")
    try:
        with trio.fail_after(40):
            await blocked(redis_url, 2)  # idle: it has seen the wake-up stream
            [h1] = await producer.tasks["tests.record"].enqueue_many([Record("kill")])
            pid, _ = await starts.of(h1.job_id, time.time() + 20, first)
            assert pid == first.pid
            await blocked(redis_url, 2)  # idle again: its leaser waits with wait_lease
            first.stop()
            [h2] = await producer.tasks["tests.record"].enqueue_many([Record("kill")])
            store = producer.store
            assert isinstance(store, RedisStore)
            await trio.sleep(0.2)
            leased = await store.get_job(h2.job_id)
            assert leased is not None and leased.state is JobState.LEASED  # by the stopped one
            os.kill(first.pid, signal.SIGKILL)
            second = workers(redis_url, "second")
            pid, _ = await starts.of(h2.job_id, time.time() + 15, second)
            assert pid == second.pid
            runs = starts.client.lrange("kill:start", 0, -1)
            assert sum(line.decode().split()[0] == h2.job_id for line in runs) == 1
    finally:
        await producer.aclose()
        starts.client.close()


@pytest.mark.parametrize(("window", "after"), [(0.5, 1.0), (0.0, 0.0)], ids=["past", "off"])
async def test_a_worker_stopped_after_the_window_takes_no_job(
    workers: Callable[..., Worker], redis_url: str, window: float, after: float
) -> None:
    """Past ``wait_lease_window`` after its last job (or with the window 0:
    at once) a worker waits without a lease behind its read: stopped then,
    it takes nothing (the job stays ready for any other worker). With a
    window of 100 s it failed so (the stopped worker's lease took the job)."""
    producer = make_app(redis_url)
    starts = Starts(redis_url, "late")
    first = workers(redis_url, "first", "--queues", "default", "--wait-lease-window", str(window))
    try:
        with trio.fail_after(40):
            await blocked(redis_url, 2)  # idle: it has seen the wake-up stream
            [h1] = await producer.tasks["tests.record"].enqueue_many([Record("late")])
            pid, _ = await starts.of(h1.job_id, time.time() + 20, first)
            assert pid == first.pid
            await trio.sleep(after)
            await blocked(redis_url, 2)
            first.stop()
            [h2] = await producer.tasks["tests.record"].enqueue_many([Record("late")])
            store = producer.store
            assert isinstance(store, RedisStore)
            await trio.sleep(0.3)
            job2 = await store.get_job(h2.job_id)
            assert job2 is not None and job2.state is JobState.READY
    finally:
        await producer.aclose()
        starts.client.close()
