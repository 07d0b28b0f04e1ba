"""An aborted or discarded workflow step ends failed in its flow (issue 29):
a step aborted while it waits (``abort``: in the aborting step) or while it
runs (its worker's fenced settle, or recovery), or discarded (a
``discard_dead`` task's job failing for good), whose flow handles failures
(a batch, a group with ``allow_failures``, an ``on_failure`` around it),
goes to the outbox as failed, so its batch completes, its callback runs
once, and its ``on_failure`` is called once. A whole-workflow abort keeps
its semantics: the flow is cancelled and calls no callback."""

from __future__ import annotations

import collections
from typing import Any

import trio

from chronos_trio import (
    AbortResult,
    App,
    BatchSummary,
    JobContext,
    SkipRetry,
    StepFailure,
    chain,
)
from chronos_trio.records._flow_control import WorkflowState
from chronos_trio.records._flow_outcomes import DISCARDED_PREFIX
from tests._backends import Backend

#: A member that waits this long is still scheduled when the test aborts it.
LATER = 3600.0


class Flows:
    def __init__(self, store: Any) -> None:
        self.app = app = App(store)
        self.runs: collections.Counter[str] = collections.Counter()
        self.summaries: list[tuple[str, BatchSummary]] = []
        self.failures: list[tuple[str, StepFailure]] = []
        self.started = trio.Event()

        @app.task("work", max_retries=0)
        async def work(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            return n * 2

        @app.task("hang", max_retries=0)
        async def hang(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            self.started.set()
            await trio.sleep_forever()
            return n

        @app.task("toss", max_retries=0, discard_dead=True)
        async def toss(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            raise SkipRetry(f"{n} is not wanted")

        @app.task("summary")
        async def summary(s: BatchSummary, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.summaries.append((job.id, s))

        @app.task("alert")
        async def alert(f: StepFailure, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.failures.append((job.id, f))

        self.work, self.hang, self.toss = work, hang, toss
        self.summary, self.alert = summary, alert

    async def until(self, found: Any) -> None:
        while not found():
            await trio.sleep(0.05)


async def test_aborted_and_discarded_members_count_failed_and_the_batch_completes_once(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    steps = [f.work.s(1), f.work.s(2, delay=LATER), f.hang.s(3), f.toss.s(4)]
    timing = backend.timing(poll_interval=0.5, recover_interval=1.0, heartbeat_interval=0.5)
    async with f.app.open_worker(**timing):
        batch = await f.app.enqueue_batch(steps, batch_id="ab", on_complete=f.summary.s())
        with trio.fail_after(backend.pick(memory=120, redis=40)):
            await f.started.wait()
            while (await batch.status()).pending > 2:
                await trio.sleep(0.05)
            # waiting (scheduled): aborted at once; running: flagged, then
            # its worker's settle makes it aborted
            assert await f.app.job("ab.0.1").abort("not needed") is AbortResult.ABORTED
            assert await f.app.job("ab.0.2").abort("stop") is AbortResult.FLAGGED
            done = await batch.wait(timeout=30)
            await f.until(lambda: f.summaries)
            await trio.sleep(1.0)  # a second callback would run by now
    assert (done.succeeded, done.failed, done.pending, done.complete) == (1, 3, 0, True)
    assert done.failed_job_ids == ("ab.0.1", "ab.0.2", "ab.0.3")
    [(callback, summary)] = f.summaries
    assert callback == "ab.1"
    assert summary == BatchSummary("ab", 4, 1, 3, ["ab.0.1", "ab.0.2", "ab.0.3"])
    outcomes = await batch.result(timeout=5)
    assert [o.ok for o in outcomes] == [True, False, False, False]
    assert outcomes[0].result == 2
    assert outcomes[1].error == "aborted: not needed"
    assert outcomes[2].error == "aborted: stop"
    assert not outcomes[3].ok  # discarded: its record is gone
    assert f.runs["ab.1"] == 1 and "ab.0.1" not in f.runs


async def test_an_aborted_step_calls_its_on_failure_once(backend: Backend, clock: object) -> None:
    f = Flows(backend.store())
    flow = chain(f.work.s(1), f.work.s(delay=LATER), f.work.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
        await f.app.enqueue_workflow(flow, workflow_id="ao", on_failure=f.alert.s())
        with trio.fail_after(backend.pick(memory=120, redis=40)):
            while await f.app.store.get_job("ao.1") is None:
                await trio.sleep(0.05)
            assert await f.app.job("ao.1").abort("late") is AbortResult.ABORTED
            await f.until(lambda: f.failures)
            await trio.sleep(1.0)  # a second callback would run by now
    [(callback, failure)] = f.failures
    assert callback == "ao.on_failure"
    assert failure == StepFailure("ao", "ao.1", "work", "aborted: late", 0)
    assert await f.app.store.get_job("ao.2") is None  # nothing after it is made
    assert f.runs["ao.on_failure"] == 1
    assert (await f.app.workflow("ao").status()).state is WorkflowState.FAILED


async def test_a_discarded_step_calls_its_on_failure_once(backend: Backend, clock: object) -> None:
    f = Flows(backend.store())
    flow = chain(f.work.s(1), f.toss.s(), f.work.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
        await f.app.enqueue_workflow(flow, workflow_id="ad", on_failure=f.alert.s())
        with trio.fail_after(backend.pick(memory=120, redis=40)):
            await f.until(lambda: f.failures)
            await trio.sleep(1.0)
    [(callback, failure)] = f.failures
    assert callback == "ad.on_failure"
    assert (failure.job_id, failure.kind) == ("ad.1", "toss")
    assert failure.error.startswith(DISCARDED_PREFIX + "SkipRetry: 2 is not wanted"), failure
    assert await f.app.store.get_job("ad.1") is None  # discarded: not kept
    assert await f.app.store.get_job("ad.2") is None


async def test_a_cancelled_batch_still_calls_no_callback(backend: Backend, clock: object) -> None:
    """A whole-workflow abort is a cancel, as before: its aborted members
    record no arrival, and its callback is never made."""
    f = Flows(backend.store())
    steps = [f.work.s(1), f.work.s(2, delay=LATER), f.hang.s(3)]
    timing = backend.timing(poll_interval=0.5, recover_interval=1.0, heartbeat_interval=0.5)
    async with f.app.open_worker(**timing):
        batch = await f.app.enqueue_batch(steps, batch_id="ac", on_complete=f.summary.s())
        with trio.fail_after(backend.pick(memory=120, redis=40)):
            await f.started.wait()
            while (await batch.status()).succeeded < 1:
                await trio.sleep(0.05)
            aborted = await f.app.workflow("ac").abort(reason="no")
            assert set(aborted.dropped) | set(aborted.aborted_running) >= {"ac.0.1", "ac.0.2"}
            while (job := await f.app.store.get_job("ac.0.2")) is None or job.state.value != (
                "aborted"
            ):
                await trio.sleep(0.05)
            await trio.sleep(2.0)  # its entry would be continued by now
    status = await batch.status()
    assert (status.succeeded, status.failed, status.pending) == (1, 0, 2), status
    assert f.summaries == [] and await f.app.store.get_job("ac.1") is None
