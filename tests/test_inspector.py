"""The Inspector API on the in-memory store (the CLI tests cover Redis)."""

from __future__ import annotations

import pytest
import trio

from chronos_trio import (
    ActionRefused,
    Inspector,
    JobState,
    MemoryStore,
    TopologyError,
    UnknownJob,
    UnknownQueue,
)
from chronos_trio.app._inspector import payload_view
from chronos_trio.store import VersionState
from tests._support import Recorder, Work

POLL = 0.5


async def test_paused_queue_stops_leasing_within_one_poll(autojump_clock: object) -> None:
    rec = Recorder(MemoryStore())
    inspector = rec.app.inspector()
    async with rec.app.open_worker(concurrency=4, poll_interval=POLL):
        await rec.work.enqueue(Work(0))
        while not rec.finished:
            await trio.sleep(0.01)
        await inspector.pause("default")
        paused_at = trio.current_time()
        await rec.work.enqueue_many([Work(i) for i in range(1, 6)])
        await trio.sleep(10 * POLL)
        assert len(rec.finished) == 1, "nothing leased from a paused queue"
        info = await inspector.queue("default")
        assert info.paused and info.counts[JobState.READY] == 5
        await inspector.resume("default")
        resumed_at = trio.current_time()
        while len(rec.finished) < 6:
            await trio.sleep(0.01)
        assert trio.current_time() - resumed_at <= POLL
    assert paused_at < resumed_at


async def test_leased_jobs_of_a_paused_queue_finish(autojump_clock: object) -> None:
    rec = Recorder(MemoryStore())
    async with rec.app.open_worker(concurrency=2, poll_interval=POLL) as worker:
        await rec.work.enqueue_many([Work(i, sleep=1.0) for i in range(2)])
        while rec.running < 2:
            await trio.sleep(0.01)
        await rec.app.inspector().pause("default")
        await worker.wait_idle()
    assert len(rec.finished) == 2


async def test_queues_include_the_apps_task_queues() -> None:
    rec = Recorder(MemoryStore())

    @rec.app.task("other", queue="later")
    async def other(payload: int, job: object) -> None: ...

    inspector = rec.app.inspector()
    assert await inspector.queue_names() == ["default", "later"]
    await inspector.pause("later")  # known from the app before its first job
    [info] = await inspector.queues(["later"])
    assert info.paused and info.total == 0
    bare = Inspector(rec.store)
    assert await bare.queue_names() == ["later"], "the store learned it when paused"
    with pytest.raises(UnknownQueue, match=r"unknown queue 'nope' \(known queues: later\)"):
        await bare.jobs("nope", "ready")
    with pytest.raises(UnknownQueue, match="none yet"):
        await Inspector(MemoryStore()).jobs("x", "ready")


async def test_a_queue_that_never_held_a_job_can_be_paused_first(
    autojump_clock: object,
) -> None:
    """Pausing before the first job (to ready a queue, or hold it while a
    deploy finishes): registered, its first jobs wait until it is resumed
    (issue 23, item 11: on main the inspector refused it as unknown)."""
    rec = Recorder(MemoryStore())
    bare = Inspector(rec.store)  # no app: not even a task names the queue
    assert await bare.pause("bulk") is False, "a new queue"
    assert await bare.pause("bulk") is True, "known once paused"
    [info] = await bare.queues(["bulk"])
    assert info.paused and info.total == 0
    async with rec.app.open_worker(queues="bulk", poll_interval=POLL):
        await rec.work.enqueue(Work(1), queue="bulk", job_id="first")
        await trio.sleep(10 * POLL)
        assert not rec.finished, "nothing leased from the paused queue"
        assert await bare.resume("bulk") is True
        with trio.fail_after(5):
            while not rec.finished:
                await trio.sleep(0.01)
    assert list(rec.finished) == ["first"]
    with pytest.raises(ValueError, match="queue must be a non-empty string, got ''"):
        await bare.pause("")


async def test_job_actions_check_state() -> None:
    rec = Recorder(MemoryStore())
    inspector = rec.app.inspector()
    ready = await rec.work.enqueue(Work(1), job_id="r")
    later = await rec.work.enqueue(Work(2), job_id="s", delay=60)
    job = await inspector.job(ready.job_id)
    assert job.state is JobState.READY and payload_view(job) == {
        "n": 1,
        "sleep": 0.0,
        "fail_times": 0,
    }
    with pytest.raises(ActionRefused, match="run-now applies to scheduled"):
        await inspector.run_now("r")
    assert (await inspector.run_now(later.job_id)).state is JobState.READY
    with pytest.raises(UnknownJob, match="no job with id 'x'"):
        await inspector.delete("x")
    with pytest.raises(UnknownJob, match="in queue 'default'"):
        await inspector.job("x", queue="default")
    with pytest.raises(ActionRefused, match="is ready, not dead"):
        await inspector.requeue_dead("default", job_id="r")
    assert (await inspector.delete("r")).id == "r"
    with pytest.raises(ValueError, match="unknown job state 'nope'"):
        await inspector.jobs("default", "nope")
    with pytest.raises(ValueError, match="limit >= 1"):
        await inspector.jobs("default", "ready", limit=0)
    with pytest.raises(ValueError, match="limit must be >= 1"):
        await inspector.requeue_dead("default", limit=0)


async def test_topology_defaults() -> None:
    rec = Recorder(MemoryStore())
    inspector = rec.app.inspector()
    await rec.work.enqueue(Work(1))
    with pytest.raises(ActionRefused, match="no draining version"):
        await inspector.complete("default")
    topology = await inspector.promote("default", partitions=3)
    assert [(v.version, v.state) for v in topology.versions] == [
        (1, VersionState.DRAINING),
        (2, VersionState.ACTIVE),
    ]
    await inspector.promote("default", partitions=2)
    with pytest.raises(ActionRefused, match=r"2 draining versions \[1, 2\]: name the one"):
        await inspector.complete("default")
    with pytest.raises(TopologyError):
        await inspector.complete("default", version=1)  # still holds the job
    topology = await inspector.complete("default", version=2)
    assert [v.version for v in topology.versions] == [1, 3]
    [info] = await inspector.queues()
    assert [(v.version, v.partitions, v.jobs) for v in info.versions] == [(1, 1, 1), (3, 2, 0)]
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        await inspector.promote("default", partitions=0)


def test_app_inspector_is_an_inspector_with_the_app() -> None:
    import chronos_trio

    app = chronos_trio.App(MemoryStore())
    inspector = app.inspector()
    assert isinstance(inspector, Inspector) and inspector.app is app
    assert issubclass(chronos_trio.UnknownJob, chronos_trio.InspectorError)
