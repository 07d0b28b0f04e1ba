"""Fault injection: actors killed mid-flight, restart intensity, lease loss,
store outages. Every test checks that no job is lost or stuck. Each runs on
the MemoryStore under Trio's virtual clock and on a real Redis with short
real intervals (see tests/_backends.py)."""

from __future__ import annotations

import pytest
import trio

import chronos_trio
from chronos_trio import ACTORS, ActorFailed, JobState
from chronos_trio.store import PromotionRole, QueueWeight
from chronos_trio.testing import FaultyStore
from tests._backends import Backend
from tests._support import Recorder, Work, wait_for

#: Worker timing on memory; on Redis, backend.timing() shortens each one.
OPTS = {"poll_interval": 0.5, "lease_duration": 4.0, "recover_interval": 0.5}


@pytest.mark.parametrize("actor", ACTORS)
async def test_killing_any_actor_loses_no_job(actor: str, backend: Backend, clock: object) -> None:
    store = backend.store()
    if actor == "promoter" and not isinstance(store, PromotionRole):
        pytest.skip(f"{type(store).__name__} runs no promoter: its claims judge due times")
    rec = Recorder(store, max_retries=3)
    # Ready jobs, delayed jobs, and the gap between strikes, in seconds.
    ready, delayed, delay, sleep, gap = backend.pick(
        memory=(60, 20, 2.0, 0.3, 0.7), redis=(24, 8, 0.5, 0.15, 0.2)
    )
    async with rec.app.open_worker(
        concurrency=4, batch_size=8, janitor_interval=1.0, **backend.timing(**OPTS)
    ) as worker:
        ids = [
            r.job_id
            for r in await rec.work.enqueue_many([Work(i, sleep=sleep) for i in range(ready)])
        ]
        ids += [
            r.job_id
            for r in await rec.work.enqueue_many(
                [Work(i, sleep=sleep) for i in range(delayed)], delay=delay
            )
        ]
        for _ in range(3):
            await trio.sleep(gap)
            # Strike while jobs are in flight, wherever the actor is blocked
            # (on a loaded machine the first lease may come after the gap).
            await wait_for(lambda: worker.statistics().in_flight > 0, timeout=30)
            worker.crash_actor(actor, RuntimeError(f"chaos in {actor}"))
        with trio.fail_after(120):
            await worker.wait_idle()
        stats = worker.statistics()
    assert stats.restarts == {actor: 3}
    assert set(rec.finished) == set(ids), "every job ran to success"
    assert await rec.states() == {}, "nothing left scheduled, ready, leased or dead"
    assert rec.dead == []


async def test_restart_intensity_escalates_to_worker_failure(
    backend: Backend, clock: object
) -> None:
    rec = Recorder(backend.store())
    worker = chronos_trio.Worker(
        rec.app,
        chronos_trio.WorkerConfig.build(
            restart_intensity=2,
            restart_period=10,
            # The failing worker gives running handlers their grace first.
            **backend.timing(shutdown_grace=10.0, **OPTS),
        ),
    )
    await rec.work.enqueue_many([Work(i, sleep=100) for i in range(5)])
    expected = pytest.RaisesExc(ActorFailed, match="'leaser' crashed 3 times within 10s")
    with pytest.RaisesGroup(expected) as info, trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_for(lambda: rec.running == 5)
            for _ in range(3):
                worker.crash_actor("leaser", ValueError("boom"))
                await trio.sleep(backend.pick(memory=1.0, redis=0.1))
    assert isinstance(info.value.exceptions[0].__cause__, ValueError)
    # The dying worker still handed its leases straight back.
    assert await rec.states() == {JobState.READY: 5}


