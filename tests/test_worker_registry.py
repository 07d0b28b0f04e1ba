"""The worker registry in the runtime: each worker records itself in the
store (actors/registrar), beats with its running jobs, and leaves on a clean
stop or when its beat lapses. On the MemoryStore under Trio's virtual clock,
so the times asserted are exact beats; and the RedisStore's handling of
unreadable and lapsed entries. (The store methods themselves are held to the
conformance suite; real worker processes on Redis are in
tests/test_cli_workers.py.)"""

from __future__ import annotations

import logging
import os
import socket

import pytest
import trio

from chronos_trio import App, Inspector, JobContext, MemoryStore, WorkerConfig, WorkerInfo
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import FaultyStore

#: A beat every 2 s; the entry lapses 6 s after the last one.
TIMING = {"lease_duration": 6.0, "heartbeat_interval": 2.0}


def _app(store: MemoryStore | FaultyStore) -> tuple[App, trio.Event, list[str]]:
    app = App(store)
    release = trio.Event()
    running: list[str] = []

    @app.task("hold")
    async def hold(args: int, job: JobContext) -> None:
        running.append(job.id)
        await release.wait()

    return app, release, running


def test_registry_ttl_defaults_to_three_beats_and_must_outlast_one() -> None:
    assert WorkerConfig(**TIMING).registry_ttl == 6.0  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"registry_ttl \(2.0s\) must be longer"):
        WorkerConfig(registry_ttl=2.0, **TIMING)  # type: ignore[arg-type]


async def test_worker_registers_on_start_beats_with_its_running_jobs_and_leaves_on_stop(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    app, release, running = _app(store)
    inspector = Inspector(store)
    t0 = await store.now()
    async with app.open_worker(
        queues="default,low", concurrency=3, worker_id="me", **TIMING
    ) as worker:
        [info] = await inspector.workers()
        assert info == WorkerInfo(
            worker_id="me",
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=("default", "low"),
            concurrency=3,
            started_at=t0,
            last_beat=t0,
            running=0,
            running_job_ids=(),
            kinds=("hold",),
        ), "listed from the start, before any job, with the kinds it runs"
        hold = app.tasks["hold"]
        for n in range(5):
            await hold.enqueue(n, job_id=f"h{n}")
        with trio.fail_after(1):
            while len(running) < 3:
                await trio.sleep(0.01)
        # nothing is written per job: the entry changes at the next beat only
        assert (await inspector.workers())[0].running == 0
        await trio.sleep(2.0 - (await store.now() - t0) + 0.001)
        [info] = await inspector.workers()
        assert info.last_beat == pytest.approx(t0 + 2.0), "one beat per heartbeat interval"
        assert info.started_at == t0, "the start time stays"
        assert info.running == 3 and set(info.running_job_ids) == set(running)
        release.set()
        await worker.wait_idle()
        await trio.sleep(2.0)
        [info] = await inspector.workers()
        assert info.running == 0 and info.running_job_ids == ()
    assert await inspector.workers() == [], "a clean stop unregisters at once"


async def test_two_workers_are_listed_by_host_and_pid_and_each_leaves_alone(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    app, _release, _running = _app(store)
    inspector = Inspector(store)
    async with app.open_worker(worker_id="b", **TIMING):
        async with app.open_worker(worker_id="a", **TIMING):
            ids = [w.worker_id for w in await inspector.workers()]
            assert sorted(ids) == ["a", "b"] and len(ids) == 2
        assert [w.worker_id for w in await inspector.workers()] == ["b"]


async def test_a_worker_that_never_unregisters_drops_out_when_its_beat_lapses(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """As a process killed with SIGKILL: its entry stays until the ttl passes."""
    store = FaultyStore(MemoryStore())
    store.break_ops("unregister_worker")
    app, _release, _running = _app(store)
    inspector = Inspector(store)
    async with app.open_worker(worker_id="killed", **TIMING):
        await trio.sleep(3.0)  # the last beat at 2 s
    stopped = await store.now()
    assert "left in the registry until its entry lapses" in caplog.text
    [info] = await inspector.workers()
    assert info.worker_id == "killed"
    await trio.sleep(info.last_beat + 6.0 - stopped - 0.01)
    assert len(await inspector.workers()) == 1, "listed until its ttl has passed"
    await trio.sleep(0.02)
    assert await inspector.workers() == [], "gone, with nothing left to remove it"


async def test_a_store_outage_delays_the_beats_without_stopping_the_worker(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = FaultyStore(MemoryStore())
    store.break_ops("beat_worker")
    app, _release, _running = _app(store)
    inspector = Inspector(store)
    async with app.open_worker(worker_id="w", **TIMING):
        assert await inspector.workers() == [], "not registered while the store refuses"
        await trio.sleep(5.0)
        store.heal()
        await trio.sleep(2.5)
        [info] = await inspector.workers()
        assert info.worker_id == "w"
        assert store.calls["beat_worker"] >= 3


async def test_an_unreadable_entry_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    now = await store.now()
    await store.beat_worker(WorkerInfo("ok", "h", 1, ("q",), 1, now, 0.0, 0, ()), 30.0)
    store._workers.put("junk", b"{not json", now, 30.0)
    store._workers.put("newer", b'{"v": 99}', now, 30.0)
    with caplog.at_level(logging.WARNING, "chronos_trio.store"):
        assert [w.worker_id for w in await Inspector(store).workers()] == ["ok"]
    assert 'skipped worker=junk error="not JSON' in caplog.text
    assert 'skipped worker=newer error="record format 99 is newer' in caplog.text


@pytest.mark.redis
async def test_redis_registry_skips_unreadable_entries_and_sweeps_lapsed_ones(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import redis

    store = RedisStore.from_url(redis_url, namespace="reg")
    client = redis.Redis.from_url(redis_url)
    info, lapse = "{reg:workers}:info", "{reg:workers}:lapse"
    try:
        now = await store.now()
        await store.beat_worker(WorkerInfo("ok", "h", 1, ("q",), 1, now, 0.0, 0, ()), 30.0)
        client.hset(info, mapping={"junk": b"\xff{", "newer": b'{"v": 99}'})
        client.zadd(lapse, {"junk": now + 60, "newer": now + 60, "no-entry": now + 60})
        with caplog.at_level(logging.WARNING, "chronos_trio.store.redis"):
            [ok] = await store.workers()
        assert ok.worker_id == "ok" and ok.last_beat == pytest.approx(now, abs=0.05)
        for text in (
            'worker=junk error="not JSON',
            'worker=newer error="record format 99',
            "worker=no-entry",
        ):
            assert text in caplog.text
        # a lapsed entry is not listed, and the next beat (of anyone) removes it
        client.hset(info, "old", b"{}")
        client.zadd(lapse, {"old": now - 1})
        assert [w.worker_id for w in await store.workers()] == ["ok"]
        await store.beat_worker(WorkerInfo("ok", "h", 1, ("q",), 1, now, 0.0, 0, ()), 30.0)
        assert not client.hexists(info, "old") and client.zscore(lapse, "old") is None
        await store.unregister_worker("ok")
        assert not client.hexists(info, "ok") and client.zscore(lapse, "ok") is None
    finally:
        client.close()
        await store.aclose()
