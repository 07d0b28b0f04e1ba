"""A workflow's record lives while its flow runs (issue 29 review): saved
for WORKFLOW_KEEP plus the flow's delays, kept alive as its steps advance
(the continuer; a chain link's settle on memory and one Redis node), and a
group's arrivals kept as long as the record, so a flow with a step delayed
two days, or a chain longer than a day, can still be viewed and cancelled
and its groups complete. On memory under the virtual clock (days pass in
moments), and on Redis by the TTLs the store sets."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import redis
import trio

from chronos_trio import App, JobContext, MemoryStore, WorkflowState, chain, group
from chronos_trio.records._flow_keep import flow_delay, record_keep
from chronos_trio.records._workflow import WORKFLOW_KEEP
from chronos_trio.store.redis import RedisStore

DAY = 24 * 3600.0
#: Worker options for days of virtual time: few wake-ups.
SLOW = {
    "poll_interval": 600.0,
    "recover_interval": 600.0,
    "janitor_interval": 600.0,
    "notes_interval": 60.0,
    "gauge_interval": 600.0,
    "aggregate_interval": 600.0,
    "memory_check_interval": 600.0,
}


class Flows:
    def __init__(self, store: Any, *, hours: float = 0.0) -> None:
        self.app = app = App(store)
        self.runs: collections.Counter[str] = collections.Counter()

        @app.task("step", max_retries=0, timeout=2 * DAY)
        async def step(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            await trio.sleep(hours * 3600)
            return n + 1

        @app.task("total")
        async def total(parts: list[int], job: JobContext) -> int:
            return sum(parts)

        self.step, self.total = step, total


def test_the_record_is_saved_for_the_flows_delays() -> None:
    f = Flows(MemoryStore())
    assert flow_delay(f.step.s(1)) == 0.0
    flow = chain(
        f.step.s(1, delay=10),
        group(f.step.s(delay=2 * DAY), chain(f.step.s(delay=5), f.step.s(delay=7))),
        f.total.s(),
    )
    assert flow_delay(flow) == 10 + 2 * DAY
    assert record_keep(flow, f.step.s(delay=3)) == WORKFLOW_KEEP + 10 + 2 * DAY + 3


async def test_a_step_delayed_two_days_keeps_its_flow_viewable(autojump_clock: object) -> None:
    store = MemoryStore()
    f = Flows(store)
    flow = chain(f.step.s(1), f.step.s(delay=2 * DAY), f.step.s())
    async with f.app.open_worker(**SLOW):
        started = await f.app.enqueue_workflow(flow, workflow_id="late")
        with trio.fail_after(3 * DAY):
            await trio.sleep(1.5 * DAY)  # past the 24 h a record used to have
            view = await f.app.workflow("late").status()
            assert view.state is WorkflowState.RUNNING
            assert await started.result(timeout=DAY) == 4
    with trio.fail_after(2 * DAY):
        await trio.sleep(WORKFLOW_KEEP - 3600)  # kept a day after the flow finished
        assert await store.workflow_record("late") is not None
        await trio.sleep(2 * 3600)
        assert await store.workflow_record("late") is None  # and then it goes


async def test_a_chain_longer_than_a_day_keeps_its_record(autojump_clock: object) -> None:
    store = MemoryStore()
    f = Flows(store, hours=2.0)
    flow = chain(f.step.s(0), *[f.step.s() for _ in range(19)])  # 40 h of work
    async with f.app.open_worker(**SLOW):
        await f.app.enqueue_workflow(flow, workflow_id="long")
        with trio.fail_after(3 * DAY):
            await trio.sleep(30 * 3600)
            assert (await f.app.workflow("long").status()).state is WorkflowState.RUNNING
            done = await f.app.workflow("long").abort(reason="enough")
            assert done.found and len(done.aborted_running) == 1
    assert store.chain_settles > 10, "the links went the settle's way"
    assert len(f.runs) < 20, "nothing ran after the abort"


async def test_a_group_member_delayed_two_days_still_completes_its_group(
    autojump_clock: object,
) -> None:
    store = MemoryStore()
    f = Flows(store)
    flow = chain(group(f.step.s(1), f.step.s(2, delay=2 * DAY)), f.total.s())
    async with f.app.open_worker(**SLOW):
        started = await f.app.enqueue_workflow(flow, workflow_id="g")
        with trio.fail_after(3 * DAY):
            assert await started.result(timeout=3 * DAY) == 5


# -- Redis: the TTLs the store sets ---------------------------------------------------------
@pytest.mark.redis
async def test_redis_keeps_a_running_flows_record_and_groups(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, namespace="keep")
    raw = redis.Redis.from_url(redis_url)
    keys = store._ctx.keys
    try:
        f = Flows(store)
        # saved for its delays: a day more than the day it waits
        await f.app.enqueue_workflow(chain(f.step.s(1), f.step.s(delay=DAY)), workflow_id="d")
        assert raw.ttl(keys.workflow("d")) == pytest.approx(WORKFLOW_KEEP + DAY, abs=5)
        # a chain whose record had a minute left: each link's settle keeps it
        # alive (one node: the settle stores the next link), and a group's
        # arrivals keep it (the continuer) and last as long
        flows = {
            "c": chain(f.step.s(1), f.step.s(), f.step.s()),
            "g": chain(group(f.step.s(1), f.step.s(2)), f.total.s()),
        }
        handles = {}
        for wid, flow in flows.items():
            await f.app.workflow(wid).status()  # (nothing yet)
            handles[wid] = await f.app.enqueue_workflow(flow, workflow_id=wid)
            raw.expire(keys.workflow(wid), 60)
        async with f.app.open_worker(poll_interval=0.2, recover_interval=0.2):
            with trio.fail_after(30):
                assert await handles["c"].result(timeout=20) == 4
                assert await handles["g"].result(timeout=20) == 5
        for wid in flows:
            assert raw.ttl(keys.workflow(wid)) == pytest.approx(WORKFLOW_KEEP, abs=60), wid
        assert raw.ttl(keys.group("g.0")) == pytest.approx(WORKFLOW_KEEP, abs=60)
    finally:
        raw.close()
        await store.aclose()
