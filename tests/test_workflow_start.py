"""Starting a workflow (issue 29, the producer's side of chain throughput):
on one Redis node ``enqueue_workflow`` is one round trip, the record's save
sent before the first jobs' enqueue in the same pipeline
(``store/redis/_workflows.start``); a save that fails leaves no job of the
flow to run; a save whose script was not loaded is run again before the
start returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import trio

from chronos_trio import App, JobContext, JobState, StoreError, chain, group
from chronos_trio.store.redis import RedisStore, _workflows
from chronos_trio.store.redis._scripts import Op

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def flow_app(store: RedisStore) -> App:
    app = App(store)

    @app.task("add")
    async def add(payload: int, job: JobContext) -> int:
        return payload + 1

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        return sum(payload)

    return app


def flows(app: App) -> list[Any]:
    add, total = app.tasks["add"], app.tasks["total"]
    return [
        chain(add.s(0), *(add.s() for _ in range(9))),
        chain(group(add.s(1), add.s(2), add.s(3)), total.s()),
        add.s(5),
    ]


async def test_a_start_is_one_round_trip_record_first(redis_store: Factory) -> None:
    store = await redis_store()
    app = flow_app(store)
    with trio.fail_after(20):
        for k, flow in enumerate(flows(app)):
            await app.enqueue_workflow(flow, workflow_id=f"warm{k}")  # scripts, topology
            before = store.statistics().round_trips
            started = await app.enqueue_workflow(flow, workflow_id=f"w{k}")
            assert store.statistics().round_trips - before == 1
            assert await store.workflow_record(started.id) is not None
            first = await store.get_job(f"w{k}.0" if k < 2 else f"w{k}")
            if k == 1:
                first = await store.get_job("w1.0.0")
            assert first is not None and first.state is JobState.READY
        # the same ID again: the same run (no job made twice, the record unchanged)
        record = await store.workflow_record("w0")
        again = await app.enqueue_workflow(flows(app)[0], workflow_id="w0")
        assert again.id == "w0"
        assert await store.workflow_record("w0") == record
        async with app.open_worker(poll_interval=0.05):
            assert await started.result(timeout=10) == 6
            assert await (app.workflow("w0")).status() is not None


async def test_a_save_that_fails_leaves_no_job_to_run(
    redis_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await redis_store()
    app = flow_app(store)
    flow = flows(app)[0]

    def failing_save(ctx: Any, workflow_id: str, *args: Any, soft: bool = False) -> Op:
        key = ctx.keys.workflow(workflow_id)
        # an error reply in the save's place (HINCRBY of a missing field by
        # a non-integer), the enqueue still sent after it in the pipeline
        return Op(key, ("HINCRBY", key, "t", "x"), None, soft)

    monkeypatch.setattr(_workflows, "_save_op", failing_save)
    with trio.fail_after(20):
        with pytest.raises(StoreError, match="record could not be saved"):
            await app.enqueue_workflow(flow, workflow_id="bad")
        job = await store.get_job("bad.0")
        assert job is not None and job.state is JobState.ABORTED
        assert await store.workflow_record("bad") is None
        async with app.open_worker(poll_interval=0.05):
            await trio.sleep(0.3)
        assert (await store.get_job("bad.0")).state is JobState.ABORTED  # type: ignore[union-attr]
        assert await store.get_job("bad.1") is None


async def test_a_save_whose_script_was_flushed_is_saved_before_the_start_returns(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    app = flow_app(store)
    add = app.tasks["add"]
    admin = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(20):
            await app.enqueue_workflow(flows(app)[0], workflow_id="warm")
            admin.script_flush()
            await add.enqueue(1)  # enqueue.lua loaded again, workflow_save.lua not
            started = await app.enqueue_workflow(flows(app)[0], workflow_id="w")
            assert await store.workflow_record(started.id) is not None
            assert store.statistics().script_loads >= 2
            first = await store.get_job("w.0")
            assert first is not None and first.state is JobState.READY
    finally:
        admin.close()


async def test_a_lone_plain_first_job_goes_with_the_save_in_one_round_trip(
    redis_store: Factory,
) -> None:
    """A start of one job takes the lone enqueue's plan; a plain job (no
    continuation) takes ``enqueue_plain.lua`` there, and the record's save
    still goes first in the same pipeline (one round trip, not the save
    alone after it)."""
    from chronos_trio import NewJob

    store = await redis_store()
    plain = NewJob(id="p.0", queue="q", kind="k", payload=b"{}")
    with trio.fail_after(20):
        await store.enqueue_many([NewJob(id="warm", queue="q", kind="k", payload=b"{}")])
        before = store.statistics().round_trips
        [result] = await store.start_workflow("p", '{"t":1}', "k", 60.0, [plain])
        assert store.statistics().round_trips - before == 1
        assert result.created and result.job_id == "p.0"
        record = await store.workflow_record("p")
        assert record is not None and record.first_kind == "k"
        job = await store.get_job("p.0")
        assert job is not None and job.state is JobState.READY
