"""A flow started many times is templated once (``records._flow_start``):
the cached start equals the uncached one for every shape, ID and option,
and a flow whose text holds a stand-in ID, a non-plain ID, headers or an
ID that makes a continuation too long go the uncached way (same result,
same error)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from chronos_trio import (
    App,
    JobContext,
    MemberOutcome,
    MemoryStore,
    StepFailure,
    chain,
    graph,
    group,
)
from chronos_trio.app._app import _allowing
from chronos_trio.app._batch import batch_flow
from chronos_trio.records import _flow_start
from chronos_trio.records._flow_build import as_node, predecessors
from chronos_trio.records._flow_start import FlowStarts
from chronos_trio.records._workflow import MAX_CONTINUATION_BYTES


def make_app(queue: str = "default") -> App:
    app = App(MemoryStore())

    @app.task("add", queue=queue)
    async def add(payload: int, job: JobContext) -> int:
        return payload + 1

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        return sum(payload)

    @app.task("failed")
    async def failed(payload: StepFailure, job: JobContext) -> None:
        return None

    @app.task("summary")
    async def summary(payload: Any, job: JobContext) -> None:
        return None

    @app.task("outcomes")
    async def outcomes(payload: list[MemberOutcome], job: JobContext) -> int:
        return len(payload)

    return app


def shapes(app: App) -> list[tuple[Any, Any]]:
    add, total, failed = app.tasks["add"], app.tasks["total"], app.tasks["failed"]
    outcomes = app.tasks["outcomes"]
    g = graph()
    g.add("fetch", add.s(7))
    g.add("resize", add.s(), after="fetch")
    g.add("thumb", add.s(), after=["fetch"])
    g.add("publish", total.s(), after=["thumb", "resize"])
    return [
        (chain(add.s(0), *(add.s() for _ in range(9))), None),
        (add.s(3, delay=2.5, max_retries=1, timeout=9.0), None),
        (group(add.s(1), add.s(2), on_failure=failed.s()), failed.s()),
        (
            chain(
                group(add.s(1), chain(add.s(2), add.s()), allow_failures=True),
                outcomes.s(),
            ),
            None,
        ),
        (chain(add.s(0), add.s(), on_failure=failed.s()), failed.s()),
        (as_node(g), None),
        (chain(add.s(1), as_node(g)), failed.s()),
        (batch_flow([add.s(k) for k in range(5)], app.tasks["summary"].s()), None),
    ]


def assert_same(starts: FlowStarts, node: Any, wid: str, on_failure: Any) -> None:
    fresh = starts.uncached(node, wid, (), on_failure)
    for _ in range(3):  # first sighting, templated, from the template
        assert starts.start(node, wid, (), on_failure) == fresh


def test_the_cached_start_equals_the_uncached_for_every_shape() -> None:
    app = make_app()
    starts = FlowStarts(_allowing)
    for node, on_failure in shapes(app):
        for wid in ("w", "0123abcd-ef.x", "a/b:c d"):
            assert_same(starts, node, wid, on_failure)
        entry = starts._flows[id(node)]
        assert entry.template is not None  # the cached path was the one taken
        # what the app's handle reads lazily is the same as before
        lazy = _flow_start.LazyPredecessors(node, "w")
        assert dict(lazy) == predecessors(node, "w") and lazy == predecessors(node, "w")


def test_what_the_template_cannot_take_goes_the_uncached_way() -> None:
    # a queue and kind that hold a stand-in ID: the two stand-ins split it differently
    app = make_app(queue=_flow_start._STAND_INS[0])
    starts = FlowStarts(_allowing)
    flow = chain(app.tasks["add"].s(0), app.tasks["add"].s())
    assert_same(starts, flow, "w", None)
    assert starts._flows[id(flow)].template is None
    # IDs JSON escapes, and headers
    other = make_app()
    flow = chain(other.tasks["add"].s(0), other.tasks["add"].s())
    for wid in ('q"uote', "back\\slash", "tab\there", "é"):
        assert_same(starts, flow, wid, None)
    headers = (("trace", "t1"),)
    assert starts.start(flow, "w", headers) == starts.uncached(flow, "w", headers, None)


def test_an_id_too_long_for_a_continuation_raises_as_uncached() -> None:
    app = make_app()
    starts = FlowStarts(_allowing)
    flow = chain(*(app.tasks["add"].s(0) for _ in range(3)))
    assert_same(starts, flow, "w", None)
    long_id = "x" * (MAX_CONTINUATION_BYTES // 2)
    with pytest.raises(ValueError, match="continuation"):
        starts.uncached(flow, long_id, (), None)
    with pytest.raises(ValueError, match="continuation"):
        starts.start(flow, long_id)


def test_the_cache_forgets_the_oldest_flows() -> None:
    app = make_app()
    starts = FlowStarts(_allowing)
    flows = [app.tasks["add"].s(k) for k in range(_flow_start.MAX_FLOWS + 5)]
    for flow in flows:
        starts.start(flow, "w")
    assert len(starts._flows) == _flow_start.MAX_FLOWS
    assert id(flows[-1]) in starts._flows


async def test_an_app_starts_the_same_flow_again_and_again() -> None:
    app = make_app()
    add = app.tasks["add"]
    flow = chain(add.s(0), *(add.s() for _ in range(4)))
    with trio.fail_after(10):
        async with app.open_worker(poll_interval=0.01):
            started = [await app.enqueue_workflow(flow) for _ in range(5)]
            for wf in started:
                assert await wf.result(timeout=5) == 5
                assert wf.waits_on[f"{wf.id}.4"] == (f"{wf.id}.3",)
