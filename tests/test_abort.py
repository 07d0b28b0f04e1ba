"""Abort in a running worker: on the MemoryStore under Trio's virtual clock
(exact times) and on a real Redis (see tests/_backends.py). A running
handler is cancelled within one heartbeat interval of the abort, sees
``job.abort_requested`` in its cleanup, and its job ends ``aborted``, never
run again; a waiting job never runs. The store's side is in the conformance
suite; a worker in another process in tests/test_process_e2e.py; the flag
across a Redis restart in tests/test_redis_faults.py."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import attrs
import pytest
import redis
import trio

from chronos_trio import (
    AbortResult,
    App,
    JobAborted,
    JobContext,
    JobState,
    MemoryStore,
    NewJob,
)
from chronos_trio.runtime import JobAbortApplied, Stage
from chronos_trio.store.redis.keys import KeySpace
from tests._backends import Backend
from tests._support import wait_for

HEARTBEAT = {"memory": 1.0, "redis": 0.3, "postgres": 0.3, "sqlite": 0.3}


@attrs.frozen
class Nap:
    seconds: float


class Watched:
    """An app whose ``nap`` handler records each run and what its cleanup saw."""

    def __init__(self, backend: Backend) -> None:
        self.store = backend.store()
        self.app = App(self.store)
        self.runs: list[str] = []
        self.running: set[str] = set()
        #: job id -> (trio time the run was called off, abort_requested then)
        self.called_off: dict[str, tuple[float, bool]] = {}
        self.dead: list[str] = []

        @self.app.task("nap")
        async def nap(args: Nap, job: JobContext) -> None:
            self.runs.append(job.id)
            self.running.add(job.id)
            try:
                await trio.sleep(args.seconds)
            except trio.Cancelled:
                self.called_off[job.id] = (trio.current_time(), job.abort_requested)
                raise
            finally:
                self.running.discard(job.id)

        @self.app.on_dead_letter
        async def on_dead(job: object) -> None:
            self.dead.append(str(job))

        self.nap = nap


def worker_options(backend: Backend) -> dict[str, float]:
    heartbeat = HEARTBEAT[backend.name]
    return {
        "heartbeat_interval": heartbeat,
        "lease_duration": heartbeat * 4,
        "poll_interval": backend.pick(memory=5.0, redis=0.2),
        "recover_interval": backend.pick(memory=1.0, redis=0.2),
        "shutdown_grace": 1.0,
    }


async def test_abort_cancels_a_running_handler_within_one_heartbeat(
    backend: Backend, clock: object
) -> None:
    w = Watched(backend)
    heartbeat = HEARTBEAT[backend.name]
    aborted: list[JobAbortApplied] = []
    started_at = trio.current_time()  # the heartbeater ticks from here
    async with w.app.open_worker(concurrency=2, **worker_options(backend)) as worker:
        worker.runtime.events.subscribe(JobAbortApplied, aborted.append)
        handle = await w.nap.enqueue(Nap(10_000))
        other = await w.nap.enqueue(Nap(backend.pick(memory=3 * heartbeat, redis=1.0)))
        await wait_for(lambda: w.running == {handle.job_id, other.job_id})
        # off the heartbeat's tick, so the wait for the next one is visible
        await trio.sleep(heartbeat / 3)
        asked_at = trio.current_time()
        assert await handle.abort(reason="enough") is AbortResult.FLAGGED
        with trio.fail_after(backend.pick(memory=60, redis=10)):
            with pytest.raises(JobAborted) as caught:
                await handle.result()
        cancelled_at, saw_abort = w.called_off[handle.job_id]
        assert saw_abort, "abort_requested is True before the cancel lands"
        assert 0 < cancelled_at - asked_at <= heartbeat + backend.late(0.0)
        if backend.virtual:
            # at the first renewal after the abort: exact on the virtual clock
            ticks = math.ceil((asked_at - started_at) / heartbeat)
            assert cancelled_at == pytest.approx(started_at + ticks * heartbeat, abs=1e-6)
        assert caught.value.last_error == "aborted: enough"
        job = await w.store.get_job(handle.job_id)
        assert job is not None and job.state is JobState.ABORTED and job.attempts == 1
        assert job.last_error == "aborted: enough" and not job.lease_token
        # the other handler ran on, untouched; the aborted job never runs again
        await other.result(timeout=backend.pick(memory=60, redis=10))
        await trio.sleep(backend.pick(memory=20 * heartbeat, redis=1.5))
        assert w.runs.count(handle.job_id) == 1 and other.job_id not in w.called_off
        stats = worker.statistics()
        assert stats.aborted == 1 and stats.dead == 0 and stats.lost == 0
        assert await handle.abort() is AbortResult.FINISHED
    assert w.dead == [], "dead-letter hooks do not run for an aborted job"
    assert [(e.job.id, e.recovered) for e in aborted] == [(handle.job_id, False)]
    [stats] = await w.store.stats(["default"])
    assert stats.counts[JobState.ABORTED] == 1 and stats.counts[JobState.DEAD] == 0


async def test_a_waiting_job_aborted_never_runs(backend: Backend, clock: object) -> None:
    w = Watched(backend)
    async with w.app.open_worker(**worker_options(backend)) as worker:
        later = await w.nap.enqueue(Nap(0), delay=backend.pick(memory=5.0, redis=0.5))
        assert await later.abort() is AbortResult.ABORTED
        with trio.fail_after(5), pytest.raises(JobAborted):
            await later.result()
        await trio.sleep(backend.pick(memory=10.0, redis=1.0))
        assert w.runs == [] and worker.statistics().aborted == 0
    job = await w.store.get_job(later.job_id)
    assert job is not None and job.state is JobState.ABORTED and job.last_error == "aborted"


async def test_a_leased_job_aborted_before_it_started_never_runs(
    backend: Backend, clock: object
) -> None:
    w = Watched(backend)
    heartbeat = HEARTBEAT[backend.name]
    async with w.app.open_worker(concurrency=1, **worker_options(backend)) as worker:
        first = await w.nap.enqueue(Nap(10_000))
        second = await w.nap.enqueue(Nap(0))
        # leased, waiting for the only executor, which runs the first
        table = worker.runtime.table
        await wait_for(lambda: w.running == {first.job_id} and bool(table.in_stage(Stage.QUEUED)))
        [queued] = table.in_stage(Stage.QUEUED)
        assert queued.leased.job.id == second.job_id
        assert await second.abort() is AbortResult.FLAGGED
        with trio.fail_after(backend.pick(memory=60, redis=10)), pytest.raises(JobAborted):
            await second.result()
        assert await first.abort() is AbortResult.FLAGGED
        with trio.fail_after(backend.pick(memory=60, redis=10)), pytest.raises(JobAborted):
            await first.result()
        await trio.sleep(2 * heartbeat)
        assert w.runs == [first.job_id], "the queued job was never started"
        assert worker.statistics().aborted == 2


async def test_a_plain_handler_in_a_thread_is_abandoned_when_aborted() -> None:
    """A thread cannot be interrupted: as at a timeout, the outcome (aborted)
    is decided at once and the thread is abandoned; it sees the abort through
    ``job.abort_requested`` and ``job.cancelled`` (real clock: a thread)."""
    store = MemoryStore()
    app = App(store)
    seen: list[tuple[bool, bool]] = []
    done = threading.Event()

    @app.task("spin")
    def spin(args: int, job: JobContext) -> None:
        try:
            while not job.cancelled:
                time.sleep(0.005)
            seen.append((job.abort_requested, job.cancelled))
        finally:
            done.set()

    with trio.fail_after(10):
        async with app.open_worker(heartbeat_interval=0.1, lease_duration=1.0) as worker:
            handle = await spin.enqueue(1)
            while not worker.runtime.table.in_stage(Stage.RUNNING):
                await trio.sleep(0.01)
            assert await handle.abort() is AbortResult.FLAGGED
            with pytest.raises(JobAborted):
                await handle.result()
            await trio.to_thread.run_sync(done.wait)
    assert seen == [(True, True)]
    job = await store.get_job(handle.job_id)
    assert job is not None and job.state is JobState.ABORTED


@pytest.mark.redis
async def test_redis_aborted_marks_leave_with_their_jobs(redis_store: Any, redis_url: str) -> None:
    """On Redis an aborted job is kept in the dead index and marked in
    ``<tag>:aborted`` (what counts and lists them); the marks of trimmed
    jobs go with the trim, so counting never walks the marks of jobs long
    gone, and a deleted job's stale mark is not counted."""
    store = await redis_store(namespace="abort-marks")
    client = redis.Redis.from_url(redis_url)
    pk = KeySpace("abort-marks").partition("q", 1, 0)
    await store.enqueue_many([NewJob(f"a{i}", "q", "k", b"{}", delay=60) for i in range(3)])
    for i in range(3):
        assert await store.abort(f"a{i}") is AbortResult.ABORTED
    assert client.zcard(pk.aborted) == 3 and client.zcard(pk.dead) == 3
    assert await store.delete_job("a1")
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.ABORTED] == 2 and stats.counts[JobState.DEAD] == 0
    assert [j.id for j in await store.list_jobs("q", JobState.ABORTED)] == ["a0", "a2"]
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=0)).count == 2
    assert not client.exists(pk.aborted), "the marks of trimmed jobs are dropped"
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.ABORTED] == 0 and stats.total == 0
    client.close()
