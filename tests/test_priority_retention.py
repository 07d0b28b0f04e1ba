"""Strict queue priority, per-task retention of successes, the janitor's cap
on retained successes per queue, and per-task discard of dead jobs: end to
end in a worker (memory under Trio's virtual clock; strict priority and
discard on Redis too)."""

from __future__ import annotations

import pytest
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobFailed, JobState, MemoryStore, SkipRetry
from tests._backends import Backend
from tests._support import wait_for

FAST = {"poll_interval": 0.5, "lease_duration": 5.0}


async def test_strict_priority_runs_every_higher_job_first(backend: Backend, clock: object) -> None:
    app = App(backend.store())
    order: list[str] = []

    @app.task("q")
    async def q(args: str, job: JobContext) -> None:
        order.append(job.queue)
        await trio.sleep(0.01)

    await q.enqueue_many(["x"] * 30, queue="low")
    await q.enqueue_many(["x"] * 5, queue="mid")
    await q.enqueue_many(["x"] * 25, queue="high")
    # weights favour low by far: strict priority ignores them (list order counts)
    async with app.open_worker(
        queues="high=1,mid=1,low=1000",
        strict_priority=True,
        concurrency=2,
        batch_size=4,
        **backend.timing(**FAST),
    ) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    assert order == ["high"] * 25 + ["mid"] * 5 + ["low"] * 30


async def test_weighted_mode_still_serves_the_light_queue(backend: Backend, clock: object) -> None:
    app = App(backend.store())
    order: list[str] = []

    @app.task("q")
    async def q(args: str, job: JobContext) -> None:
        order.append(job.queue)

    await q.enqueue_many(["x"] * 30, queue="high")
    await q.enqueue_many(["x"] * 30, queue="low")
    async with app.open_worker(
        queues="high=1000,low=1", concurrency=1, batch_size=10, **backend.timing(**FAST)
    ) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    assert "low" in order[:10], "no starvation: a batch of 10 takes one low job"


async def test_task_retention_overrides_the_workers(autojump_clock: object) -> None:
    store = MemoryStore()
    app = App(store)

    @app.task("kept", retain_succeeded=100)
    async def kept(args: int, job: JobContext) -> None:
        pass

    @app.task("dropped", retain_succeeded=0)
    async def dropped(args: int, job: JobContext) -> None:
        pass

    @app.task("default")
    async def default(args: int, job: JobContext) -> None:
        pass

    async with app.open_worker(retain_succeeded=30, janitor_interval=5, **FAST) as worker:
        start = trio.current_time()
        k, d, w = await kept.enqueue(1), await dropped.enqueue(2), await default.enqueue(3)
        with trio.fail_after(10):
            await worker.wait_idle()
        assert await state(store, d.job_id) is None, "retain_succeeded=0: dropped at once"
        assert await state(store, k.job_id) is JobState.SUCCEEDED
        assert await state(store, w.job_id) is JobState.SUCCEEDED
        await trio.sleep(start + 40 - trio.current_time())
        assert await state(store, w.job_id) is None, "the worker's 30 s have passed"
        assert await state(store, k.job_id) is JobState.SUCCEEDED
        await trio.sleep(start + 95 - trio.current_time())
        assert await state(store, k.job_id) is JobState.SUCCEEDED
        await trio.sleep(start + 110 - trio.current_time())
        assert await state(store, k.job_id) is None, "its own 100 s have passed"


async def test_bad_task_retention_is_refused() -> None:
    app = App(MemoryStore())
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="retain_succeeded"):
            app.task(f"t{bad}", retain_succeeded=bad)
    with pytest.raises(TypeError, match="discard_dead"):
        app.task("t", discard_dead="yes")  # type: ignore[arg-type]


async def state(store: chronos_trio.Store, job_id: str) -> JobState | None:
    job = await store.get_job(job_id)
    return None if job is None else job.state