async def test_restarts_spread_over_time_do_not_escalate(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    # Crashes `gap` apart: never three within `period`.
    period, gap = backend.pick(memory=(10.0, 6.0), redis=(0.5, 0.3))
    async with rec.app.open_worker(
        restart_intensity=2, restart_period=period, **backend.timing(**OPTS)
    ) as worker:
        for _ in range(6):
            worker.crash_actor("recoverer")
            await trio.sleep(gap)
        await rec.work.enqueue(Work(1))
        with trio.fail_after(10):
            await worker.wait_idle()
    assert worker.statistics().restarts == {"recoverer": 6}
    assert len(rec.finished) == 1


async def test_crash_actor_rejects_unknown_name(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    async with rec.app.open_worker(**backend.timing(**OPTS)) as worker:
        with pytest.raises(KeyError, match="no running actor 'nope'"):
            worker.crash_actor("nope")


async def _partition_and_steal(store: FaultyStore, lease_duration: float) -> chronos_trio.Job:
    """Cut our worker off (no renew/lease/recover), let its lease expire and
    have another worker ("thief") recover and lease the job."""
    store.break_ops("renew", "lease", "recover_expired")
    await trio.sleep(lease_duration + 0.1)
    recovered = await store.inner.recover_expired(["default"], 10)
    assert len(recovered.requeued) == 1
    [stolen] = (
        await store.inner.lease([QueueWeight("default")], 1, worker_id="thief", lease_duration=600)
    ).jobs
    return stolen.job


async def test_lost_lease_cancels_handler(backend: Backend, clock: object) -> None:
    store = FaultyStore(backend.store())
    rec = Recorder(store)
    opts = backend.timing(**OPTS)
    cancelled: list[bool] = []

    @rec.app.task("long")
    async def long(args: bytes, job: chronos_trio.JobContext) -> None:
        try:
            await trio.sleep(600)
        except trio.Cancelled:
            cancelled.append(job.lease_lost)
            raise

    async with rec.app.open_worker(**opts) as worker:
        res = await long.enqueue(b"")
        await wait_for(lambda: worker.statistics().running == 1)
        stolen = await _partition_and_steal(store, opts["lease_duration"])
        store.heal()
        with trio.fail_after(10):
            await wait_for(lambda: cancelled != [])
            await wait_for(lambda: worker.statistics().in_flight == 0)
        stats = worker.statistics()
    assert cancelled == [True]
    assert stats.lost == 1 and stats.succeeded == 0
    job = await store.get_job(res.job_id)
    assert job is not None and job.state is JobState.LEASED
    assert job.lease_owner == "thief" and job.lease_token == stolen.lease_token
    assert job.last_error == ""


async def test_stale_outcome_is_rejected_and_leaves_new_holder_alone(
    backend: Backend, clock: object
) -> None:
    store = FaultyStore(backend.store())
    rec = Recorder(store, max_retries=5)
    opts = backend.timing(**OPTS)
    lease = opts["lease_duration"]
    async with rec.app.open_worker(**opts) as worker:
        # Finishes (with a failure) after its lease expired, before any
        # heartbeat could tell it so: the store must reject the outcome.
        overrun = backend.pick(memory=2.0, redis=0.5)
        res = await rec.work.enqueue(Work(1, sleep=lease + overrun, fail_times=1))
        await wait_for(lambda: worker.statistics().running == 1)
        stolen = await _partition_and_steal(store, lease)
        with trio.fail_after(10):
            await wait_for(lambda: worker.statistics().in_flight == 0)
        store.heal()
        stats = worker.statistics()
    assert stats.lost == 1 and stats.retried == 0
    job = await store.get_job(res.job_id)
    assert job is not None and job.state is JobState.LEASED
    assert job.lease_token == stolen.lease_token and job.last_error == ""


async def test_worker_rides_out_a_store_outage(backend: Backend, clock: object) -> None:
    store = FaultyStore(backend.store())
    rec = Recorder(store)
    # Handlers run `sleep`; the outage starts at `at` (the second batch of 16
    # running) and lasts `outage`.
    sleep, at, outage = backend.pick(memory=(0.5, 0.6, 3.0), redis=(0.3, 0.4, 0.8))
    async with rec.app.open_worker(**backend.timing(**OPTS)) as worker:
        ids = {
            r.job_id for r in await rec.work.enqueue_many([Work(i, sleep=sleep) for i in range(30)])
        }
        await trio.sleep(at)
        store.break_ops()  # everything fails, e.g. Redis restarting
        await trio.sleep(outage)
        store.heal()
        with trio.fail_after(120):
            await worker.wait_idle()
        stats = worker.statistics()
    assert stats.restarts == {}, "an outage is backed off, not crashed on"
    assert set(rec.finished) == ids
    assert store.failures["settle"] > 0 and store.failures["lease"] > 0
    assert await rec.states() == {}


async def test_enqueue_surfaces_store_errors(backend: Backend, clock: object) -> None:
    store = FaultyStore(backend.store())
    rec = Recorder(store)
    store.fail("enqueue_many")
    with pytest.raises(chronos_trio.StoreError, match="injected fault"):
        await rec.work.enqueue(Work(1))
    assert (await rec.work.enqueue(Work(1))).created


async def _die_hard(
    store: FaultyStore, rec: Recorder, opts: dict[str, float], jobs: int = 0, sleep: float = 20
) -> set[str]:
    """Run a worker until it runs ``jobs`` new jobs of ``sleep`` seconds (or
    any ready job), then kill it with the store unreachable, so nothing is
    released: like a SIGKILL or a power cut. Returns the IDs of the new jobs."""
    async with rec.app.open_worker(
        concurrency=max(1, jobs), shutdown_grace=0, flush_timeout=0.5, **opts
    ):
        ids = {
            r.job_id
            for r in await rec.work.enqueue_many([Work(i, sleep=sleep) for i in range(jobs)])
        }
        await wait_for(lambda: rec.running == max(1, jobs))
        store.break_ops()
    store.heal()
    return ids


async def test_crashed_workers_jobs_recovered_after_lease_expiry(
    backend: Backend, clock: object
) -> None:
    store = FaultyStore(backend.store())
    opts = backend.timing(**OPTS)
    dead_worker = Recorder(store)
    ids = await _die_hard(store, dead_worker, opts, 4, sleep=backend.pick(memory=20, redis=0.5))
    assert await dead_worker.states() == {JobState.LEASED: 4}
    died_at = trio.current_time()
    survivor = Recorder(store)
    async with survivor.app.open_worker(**opts) as worker:
        await wait_for(lambda: len(survivor.runs) == 4)
        recovered_after = trio.current_time() - died_at
        with trio.fail_after(120):
            await worker.wait_idle()
    # At the latest one recovery pass after the lease ran out.
    limit = opts["lease_duration"] + opts["recover_interval"] + backend.late(0.1)
    assert recovered_after <= limit
    assert set(survivor.finished) == ids
    assert {attempt for _, attempt, _ in survivor.runs} == {2}


async def test_job_that_keeps_killing_its_worker_goes_dead(backend: Backend, clock: object) -> None:
    store = FaultyStore(backend.store())
    opts = backend.timing(**OPTS)
    [job_id] = await _die_hard(store, Recorder(store, max_retries=1), opts, 1)  # attempt 1
    await trio.sleep(opts["lease_duration"] + 0.1)
    assert (await store.recover_expired(["default"], 10)).requeued == (job_id,)
    await _die_hard(store, Recorder(store, max_retries=1), opts)  # attempt 2 kills it too
    observer = Recorder(store)
    async with observer.app.open_worker(**opts):
        with trio.fail_after(60):
            await wait_for(lambda: len(observer.dead) == 1)
    [dead] = observer.dead
    assert dead.id == job_id and dead.attempts == 2
    assert "lease expired on attempt 2 of 2" in dead.last_error
    assert observer.runs == [], "a poison job is not run a third time"
