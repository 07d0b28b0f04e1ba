"""Two runs of one unique key never overlap (issue 23, item 8), through a
real worker with several executors, on memory (virtual clock) and Redis:
a debounce enqueued while its job runs, a lock whose ttl lapsed while its
job waited, and a job that fails while its successor waits (the retry runs
after the successor). The store rule is in the conformance suite
(``chronos_trio/testing/_conformance_unique.py``)."""

from __future__ import annotations

import itertools

import attrs
import trio

from chronos_trio import App, JobContext, Retry, Unique
from tests._backends import Backend

#: How long each run takes (s): long against a lease, a poll and a heartbeat.
RUN = 1.0


@attrs.frozen
class Step:
    n: int
    fail_first: bool = False


@attrs.define
class Runs:
    """Each run's payload number, attempt, start and end (Trio's clock)."""

    runs: list[tuple[int, int, float, float]] = attrs.Factory(list)
    started: trio.Event = attrs.Factory(trio.Event)

    async def wait_for(self, count: int) -> None:
        while len(self.runs) < count:
            await trio.sleep(0.05)

    def assert_apart(self) -> None:
        spans = sorted((start, end, n) for n, _, start, end in self.runs)
        for (_, end, n), (start, _, m) in itertools.pairwise(spans):
            assert start >= end, f"run of {m} started at {start:.3f}, before {n} ended at {end:.3f}"


def step_app(store: object, unique: Unique) -> tuple[App, Runs]:
    app = App(store)  # type: ignore[arg-type]
    runs = Runs()

    @app.task("step", unique=unique, max_retries=3)
    async def step(payload: Step, job: JobContext) -> None:
        start = trio.current_time()
        runs.started.set()
        await trio.sleep(RUN)
        runs.runs.append((payload.n, job.attempt, start, trio.current_time()))
        if payload.fail_first and job.attempt == 1:
            raise Retry(delay=0.2)

    return app, runs


async def test_debounced_runs_of_one_key_never_overlap(backend: Backend, clock: object) -> None:
    app, runs = step_app(backend.store(), Unique(key="digest", mode="debounce"))
    step = app.tasks["step"]
    async with app.open_worker(concurrency=4, **backend.timing(poll_interval=0.5)) as worker:
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            first = await step.enqueue(Step(0))
            await runs.started.wait()
            second = await step.enqueue(Step(1))  # it runs: stored, waits for it
            await trio.sleep(0.2)
            third = await step.enqueue(Step(2))  # replaces the waiting one's payload
            assert first.created and second.created and second.job_id != first.job_id
            assert not third.created and third.job_id == second.job_id
            await runs.wait_for(2)
            await worker.wait_idle()
    runs.assert_apart()
    assert [n for n, _, _, _ in runs.runs] == [0, 2], "the newest payload runs after"


async def test_a_lock_whose_ttl_lapsed_does_not_run_beside_its_successor(
    backend: Backend, clock: object
) -> None:
    app, runs = step_app(backend.store(), Unique(key="nightly", ttl=0.3))
    step = app.tasks["step"]
    async with app.open_worker(concurrency=4, **backend.timing(poll_interval=0.5)) as worker:
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            waits = await step.enqueue(Step(0), delay=1.0)
            await trio.sleep(0.5)  # its lock lapsed while it waits
            second = await step.enqueue(Step(1))
            assert second.created and second.job_id != waits.job_id
            await runs.wait_for(2)
            await worker.wait_idle()
    runs.assert_apart()
    # the second started first; the first, due meanwhile, waited for it
    assert [n for n, _, _, _ in runs.runs] == [1, 0]


async def test_a_retried_job_runs_after_its_debounced_successor(
    backend: Backend, clock: object
) -> None:
    app, runs = step_app(backend.store(), Unique(key="sync", mode="debounce"))
    step = app.tasks["step"]
    async with app.open_worker(concurrency=4, **backend.timing(poll_interval=0.5)) as worker:
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            first = await step.enqueue(Step(0, fail_first=True))
            await runs.started.wait()
            second = await step.enqueue(Step(1))
            assert first.created and second.created
            await runs.wait_for(3)
            await worker.wait_idle()
    runs.assert_apart()
    # the first failed while the second waited: the second ran, then the retry
    assert [(n, attempt) for n, attempt, _, _ in runs.runs] == [(0, 1), (1, 1), (0, 2)]
