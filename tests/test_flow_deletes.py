"""Deleting a workflow job keeps its place in the flow (issue 29 review):
a job deleted before it ended (scheduled, ready, retry_wait) whose flow
handles failures (a batch, a group with ``allow_failures``, an
``on_failure`` around it) ends failed, ``DELETED_ERROR``, in the deleting
step, so its batch completes and its callback runs once, and its
``on_failure`` is called once; an end of a deleted job still in the outbox
(dead, or succeeded, not continued yet) is continued all the same. On
every backend, by ``delete_job``, the inspector's delete and
``purge_queue``."""

from __future__ import annotations

import collections
import json
from typing import Any

import trio

from chronos_trio import (
    App,
    BatchSummary,
    JobContext,
    JobState,
    QueueWeight,
    SkipRetry,
    StepFailure,
    chain,
)
from chronos_trio.actors import continuer
from chronos_trio.records._flow_outcomes import DELETED_ERROR
from chronos_trio.store import SettleKind, Settlement
from tests._backends import Backend

#: A member that waits this long is still scheduled when the test deletes it.
LATER = 3600.0


class Flows:
    def __init__(self, store: Any) -> None:
        self.app = app = App(store)
        self.runs: collections.Counter[str] = collections.Counter()
        self.summaries: list[tuple[str, BatchSummary]] = []
        self.failures: list[tuple[str, StepFailure]] = []

        @app.task("work", max_retries=0)
        async def work(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            if n < 0:
                raise SkipRetry(f"{n} is negative")
            return n * 2

        @app.task("summary")
        async def summary(s: BatchSummary, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.summaries.append((job.id, s))

        @app.task("alert")
        async def alert(f: StepFailure, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.failures.append((job.id, f))

        self.work, self.summary, self.alert = work, summary, alert

    async def until(self, found: Any, what: str) -> None:
        while not found():
            await trio.sleep(0.05)


async def test_a_deleted_batch_member_counts_failed_and_the_batch_completes_once(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    steps = [f.work.s(1), f.work.s(2, delay=LATER), f.work.s(3)]
    async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
        batch = await f.app.enqueue_batch(steps, batch_id="bd", on_complete=f.summary.s())
        with trio.fail_after(backend.pick(memory=120, redis=30)):
            while (await batch.status()).succeeded < 2:
                await trio.sleep(0.05)
            assert (await batch.status()).pending == 1
            deleted = await f.app.inspector().delete("bd.0.1")
            assert deleted.id == "bd.0.1"
            done = await batch.wait(timeout=20)
            await f.until(lambda: f.summaries, "the batch's callback")
            await trio.sleep(1.0)  # a second callback would run by now
    assert (done.succeeded, done.failed, done.pending, done.complete) == (2, 1, 0, True)
    assert done.failed_job_ids == ("bd.0.1",)
    [(callback, summary)] = f.summaries
    assert callback == "bd.1"
    assert summary == BatchSummary("bd", 3, 2, 1, ["bd.0.1"])
    outcomes = await batch.result(timeout=5)
    assert outcomes[1].error == DELETED_ERROR
    assert f.runs["bd.1"] == 1 and "bd.0.1" not in f.runs


async def test_a_deleted_step_calls_its_on_failure_once(backend: Backend, clock: object) -> None:
    f = Flows(backend.store())
    flow = chain(f.work.s(1), f.work.s(delay=LATER), f.work.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
        await f.app.enqueue_workflow(flow, workflow_id="cd", on_failure=f.alert.s())
        with trio.fail_after(backend.pick(memory=120, redis=30)):
            while await f.app.store.get_job("cd.1") is None:
                await trio.sleep(0.05)
            assert await f.app.store.delete_job("cd.1")
            assert not await f.app.store.delete_job("cd.1")  # gone: nothing more
            await f.until(lambda: f.failures, "the flow's on_failure")
            await trio.sleep(1.0)  # a second callback would run by now
    [(callback, failure)] = f.failures
    assert callback == "cd.on_failure"
    assert failure == StepFailure("cd", "cd.1", "work", DELETED_ERROR, 0)
    assert await f.app.store.get_job("cd.2") is None  # nothing after it is made
    assert f.runs["cd.on_failure"] == 1


async def test_a_purge_settles_every_deleted_member(backend: Backend, clock: object) -> None:
    f = Flows(backend.store())
    steps = [f.work.s(1), f.work.s(2, delay=LATER), f.work.s(3, delay=LATER)]
    batch = await f.app.enqueue_batch(steps, batch_id="bp", on_complete=f.summary.s())
    with trio.fail_after(backend.pick(memory=120, redis=30)):
        async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
            while (await batch.status()).succeeded < 1:
                await trio.sleep(0.05)
        while (await f.app.store.purge_queue("default", limit=100)).count:
            pass
        async with f.app.open_worker(**backend.timing(poll_interval=0.5, recover_interval=1.0)):
            done = await batch.wait(timeout=20)
            await f.until(lambda: f.summaries, "the batch's callback")
            await trio.sleep(1.0)
    assert (done.succeeded, done.failed, done.pending) == (1, 2, 0)
    [(_, summary)] = f.summaries
    assert summary == BatchSummary("bp", 3, 1, 2, ["bp.0.1", "bp.0.2"])


async def test_an_end_still_in_the_outbox_outlives_its_deleted_job(
    backend: Backend, clock: object
) -> None:
    """A member settled dead, and one settled succeeded, then deleted before
    any continuer read their entries: both arrive, from the entries."""
    f = Flows(backend.store())
    store = f.app.store
    steps = [f.work.s(1), f.work.s(-1)]
    batch = await f.app.enqueue_batch(steps, batch_id="bo", on_complete=f.summary.s())
    leased = (await store.lease([QueueWeight("default")], 2, worker_id="w", lease_duration=60)).jobs
    assert len(leased) == 2
    await store.settle(
        [
            Settlement(lj.ref, SettleKind.DEAD, error="SkipRetry: -1 is negative")
            if lj.job.payload == b"-1"
            else Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60)
            for lj in leased
        ]
    )
    assert await store.delete_job("bo.0.0") and await store.delete_job("bo.0.1")
    entries = await store.continuations(["default"], 10)
    assert sorted(e.job_id for e in entries) == ["bo.0.0", "bo.0.1"]
    await continuer._continue(store, entries)
    # a continuer that died before finishing them: the next one reads the
    # same entries and does it again, changing nothing
    again = await store.continuations(["default"], 10)
    assert sorted(e.job_id for e in again) == ["bo.0.0", "bo.0.1"]
    await continuer._continue(store, again)
    await store.finish_continuations(again)
    status = await batch.status()
    assert (status.succeeded, status.failed, status.failed_job_ids) == (1, 1, ("bo.0.1",))
    assert status.complete
    assert await store.continuations(["default"], 10) == []  # handled: gone
    callback = await store.get_job("bo.1")  # made once, under its one ID
    assert callback is not None and callback.state is JobState.READY
    summary = json.loads(callback.payload)
    assert (summary["succeeded"], summary["failed_job_ids"]) == (1, ["bo.0.1"])


async def test_a_deleted_step_without_failure_handling_stops_its_flow(
    backend: Backend, clock: object
) -> None:
    """As before: nothing follows it, and nothing is put in the outbox."""
    f = Flows(backend.store())
    store = f.app.store
    await f.app.enqueue_workflow(chain(f.work.s(1, delay=LATER), f.work.s()), workflow_id="pd")
    assert await store.delete_job("pd.0")
    assert await store.continuations(["default"], 10) == []
