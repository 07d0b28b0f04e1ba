"""Cancelling a whole workflow (issue 29 item 1) and looking at it (item 6):
``app.workflow(id).abort()`` aborts its running steps, drops its waiting
ones and never starts the steps not made yet, also when the cancel races
the continuer; ``status()`` shows the steps as a tree. Memory (virtual
clock) and Redis here; the store parts are in the conformance suite
(``testing/_conformance_workflows.py``)."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest
import trio

from chronos_trio import (
    App,
    JobAborted,
    JobContext,
    JobState,
    MemoryStore,
    QueueWeight,
    WorkflowState,
    chain,
    group,
)
from chronos_trio.actors import continuer
from chronos_trio.records._workflow import advance
from chronos_trio.store import SettleKind, Settlement
from tests._backends import Backend


def cancel_app(store: Any) -> tuple[App, collections.Counter[str]]:
    app = App(store)
    runs: collections.Counter[str] = collections.Counter()

    @app.task("add")
    async def add(payload: int, job: JobContext) -> int:
        runs[job.id] += 1
        return payload + 1

    @app.task("slow", timeout=3600)
    async def slow(payload: int, job: JobContext) -> int:
        runs[job.id] += 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        runs[job.id] += 1
        return sum(payload)

    return app, runs


async def wait_state(app: App, job_id: str, *states: JobState) -> None:
    while True:
        job = await app.store.get_job(job_id)
        if job is not None and job.state in states:
            return
        await trio.sleep(0.05)


async def test_cancel_mid_chain_aborts_the_running_step_and_nothing_after_runs(
    backend: Backend, clock: object
) -> None:
    app, runs = cancel_app(backend.store())
    add, slow = app.tasks["add"], app.tasks["slow"]
    flow = chain(add.s(1), slow.s(), add.s(), add.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        await app.enqueue_workflow(flow, workflow_id="mid")
        with trio.fail_after(backend.pick(memory=120, redis=30)):
            await wait_state(app, "mid.1", JobState.LEASED)
            while runs["mid.1"] == 0:
                await trio.sleep(0.05)
            done = await app.workflow("mid").abort(reason="user asked")
            assert done.found and done.first
            assert done.finished == ("mid.0",)
            assert done.aborted_running == ("mid.1",)
            assert done.dropped == ()
            assert done.not_created == ("mid.2", "mid.3")
            await wait_state(app, "mid.1", JobState.ABORTED)
            await trio.sleep(2.0)
    job = await app.store.get_job("mid.1")
    assert job is not None and "workflow cancelled: user asked" in job.last_error
    assert await app.store.get_job("mid.2") is None, "nothing after the aborted step"
    assert runs["mid.2"] == 0 and runs["mid.3"] == 0
    view = await app.workflow("mid").status()
    assert view.state is WorkflowState.CANCELLED
    assert [(s.id, s.state) for s in view.steps()] == [
        ("mid.0", JobState.SUCCEEDED),
        ("mid.1", JobState.ABORTED),
        ("mid.2", None),
        ("mid.3", None),
    ]
    again = await app.workflow("mid").abort()
    assert again.found and not again.first, "aborting twice is harmless"
    assert again.finished == ("mid.0", "mid.1")


async def test_cancel_with_a_group_partly_done(backend: Backend, clock: object) -> None:
    app, runs = cancel_app(backend.store())
    add, slow, total = app.tasks["add"], app.tasks["slow"], app.tasks["total"]
    flow = chain(group(add.s(1), slow.s(2), add.s(3)), total.s(), add.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        await app.enqueue_workflow(flow, workflow_id="grp")
        with trio.fail_after(backend.pick(memory=120, redis=30)):
            await wait_state(app, "grp.0.0", JobState.SUCCEEDED)
            await wait_state(app, "grp.0.2", JobState.SUCCEEDED)
            while runs["grp.0.1"] == 0:
                await trio.sleep(0.05)
            done = await app.workflow("grp").abort()
            assert set(done.finished) == {"grp.0.0", "grp.0.2"}
            assert done.aborted_running == ("grp.0.1",)
            assert done.not_created == ("grp.1", "grp.2")
            await wait_state(app, "grp.0.1", JobState.ABORTED)
            await trio.sleep(2.0)
    assert runs["grp.1"] == 0 and await app.store.get_job("grp.1") is None
    view = await app.workflow("grp").status()
    assert view.root is not None and view.root.kind == "chain"
    assert [c.kind for c in view.root.children] == ["group", "job", "job"]
    assert view.root.children[0].id == "grp.0"


async def test_cancel_before_the_flow_runs_drops_its_waiting_steps(
    backend: Backend, clock: object
) -> None:
    app, runs = cancel_app(backend.store())
    add = app.tasks["add"]
    await app.enqueue_workflow(
        chain(group(add.s(1), add.s(2)), app.tasks["total"].s()), workflow_id="early"
    )
    view = await app.workflow("early").status()
    assert view.state is WorkflowState.RUNNING
    assert [s.state for s in view.steps()] == [JobState.READY, JobState.READY, None]
    done = await app.workflow("early").abort()
    assert done.dropped == ("early.0.0", "early.0.1") and done.not_created == ("early.1",)
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        await trio.sleep(2.0)
    assert not runs, "no step of a cancelled flow ran"
    missing = await app.workflow("nobody").abort()
    assert not missing.found and missing.not_created == ()
    assert (await app.workflow("nobody").status()).state is WorkflowState.NOT_FOUND
    # starting the same workflow again is the same run: still cancelled
    await app.enqueue_workflow(
        chain(group(add.s(1), add.s(2)), app.tasks["total"].s()), workflow_id="early"
    )
    assert (await app.workflow("early").status()).state is WorkflowState.CANCELLED


async def test_the_started_handle_aborts_and_its_result_says_so(
    backend: Backend, clock: object
) -> None:
    app, _runs = cancel_app(backend.store())
    add = app.tasks["add"]
    started = await app.enqueue_workflow(chain(add.s(1), add.s(), add.s()), workflow_id="h")
    done = await started.abort()
    assert done.dropped == ("h.0",) and done.not_created == ("h.1", "h.2")
    with trio.fail_after(backend.pick(memory=60, redis=20)), pytest.raises(JobAborted):
        await started.result(timeout=10)
    with pytest.raises(ValueError, match="workflow ID"):
        app.workflow("")


# -- the race with the continuer (memory, driven step by step) -------------------------
async def _first_step_succeeded(app: App, workflow_id: str) -> list[Any]:
    store = app.store
    add = app.tasks["add"]
    await app.enqueue_workflow(chain(add.s(1), add.s(), add.s()), workflow_id=workflow_id)
    leased = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    await store.settle(
        [Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60) for lj in leased]
    )
    batch = await store.continuations(["default"], 10)
    assert [c.job_id for c in batch] == [f"{workflow_id}.0"]
    return batch


async def test_a_cancel_between_the_continuers_check_and_its_enqueue(
    autojump_clock: object,
) -> None:
    store = MemoryStore()
    app, _ = cancel_app(store)
    batch = await _first_step_succeeded(app, "race")
    enqueue = store.enqueue_many

    async def cancel_first(jobs: Any) -> Any:
        # the whole cancel (mark, sweep) runs after the first check, before the enqueue
        done = await app.workflow("race").abort()
        assert done.not_created == ("race.1", "race.2")
        return await enqueue(jobs)

    store.enqueue_many = cancel_first  # type: ignore[method-assign]
    await continuer._continue(store, batch)
    store.enqueue_many = enqueue  # type: ignore[method-assign]
    job = await store.get_job("race.1")
    assert job is not None and job.state is JobState.ABORTED, "the second check aborted it"


async def test_a_continuer_that_died_after_its_enqueue(autojump_clock: object) -> None:
    store = MemoryStore()
    app, runs = cancel_app(store)
    batch = await _first_step_succeeded(app, "crash")
    # a continuer made the next step, then died before its second check
    jobs = await continuer.next_jobs(store, batch)
    await store.enqueue_many(jobs)
    # the mark lands after that enqueue; say its sweep was missed too
    assert await store.cancel_workflow("crash") is not None
    await continuer._continue(store, batch)  # the next continuer handles the entry
    job = await store.get_job("crash.1")
    assert job is not None and job.state is JobState.ABORTED
    async with app.open_worker(poll_interval=0.5):
        await trio.sleep(5)
    assert runs["crash.1"] == 0 and await store.get_job("crash.2") is None


async def test_a_group_callback_of_a_cancelled_flow_is_never_made(
    autojump_clock: object,
) -> None:
    store = MemoryStore()
    app, runs = cancel_app(store)
    add, total = app.tasks["add"], app.tasks["total"]
    await app.enqueue_workflow(chain(group(add.s(1), add.s(2)), total.s()), workflow_id="cb")
    leased = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    await store.settle(
        [Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=60) for lj in leased]
    )
    await app.workflow("cb").abort()  # both members done, the callback not made yet
    batch = await store.continuations(["default"], 10)
    await continuer._continue(store, batch)
    await store.finish_continuations(batch)
    assert await store.get_job("cb.1") is None, "the callback was never made"
    assert not runs


def test_an_older_workers_continuation_without_a_workflow_id_still_continues() -> None:
    then = json.dumps(
        {"seq": [{"job": {"id": "old.1", "kind": "add", "queue": "default", "p": None,
                          "mr": 3, "to": 30.0, "d": 0.0}}], "after": None}
    )  # fmt: skip
    steps = advance(then, b"5")
    assert [j.id for j in steps.jobs] == ["old.1"] and steps.workflow is None
    assert steps.jobs[0].payload == b"5"


def test_new_continuations_carry_their_workflow_id() -> None:
    app, _ = cancel_app(MemoryStore())
    add = app.tasks["add"]
    from chronos_trio.records._flow_build import start

    first = start(chain(group(add.s(1), add.s(2)), app.tasks["total"].s()), "a.b")
    assert first.workflow == "a.b"
    assert all(json.loads(j.then or "{}").get("wf") == "a.b" for j in first.jobs)
    nxt = advance(first.jobs[0].then or "", b"2")
    assert nxt.arrivals[0].workflow == "a.b"


async def test_a_graph_is_cancelled_at_its_join_and_shown_as_a_graph(
    autojump_clock: object,
) -> None:
    """A graph (issue 29 item 4) carries its workflow ID in every
    continuation, its joins' included: a cancel after its roots ran stops
    the join's step and what follows the graph; the view draws it."""
    from chronos_trio import graph

    store = MemoryStore()
    app, runs = cancel_app(store)
    add, total = app.tasks["add"], app.tasks["total"]
    g = graph()
    g.add("a", add.s(1))
    g.add("b", add.s(2))
    g.add("join", total.s(), after=["a", "b"])
    await app.enqueue_workflow(chain(g, add.s()), workflow_id="gr")
    leased = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    assert sorted(lj.job.id for lj in leased) == ["gr.0.a", "gr.0.b"]
    assert all(json.loads(lj.job.then or "{}").get("wf") == "gr" for lj in leased)
    await store.settle(
        [Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=60) for lj in leased]
    )
    done = await app.workflow("gr").abort()
    assert set(done.finished) == {"gr.0.a", "gr.0.b"}
    assert set(done.not_created) == {"gr.0.join", "gr.1"}
    async with app.open_worker(poll_interval=0.5):
        await trio.sleep(5)
    assert await store.get_job("gr.0.join") is None and await store.get_job("gr.1") is None
    assert not runs
    view = await app.workflow("gr").status()
    assert view.root is not None and [c.kind for c in view.root.children] == ["graph", "job"]
    assert [s.id for s in view.steps()] == ["gr.0.a", "gr.0.b", "gr.0.join", "gr.1"]
