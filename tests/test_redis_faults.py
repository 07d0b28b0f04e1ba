"""Redis faults: a server killed and restarted, SCRIPT FLUSH mid-run, a
stale worker's ack after its lease was recovered and handed to someone else,
and an abort flag across a restart."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import redis
import trio

from chronos_trio import AbortResult, App, JobContext, JobState, NewJob
from chronos_trio.runtime import Stage
from chronos_trio.store import QueueWeight, SettleKind, Settlement, StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import FaultyStore
from chronos_trio.testing.redis_server import RedisServer
from tests._support import Recorder, Work, wait_for

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}", **kw)  # type: ignore[arg-type]


async def test_stale_ack_after_recovery_is_rejected_and_harmless(redis_store: Factory) -> None:
    a = await redis_store(default_partitions=8)
    b = await redis_store(default_partitions=8)
    await a.enqueue_many([job("x", max_retries=5)])
    [old] = (await a.lease([QueueWeight("q")], 1, worker_id="a", lease_duration=0.2)).jobs
    with trio.fail_after(5):
        while not (await b.recover_expired(["q"], 10)).requeued:
            await trio.sleep(0.05)
    [new] = (await b.lease([QueueWeight("q")], 1, worker_id="b", lease_duration=5)).jobs
    assert new.job.id == "x" and new.token != old.token and new.job.attempts == 2
    before = await b.get_job("x")
    for kind in SettleKind:
        assert (await a.settle([Settlement(old.ref, kind, error="stale")])).settled == (False,)
    assert (await a.renew([old.ref], 5)).renewed == (False,)
    after = await b.get_job("x")
    assert after == before  # not touched at all
    assert after is not None and after.state is JobState.LEASED and after.lease_owner == "b"
    assert (await b.settle([Settlement(new.ref, SettleKind.SUCCEEDED)])).settled == (True,)
    assert await b.get_job("x") is None


async def test_killed_and_restarted_server() -> None:
    with RedisServer() as server, trio.fail_after(30):
        store = RedisStore.from_url(server.url, default_partitions=4)
        await store.enqueue_many([job("before")])
        loads = store.statistics().script_loads
        server.kill()
        # down: every call fails fast with a clear error instead of hanging
        with trio.fail_after(5):
            for call in (
                store.enqueue_many([job("during")]),
                store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=1),
                store.wait_ready(["q"], 1.0),
                store.now(),
            ):
                with pytest.raises(StoreError, match="Redis at"):
                    await call
        server.start()  # same port; no persistence, so Redis is empty and has no scripts
        await store.enqueue_many([job("after")])
        [lj] = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=1)).jobs
        assert lj.job.id == "after"
        assert (await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED)])).settled == (True,)
        assert store.statistics().script_loads > loads  # NOSCRIPT was handled
        await store.aclose()


async def test_worker_survives_restart_and_loses_no_persisted_job() -> None:
    """With an fsynced AOF, every job Redis acknowledged survives a SIGKILL; the
    worker rides out the outage and runs every job at least once."""
    with RedisServer(aof="always") as server, trio.fail_after(60):
        store = RedisStore.from_url(server.url, default_partitions=4)
        rec = Recorder(store)
        n = 200
        await rec.work.enqueue_many([Work(i, sleep=0.05) for i in range(n)])
        async with rec.app.open_worker(
            queues="default", concurrency=16, lease_duration=2.0, recover_interval=0.2
        ):
            await wait_for(lambda: len(rec.finished) >= 30)
            server.kill()
            at_kill = len(rec.finished)
            await trio.sleep(0.5)
            server.start()
            await wait_for(lambda: len(rec.finished) >= n, poll=0.05)
        assert at_kill < n - 50  # the outage really was mid-run
        assert len(rec.finished) == n
        [stats] = await store.stats(["default"])
        assert stats.total == 0
        await store.aclose()


async def test_script_flush_mid_run(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store(default_partitions=2)
    rec = Recorder(store)
    n = 300
    # Handlers take a little while, so the run outlasts the flushes below
    # (no-op jobs drain before the second flush).
    await rec.work.enqueue_many([Work(i, sleep=0.02) for i in range(n)])
    admin = redis.Redis.from_url(redis_url)
    with trio.fail_after(30):
        async with rec.app.open_worker(queues="default", concurrency=16):
            for _ in range(5):
                await trio.sleep(0.02)
                admin.script_flush()
            await wait_for(lambda: len(rec.finished) >= n, poll=0.05)
    assert len(rec.finished) == n
    assert store.statistics().script_loads >= 2
    admin.close()


@pytest.mark.parametrize("aof", [None, "always"])
def test_launcher_keeps_acknowledged_writes_across_kill_9_only_with_aof(aof: str | None) -> None:
    """The soak's premise: ``RedisServer(aof="always")`` loads every write it
    acknowledged back after a SIGKILL and a restart on the same port and
    directory; without ``aof`` the restarted server is empty."""
    with RedisServer(aof=aof) as server:  # type: ignore[arg-type]
        port, first_pid = server.port, server.pid
        client = redis.Redis.from_url(server.url)
        for i in range(100):
            client.set(f"k{i}", i)
        server.kill()
        assert server.pid is None and not server.running
        server.start()
        assert server.port == port and server.pid not in (None, first_pid)
        survived = sum(client.exists(f"k{i}") for i in range(100))
        client.close()
    assert survived == (100 if aof else 0)


async def test_an_abort_flag_survives_a_restart_and_its_worker_still_aborts_the_job() -> None:
    """An abort asked for a running job is a field of its record: with an
    fsynced AOF it outlives a SIGKILL of Redis, and the worker learns it with
    its first renewal after the restart (its renewals before the abort and
    through the outage fail on purpose: the flag can only come from the
    restarted server), cancels the handler and records the job aborted."""
    with RedisServer(aof="always") as server, trio.fail_after(30):
        admin = RedisStore.from_url(server.url, default_partitions=4)
        faulty = FaultyStore(RedisStore.from_url(server.url, default_partitions=4))
        app = App(faulty)
        runs: list[bool] = []

        @app.task("long")
        async def long(n: int, job: JobContext) -> None:
            try:
                await trio.sleep(1000)
            finally:
                runs.append(job.abort_requested)

        async with app.open_worker(
            heartbeat_interval=0.2, lease_duration=10.0, recover_interval=0.2
        ) as worker:
            handle = await long.enqueue(1)
            await wait_for(lambda: bool(worker.runtime.table.in_stage(Stage.RUNNING)))
            faulty.break_ops("renew")  # this worker hears nothing until the restart
            assert await admin.abort(handle.job_id, reason="restart") is AbortResult.FLAGGED
            server.kill()
            await trio.sleep(0.5)
            server.start()
            held = await admin.get_job(handle.job_id)
            assert held is not None and held.state is JobState.LEASED, "the lease survived"
            assert runs == [], "nothing told the worker yet"
            faulty.heal()
            await wait_for(lambda: worker.statistics().aborted == 1, poll=0.05)
            assert runs == [True]
        job = await admin.get_job(handle.job_id)
        assert job is not None and job.state is JobState.ABORTED
        assert job.last_error == "aborted: restart" and job.attempts == 1
        await admin.aclose()
        await faulty.aclose()