async def test_janitor_caps_retained_successes_per_queue(autojump_clock: object) -> None:
    store = MemoryStore()
    app = App(store)
    done: list[str] = []

    @app.task("t")
    async def t(args: int, job: JobContext) -> None:
        done.append(job.id)

    every = 10.0
    async with app.open_worker(
        queues="capped,other,free",
        retain_succeeded=3600,
        max_retained_succeeded={"capped": 3, "other": 1},
        janitor_interval=every,
        concurrency=1,
        **FAST,
    ) as worker:
        for queue in ("capped", "other", "free"):
            for i in range(6):
                await t.enqueue(i, queue=queue)
                await trio.sleep(0.1)  # one finish order
        with trio.fail_after(10):
            await worker.wait_idle()
        assert len(await store.list_jobs("capped", JobState.SUCCEEDED)) == 6
        await trio.sleep(every + 0.5)  # one janitor round
        capped = [j.id for j in await store.list_jobs("capped", JobState.SUCCEEDED)]
        other = [j.id for j in await store.list_jobs("other", JobState.SUCCEEDED)]
        free = await store.list_jobs("free", JobState.SUCCEEDED)
        stats = worker.statistics()
    assert capped == done[3:6], "the latest three of the queue stay"
    assert other == done[11:12]
    assert len(free) == 6, "a queue the mapping does not name is not capped"
    assert stats.trimmed == 3 + 5


async def test_one_cap_for_every_queue(autojump_clock: object) -> None:
    store = MemoryStore()
    app = App(store)

    @app.task("t")
    async def t(args: int, job: JobContext) -> None:
        pass

    async with app.open_worker(
        queues="a,b", retain_succeeded=3600, max_retained_succeeded=2, janitor_interval=5, **FAST
    ) as worker:
        for queue in ("a", "b"):
            await t.enqueue_many(list(range(5)), queue=queue)
        with trio.fail_after(10):
            await worker.wait_idle()
        await trio.sleep(6)
        for queue in ("a", "b"):
            assert len(await store.list_jobs(queue, JobState.SUCCEEDED)) == 2


def test_bad_retained_caps_are_refused() -> None:
    for bad in (-1, 1.5, True, {"q": -2}, {"q": "3"}):
        with pytest.raises(ValueError, match="max_retained_succeeded"):
            chronos_trio.WorkerConfig(max_retained_succeeded=bad)  # type: ignore[arg-type]


async def test_discard_dead_fires_the_hook_and_keeps_no_dead_job(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app = App(store)
    hooked: list[chronos_trio.Job] = []

    @app.task("drop", discard_dead=True, max_retries=1, retry=chronos_trio.RetryPolicy(base=0.1))
    async def drop(args: str, job: JobContext) -> None:
        if args == "skip":
            raise SkipRetry("not worth it")
        raise ValueError("always")

    @app.task("keep", max_retries=0)
    async def keep(args: str, job: JobContext) -> None:
        raise ValueError("kept dead")

    @app.on_dead_letter
    async def on_dead(job: chronos_trio.Job) -> None:
        hooked.append(job)

    skipped = await drop.enqueue("skip")
    exhausted = await drop.enqueue("retry")
    kept = await keep.enqueue("x")
    failed: list[JobFailed] = []

    async def wait_failed() -> None:
        try:
            await skipped.result()
        except JobFailed as exc:
            failed.append(exc)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            # waiting before it runs: its waiter still sees the failure
            nursery.start_soon(wait_failed)
            await trio.sleep(0.1)
            async with app.open_worker(**backend.timing(**FAST)) as worker:
                await worker.wait_idle()
                await wait_for(lambda: len(hooked) == 3)
                stats = worker.statistics()
    assert len(failed) == 1 and "not worth it" in failed[0].last_error
    by_id = {job.id: job for job in hooked}
    assert by_id[skipped.job_id].state is JobState.DEAD
    assert "SkipRetry: not worth it" in by_id[skipped.job_id].last_error
    assert by_id[exhausted.job_id].attempts == 2
    assert "retries exhausted" in by_id[exhausted.job_id].last_error
    dead = [j.id for j in await store.list_jobs("default", JobState.DEAD)]
    assert dead == [kept.job_id], "only the job of the task that keeps its dead"
    assert await store.get_job(exhausted.job_id) is None
    assert stats.dead == 3 and stats.discarded == 2
