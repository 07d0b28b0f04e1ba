"""Workflow failure handling (issue 29 items 2 and 3): ``on_failure``
callbacks on a workflow, a chain and a group (called once, the innermost
wins), groups that allow failures (what follows gets every member's
``MemberOutcome``), and ``Workflow.result()`` of a flow that ends with a
group — on memory (virtual clock), Redis, PostgreSQL and SQLite. The store
rules are in the conformance suite (``testing/_conformance_flow_failures``);
kill -9 in ``tests/test_process_flow_failures.py``."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import trio

from chronos_trio import (
    App,
    JobContext,
    JobFailed,
    JobState,
    MemberOutcome,
    MemoryStore,
    QueueWeight,
    SkipRetry,
    StepFailure,
    chain,
    group,
)
from chronos_trio.actors import continuer
from chronos_trio.records._workflow import describe
from tests._backends import Backend


class Flows:
    """An app with a few tasks, counting runs and collecting callbacks."""

    def __init__(self, store: Any) -> None:
        self.app = app = App(store)
        self.runs: collections.Counter[str] = collections.Counter()
        self.failures: list[tuple[str, StepFailure]] = []
        self.outcomes: list[list[MemberOutcome]] = []
        self.broken: set[int] = set()
        self.flaky: dict[int, int] = {}  # payload -> failures left before it works

        @app.task("add", max_retries=0)
        async def add(payload: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            if payload in self.broken:
                raise SkipRetry(f"{payload} is broken")
            if self.flaky.get(payload, 0) > 0:
                self.flaky[payload] -= 1
                raise RuntimeError(f"{payload} failed this time")
            return payload + 1

        @app.task("failed")
        async def failed(payload: StepFailure, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.failures.append((job.id, payload))

        @app.task("tally")
        async def tally(payload: list[MemberOutcome], job: JobContext) -> int:
            self.runs[job.id] += 1
            self.outcomes.append(payload)
            return sum(o.result for o in payload if o.ok and isinstance(o.result, int))

        self.add, self.failed, self.tally = add, failed, tally

    async def wait_for(self, predicate: Any, seconds: float = 20) -> None:
        with trio.fail_after(seconds):
            while not predicate():
                await trio.sleep(0.05)


async def _state(app: App, job_id: str) -> JobState | None:
    job = await app.store.get_job(job_id)
    return None if job is None else job.state


async def test_a_workflow_s_on_failure_is_called_once_with_the_failed_step(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    f.broken.add(2)
    flow = chain(f.add.s(1), f.add.s(), f.add.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await f.app.enqueue_workflow(flow, workflow_id="wf", on_failure=f.failed.s())
        await f.wait_for(lambda: f.failures)
        with pytest.raises(JobFailed) as failed:
            await started.result(timeout=15)
        assert failed.value.job_id == "wf.1"
        await trio.sleep(1.0)
    [(callback_id, failure)] = f.failures
    assert callback_id == "wf.on_failure"
    assert (failure.workflow_id, failure.job_id, failure.kind, failure.attempts) == (
        "wf", "wf.1", "add", 1,
    )  # fmt: skip
    assert failure.error.startswith("SkipRetry: 2 is broken")
    assert f.runs["wf.2"] == 0, "nothing after the failed step runs"


async def test_retries_come_first_and_the_innermost_on_failure_wins(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    f.flaky[2] = 10  # fails every attempt it gets
    inner = chain(f.add.s(), f.add.s(max_retries=2), on_failure=f.failed.s())
    flow = chain(f.add.s(1), inner)
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        await f.app.enqueue_workflow(flow, workflow_id="in", on_failure=f.failed.s())
        await f.wait_for(lambda: f.failures, backend.pick(memory=600, redis=30))
        await trio.sleep(1.0)
    # inner is link 1: its links are in.1.0 and in.1.1; in.1.0 gets 2 and fails
    [(callback_id, failure)] = f.failures
    assert callback_id == "in.1.on_failure", "the chain's callback, not the workflow's"
    assert (failure.job_id, failure.attempts) == ("in.1.0", 1)
    assert f.runs["in.1.0"] == 1 and f.runs["in.on_failure"] == 0


async def test_retries_are_spent_before_the_callback(backend: Backend, clock: object) -> None:
    f = Flows(backend.store())
    f.flaky[1] = 10
    flow = chain(f.add.s(1, max_retries=2), f.add.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        await f.app.enqueue_workflow(flow, workflow_id="re", on_failure=f.failed.s())
        await f.wait_for(lambda: f.failures, backend.pick(memory=600, redis=40))
    [(_, failure)] = f.failures
    assert (failure.job_id, failure.attempts) == ("re.0", 3)
    assert f.runs["re.0"] == 3 and "failed this time" in failure.error


async def test_a_group_s_on_failure_fires_once_however_many_members_fail(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    f.broken.update({10, 20})
    members = group(f.add.s(10), f.add.s(20), f.add.s(30), on_failure=f.failed.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        await f.app.enqueue_workflow(members, workflow_id="g")
        await f.wait_for(lambda: f.runs["g.0"] and f.runs["g.1"] and f.runs["g.2"] and f.failures)
        await trio.sleep(2.0)  # the second failure's callback is the same job
    assert [cid for cid, _ in f.failures] == ["g.on_failure"]
    assert f.failures[0][1].job_id in ("g.0", "g.1")


async def test_a_group_that_allows_failures_hands_on_every_outcome_in_order(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    f.broken.add(2)
    members = group(
        f.add.s(1), chain(f.add.s(2), f.add.s()), f.add.s(5), group(f.add.s(7)),
        allow_failures=True,
    )  # fmt: skip
    flow = chain(members, f.tally.s(), f.add.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await f.app.enqueue_workflow(flow, workflow_id="af", on_failure=f.failed.s())
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 2 + 6 + 1
    [outcomes] = f.outcomes
    assert [o.ok for o in outcomes] == [True, False, True, True]
    assert [o.job_id for o in outcomes] == ["af.0.0", "af.0.1.0", "af.0.2", "af.0.3"]
    assert outcomes[0].result == 2 and outcomes[2].result == 6 and outcomes[3].result == [8]
    assert outcomes[1].error is not None and outcomes[1].error.startswith("SkipRetry")
    assert f.failures == [], "a failure inside allow_failures is an outcome, not a failure"
    assert f.runs["af.0.1.1"] == 0, "the failed member's chain stops there"


async def test_a_flow_that_ends_in_a_group_gives_its_members_results(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    flow = chain(f.add.s(1), group(f.add.s(), chain(f.add.s(), f.add.s()), group(f.add.s(9))))
    f.broken.add(30)
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await f.app.enqueue_workflow(flow, workflow_id="end")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == [3, 4, [10]]
            allowing = await f.app.enqueue_workflow(
                group(f.add.s(1), f.add.s(30), allow_failures=True), workflow_id="ends"
            )
            got = await allowing.result(timeout=20)
            strict = await f.app.enqueue_workflow(group(f.add.s(1), f.add.s(30)))
            with pytest.raises(JobFailed):
                await strict.result(timeout=20)
    assert [(o.ok, o.result, o.job_id) for o in got] == [
        (True, 2, "ends.0"), (False, None, "ends.1"),
    ]  # fmt: skip
    assert got[1].error is not None and "30 is broken" in got[1].error


async def test_a_requeued_dead_step_continues_the_flow_and_its_callback_stays_fired(
    backend: Backend, clock: object
) -> None:
    f = Flows(backend.store())
    f.broken.add(2)
    flow = chain(f.add.s(1), f.add.s(), f.add.s())
    async with f.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await f.app.enqueue_workflow(flow, workflow_id="rq", on_failure=f.failed.s())
        await f.wait_for(lambda: f.failures)
        f.broken.clear()
        assert await f.app.store.run_now("rq.1")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 4
        # failing again after the re-run: the callback's ID is taken, no second one
        f.broken.add(4)
        assert await f.app.store.run_now("rq.2") is False  # succeeded: not re-runnable
    assert [cid for cid, _ in f.failures] == ["rq.on_failure"]
    assert f.runs["rq.1"] == 2 and f.runs["rq.2"] == 1 and f.runs["rq.on_failure"] == 1


async def test_a_lease_lost_on_the_last_attempt_calls_the_callback(autojump_clock: object) -> None:
    f = Flows(MemoryStore())
    await f.app.enqueue_workflow(
        chain(f.add.s(1), f.add.s()), workflow_id="lost", on_failure=f.failed.s()
    )
    # a worker that leased the first step and died: its lease expires
    [leased] = (
        await f.app.store.lease([QueueWeight("default")], 10, worker_id="gone", lease_duration=5)
    ).jobs
    assert leased.job.id == "lost.0"
    async with f.app.open_worker(poll_interval=0.5, recover_interval=1.0):
        await f.wait_for(lambda: f.failures, 120)
    [(_, failure)] = f.failures
    assert failure.job_id == "lost.0" and "lease expired" in failure.error
    assert f.runs["lost.0"] == 0 and f.runs["lost.1"] == 0


async def test_a_failure_entry_handled_twice_makes_one_callback(autojump_clock: object) -> None:
    store = MemoryStore()
    f = Flows(store)
    f.broken.update({1, 2})
    await f.app.enqueue_workflow(
        group(f.add.s(1), f.add.s(2), f.add.s(3), allow_failures=True),
        workflow_id="twice",
    )
    await f.app.enqueue_workflow(
        chain(f.add.s(1), f.add.s()), workflow_id="cb", on_failure=f.failed.s()
    )
    from chronos_trio.store import SettleKind, Settlement

    leased = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    await store.settle(
        [
            Settlement(lj.ref, SettleKind.DEAD, error="boom")
            if lj.job.payload in (b"1", b"2")
            else Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"4", result_ttl=60)
            for lj in leased
        ]
    )
    batch = await store.continuations(["default"], 10)
    assert sorted(c.job_id for c in batch) == ["cb.0", "twice.0", "twice.1", "twice.2"]
    assert {c.job_id for c in batch if c.failed} == {"cb.0", "twice.0", "twice.1"}
    # a continuer that died before finishing its batch: the next does it all again
    await continuer._continue(store, batch)
    await continuer._continue(store, batch[::-1])
    await store.finish_continuations(batch)
    ready = [j for j in await store.list_jobs("default", JobState.READY)]
    assert sorted(j.id for j in ready) == ["cb.on_failure"], ready
    # a group that allows failures and ends the flow: nothing follows it
    assert await store.continuations(["default"], 10) == []


def test_failure_handling_is_checked_when_the_flow_is_built() -> None:
    f = Flows(MemoryStore())
    add, tally, failed = f.add, f.tally, f.failed
    with pytest.raises(TypeError, match="StepFailure"):
        chain(add.s(1), on_failure=add.s())
    with pytest.raises(TypeError, match="give it none"):
        chain(add.s(1), on_failure=failed.s(StepFailure("w", "j", "k", "e", 1)))
    with pytest.raises(TypeError, match="one step"):
        group(add.s(1), on_failure=chain(failed.s()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_failures"):
        group(add.s(1), allow_failures=True, on_failure=failed.s())
    with pytest.raises(TypeError, match=r"list\[.*MemberOutcome\]"):
        chain(group(add.s(1), allow_failures=True), add.s())
    with pytest.raises(TypeError, match="allow_failures takes True or False"):
        group(add.s(1), allow_failures=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StepFailure"):
        trio.run(lambda: f.app.enqueue_workflow(add.s(1), on_failure=add.s()))
    # what is fine: a tally after a group allowing failures, callbacks at every level
    flow = chain(
        group(add.s(1), allow_failures=True),
        tally.s(),
        chain(add.s(), add.s(), on_failure=failed.s()),
        on_failure=failed.s(),
    )
    assert len(flow.links) == 3, "a chain with a callback of its own stays one link"
    plain = chain(add.s(1), chain(add.s(), add.s()))
    assert len(plain.links) == 3, "one without is flattened, as before"


def test_describe_shows_failure_handling() -> None:
    f = Flows(MemoryStore())
    from chronos_trio.records._flow_build import start

    steps = start(chain(f.add.s(1), f.add.s()), "d", on_failure=f.failed.s())
    assert describe(steps.jobs[0].then) == "add (d.1) -> on failure: failed (d.on_failure)"
    steps = start(group(f.add.s(1), allow_failures=True), "e")
    assert describe(steps.jobs[0].then) == "member 0 of group e (1 in all, failures allowed)"


async def test_a_graph_step_that_fails_calls_the_workflow_s_callback(
    autojump_clock: object,
) -> None:
    from chronos_trio import graph

    f = Flows(MemoryStore())
    f.broken.add(2)
    g = graph()
    g.add("a", f.add.s(1))
    g.add("b", f.add.s(), after="a")  # gets 2: broken
    g.add("c", f.add.s(5), after="a")
    g.add("d", f.add.s(), after="c")
    async with f.app.open_worker(poll_interval=0.5):
        await f.app.enqueue_workflow(g, workflow_id="gr", on_failure=f.failed.s())
        await f.wait_for(lambda: f.failures and f.runs["gr.d"], 120)
        await trio.sleep(5)
    [(callback_id, failure)] = f.failures
    assert (callback_id, failure.job_id) == ("gr.on_failure", "gr.b")
    assert f.runs["gr.d"] == 1, "the graph's other branch goes on"
