"""Workflow graphs end to end (issue 29 item 4): steps after several earlier
steps (a diamond, a wide fan-out and fan-in, joins whose inputs finish in
either order), each step once under its deterministic ID, results handed on
in ``after`` order, a failed step stops what comes after it until it is
re-run, graphs nested in chains and groups and the other way round, a
continuation handled twice changes nothing, the checks made when a graph is
frozen, and random graphs — on every backend where a worker runs (memory on
the virtual clock; Redis, PostgreSQL and SQLite for real)."""

from __future__ import annotations

import collections
import random
import re
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import (
    App,
    Dag,
    Graph,
    JobContext,
    JobFailed,
    JobState,
    MemoryStore,
    QueueWeight,
    SkipRetry,
    chain,
    graph,
    group,
)
from chronos_trio.actors import continuer
from chronos_trio.records import DagStep
from chronos_trio.records._flow_build import predecessors, start
from chronos_trio.records._workflow import MAX_CONTINUATION_BYTES, advance, describe
from chronos_trio.store import SettleKind, Settlement
from tests._backends import Backend


@attrs.define
class Recorder:
    """An app whose tasks note every run: when it started and finished (the
    store's clock is the test's), and what it was given."""

    app: App
    runs: collections.Counter[str] = attrs.field(factory=collections.Counter)
    given: dict[str, Any] = attrs.field(factory=dict)
    started: dict[str, float] = attrs.field(factory=dict)
    finished: dict[str, float] = attrs.field(factory=dict)
    broken: set[str] = attrs.field(factory=set)


def recorder(store: Any) -> Recorder:
    app = App(store)
    rec = Recorder(app)

    async def note(job: JobContext, payload: Any, pause: float = 0.0) -> None:
        rec.runs[job.id] += 1
        rec.given[job.id] = payload
        rec.started.setdefault(job.id, trio.current_time())
        if pause:
            await trio.sleep(pause)
        if job.id in rec.broken:
            raise SkipRetry(f"{job.id} is broken")
        rec.finished[job.id] = trio.current_time()

    @app.task("num")
    async def num(payload: int, job: JobContext) -> int:
        await note(job, payload)
        return payload

    @app.task("inc")
    async def inc(payload: int, job: JobContext) -> int:
        await note(job, payload)
        return payload + 1

    @app.task("slow")
    async def slow(payload: list[int], job: JobContext) -> int:
        # sleeps payload[0] tenths of a second, returns payload[1]
        await note(job, payload, payload[0] / 10)
        return payload[1]

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        await note(job, payload)
        return sum(payload)

    @app.task("pair")
    async def pair(payload: list[Any], job: JobContext) -> list[Any]:
        await note(job, payload)
        return payload

    @app.task("text")
    async def text(payload: str, job: JobContext) -> None:
        await note(job, payload)

    @app.task("any")
    async def any_(payload: Any, job: JobContext) -> Any:
        await note(job, payload, 0.0)
        return [job.id, payload]

    return rec


def t(rec: Recorder, kind: str) -> Any:
    return rec.app.tasks[kind]


def diamond(rec: Recorder) -> Graph:
    num, inc, total = t(rec, "num"), t(rec, "inc"), t(rec, "total")
    g = graph()
    g.add("fetch", num.s(7))
    g.add("resize", inc.s(), after="fetch")
    g.add("thumb", inc.s(), after=["fetch"])
    g.add("publish", total.s(), after=["thumb", "resize"])
    return g


async def test_a_diamond_runs_each_step_once_and_joins_in_after_order(
    backend: Backend, clock: object
) -> None:
    rec = recorder(backend.store())
    async with rec.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await rec.app.enqueue_workflow(diamond(rec), workflow_id="img-1")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=15) == 16
    assert rec.runs == {f"img-1.{n}": 1 for n in ("fetch", "resize", "thumb", "publish")}
    assert rec.given["img-1.resize"] == rec.given["img-1.thumb"] == 7
    assert rec.given["img-1.publish"] == [8, 8]
    for before in ("img-1.resize", "img-1.thumb"):
        assert rec.finished[before] <= rec.started["img-1.publish"]
    assert started.final is not None and started.final.job_id == "img-1.publish"
    assert started.waits_on["img-1.publish"] == ("img-1.thumb", "img-1.resize")
    # started again with the same ID: the same run, nothing runs twice
    again = await rec.app.enqueue_workflow(diamond(rec), workflow_id="img-1")
    assert await again.result(timeout=5) == 16
    assert set(rec.runs.values()) == {1}


@pytest.mark.parametrize("order", ["first-last", "last-first"])
async def test_a_join_gets_its_inputs_in_after_order_whichever_finishes_first(
    order: str, autojump_clock: object
) -> None:
    rec = recorder(MemoryStore())
    slow, pair = t(rec, "slow"), t(rec, "pair")
    fast_a = order == "first-last"
    g = graph()
    g.add("join", pair.s(), after=["a", "b", "c"])  # added before the steps it names
    g.add("a", slow.s([1 if fast_a else 30, 100]))
    g.add("b", slow.s([15, 200]))
    g.add("c", slow.s([30 if fast_a else 1, 300]))
    async with rec.app.open_worker(poll_interval=0.5, concurrency=4):
        started = await rec.app.enqueue_workflow(g, workflow_id="j")
        with trio.fail_after(60):
            assert await started.result(timeout=30) == [100, 200, 300]
    finish = sorted(("a", "b", "c"), key=lambda n: rec.finished[f"j.{n}"])
    assert finish == (["a", "b", "c"] if fast_a else ["c", "b", "a"])
    assert rec.started["j.join"] >= max(rec.finished[f"j.{n}"] for n in "abc")
    assert rec.runs["j.join"] == 1


async def test_a_wide_fan_out_and_fan_in(backend: Backend, clock: object) -> None:
    rec = recorder(backend.store())
    num, inc, total = t(rec, "num"), t(rec, "inc"), t(rec, "total")
    width = backend.pick(memory=200, redis=40)
    g = graph().add("root", num.s(1))
    for k in range(width):
        g.add(f"w{k}", inc.s(), after="root")
    g.add("sum", total.s(), after=[f"w{k}" for k in reversed(range(width))])
    async with rec.app.open_worker(**backend.timing(poll_interval=0.5), concurrency=16):
        started = await rec.app.enqueue_workflow(g, workflow_id="wide")
        with trio.fail_after(backend.pick(memory=120, redis=40)):
            assert await started.result(timeout=30) == 2 * width
    assert len(rec.runs) == width + 2 and set(rec.runs.values()) == {1}
    assert rec.given["wide.sum"] == [2] * width


async def test_several_sinks_give_their_results_in_the_order_added(
    backend: Backend, clock: object
) -> None:
    rec = recorder(backend.store())
    num, inc, slow = t(rec, "num"), t(rec, "inc"), t(rec, "slow")
    g = graph()
    g.add("late", slow.s([5, 1]))
    g.add("base", num.s(10))
    g.add("plus", inc.s(), after="base")
    async with rec.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await rec.app.enqueue_workflow(g, workflow_id="sinks")
        assert started.final is None and [h.job_id for h in started.sinks] == [
            "sinks.late",
            "sinks.plus",
        ]
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=15) == [1, 11]


async def test_graphs_nest_in_chains_and_groups_and_the_other_way_round(
    backend: Backend, clock: object
) -> None:
    rec = recorder(backend.store())
    num, inc, total, pair = t(rec, "num"), t(rec, "inc"), t(rec, "total"), t(rec, "pair")
    # a graph of two sinks inside a chain: its roots take the step before's
    # result, what follows takes the sinks' results as a list
    inner = graph().add("x", inc.s()).add("y", inc.s()).add("z", inc.s(), after="y")
    # a graph whose steps are a chain, a group and a graph
    sub = graph().add("p", num.s(100)).add("q", inc.s(), after="p")
    outer = graph()
    outer.add("c", chain(num.s(1), inc.s()))
    outer.add("g", group(inc.s(), inc.s()), after="c")
    outer.add("s", sub)
    outer.add("end", pair.s(), after=["g", "s"])
    flow = chain(num.s(5), inner, total.s(), inc.s())
    async with rec.app.open_worker(**backend.timing(poll_interval=0.5)):
        first = await rec.app.enqueue_workflow(flow, workflow_id="n1")
        second = await rec.app.enqueue_workflow(group(outer, num.s(9)), workflow_id="n2")
        with trio.fail_after(backend.pick(memory=60, redis=30)):
            assert await first.result(timeout=20) == (6 + 7) + 1
            end = second.final or (await _wait_job(rec, "n2.0.end"))
            assert await end.result(timeout=20) == [[3, 3], 101]
    assert rec.given["n1.1.x"] == rec.given["n1.1.y"] == 5
    assert rec.given["n1.2"] == [6, 7]
    assert set(rec.runs.values()) == {1}
    assert "n2.0.g.0" in rec.runs and "n2.0.s.q" in rec.runs


async def _wait_job(rec: Recorder, job_id: str) -> Any:
    while await rec.app.store.get_job(job_id) is None:
        await trio.sleep(0.05)
    return rec.app.job(job_id)


async def test_a_failed_step_stops_what_comes_after_it_until_it_is_run_again(
    backend: Backend, clock: object
) -> None:
    rec = recorder(backend.store())
    rec.broken.add("img-1.thumb")
    async with rec.app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await rec.app.enqueue_workflow(diamond(rec), workflow_id="img-1")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            with pytest.raises(JobFailed) as failed:
                await started.result(timeout=15)
            assert failed.value.job_id == "img-1.thumb"
            while rec.runs["img-1.resize"] == 0:
                await trio.sleep(0.1)
            await trio.sleep(1.0)
            # the other branch ran; the join has nothing to run on yet
            assert await rec.app.store.get_job("img-1.publish") is None
            rec.broken.clear()
            assert await rec.app.store.run_now("img-1.thumb")
            assert await started.result(timeout=15) == 16
    assert rec.runs["img-1.thumb"] == 2 and rec.runs["img-1.publish"] == 1
    assert rec.runs["img-1.resize"] == 1 and rec.runs["img-1.fetch"] == 1


async def test_a_continuation_handled_twice_changes_nothing(autojump_clock: object) -> None:
    store = MemoryStore()
    rec = recorder(store)
    started = await rec.app.enqueue_workflow(diamond(rec), workflow_id="twice")

    async def settle_ready(result: bytes) -> None:
        leased = (
            await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
        ).jobs
        await store.settle(
            [
                Settlement(lj.ref, SettleKind.SUCCEEDED, result=result, result_ttl=60)
                for lj in leased
            ]
        )

    await settle_ready(b"7")  # fetch
    batch = await store.continuations(["default"], 10)
    assert [c.job_id for c in batch] == ["twice.fetch"]
    for entries in (batch, batch):  # a continuer that died before finishing its batch
        await continuer._continue(store, entries)
    await store.finish_continuations(batch)
    ready = sorted(j.id for j in await store.list_jobs("default", JobState.READY))
    assert ready == ["twice.resize", "twice.thumb"]
    await settle_ready(b"8")  # resize and thumb
    batch = await store.continuations(["default"], 10)
    assert len(batch) == 2
    # each arrival handled twice, in either order: one join, one publish
    await continuer._continue(store, batch)
    await continuer._continue(store, batch[::-1])
    await continuer._continue(store, batch[:1])
    await store.finish_continuations(batch)
    publish = [j for j in await store.list_jobs("default", JobState.READY) if j.kind == "total"]
    assert [j.id for j in publish] == ["twice.publish"]
    assert publish[0].payload == b"[8,8]"
    async with rec.app.open_worker(poll_interval=0.5):
        with trio.fail_after(60):
            assert await started.result(timeout=30) == 16
    assert rec.runs["twice.publish"] == 1


def test_a_graph_is_checked_when_it_is_frozen() -> None:
    rec = recorder(MemoryStore())
    num, inc, total, text = t(rec, "num"), t(rec, "inc"), t(rec, "total"), t(rec, "text")
    g = graph().add("a", num.s(1))
    for bad in ("", "a.b", "a b", "x" * 65, "é"):
        with pytest.raises(ValueError, match="bad graph step name"):
            g.add(bad, inc.s(), after="a")
    with pytest.raises(TypeError, match="name is a string"):
        g.add(3, inc.s())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already has a step named 'a'"):
        g.add("a", inc.s())
    with pytest.raises(ValueError, match="cannot come after itself"):
        g.add("b", inc.s(), after=["b"])
    with pytest.raises(ValueError, match="names a step twice"):
        g.add("b", total.s(), after=["a", "a"])
    with pytest.raises(TypeError, match="must be a step"):
        g.add("b", "inc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes step names"):
        g.add("b", inc.s(), after=[1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="cannot be a step of itself"):
        g.add("b", g)
    assert len(g) == 1 and "a" in g and "b" not in g, "a refused add changes nothing"
    loop = graph().add("x", num.s(1))
    loop.add("y", graph().add("z", loop), after="x")
    with pytest.raises(ValueError, match="cannot be a step of itself"):
        loop.freeze()
    with pytest.raises(ValueError, match="at least one step"):
        graph().freeze()
    # names that come later are fine until the graph is frozen
    g.add("c", inc.s(), after="b")
    with pytest.raises(ValueError, match="comes after 'b', which the graph does not have"):
        g.freeze()
    g.add("b", inc.s(), after="d").add("d", inc.s(), after="c")
    cycles = "b -> c -> d -> b|c -> d -> b -> c|d -> b -> c -> d"
    with pytest.raises(ValueError, match=f"a graph has a cycle .*: ({cycles})"):
        g.freeze()
    with pytest.raises(ValueError, match="cycle"):
        chain(num.s(1), g)  # a chain freezes the graph it is given
    # payload types, as chain checks them: one input is its result, several a list
    with pytest.raises(TypeError, match="graph step 'j': 'inc' takes a int payload"):
        graph().add("a", num.s(1)).add("b", num.s(2)).add("j", inc.s(), after=["a", "b"]).freeze()
    with pytest.raises(TypeError, match=r"graph step 'n': .*keeps none"):
        graph().add("a", text.s("x")).add("n", inc.s(), after="a").freeze()
    graph().add("a", num.s(1)).add("b", num.s(2)).add("j", total.s(), after=["a", "b"]).freeze()
    # a graph after a step: its roots take that step's result
    with pytest.raises(TypeError, match="'total' takes a list\\[int\\] payload"):
        chain(num.s(1), graph().add("r", total.s()))
    assert isinstance(graph().add("a", num.s(1)).freeze(), Dag)


async def test_a_graph_that_cannot_start_is_refused_before_anything_is_stored(
    autojump_clock: object,
) -> None:
    store = MemoryStore()
    rec = recorder(store)
    num, inc = t(rec, "num"), t(rec, "inc")
    with pytest.raises(TypeError, match="graph step 'r' \\('inc'\\) starts the workflow"):
        await rec.app.enqueue_workflow(graph().add("r", inc.s()), workflow_id="x")
    # every step carries the graph: one too big for a continuation is refused whole
    big = graph().add("root", num.s(1))
    for k in range(MAX_CONTINUATION_BYTES // 100):
        big.add(f"step-{k:04}", inc.s(), after="root")
    with pytest.raises(ValueError, match="continuation is over"):
        await rec.app.enqueue_workflow(big, workflow_id="y")
    # a Dag made by hand, not by Graph.freeze, is checked as well
    made = [
        DagStep("r", num.s(1), ()),
        DagStep("a", inc.s(), ("b",)),
        DagStep("b", inc.s(), ("a",)),
    ]
    with pytest.raises(ValueError, match="cycle"):
        await rec.app.enqueue_workflow(Dag(tuple(made)), workflow_id="z")
    with pytest.raises(ValueError, match="does not have"):
        await rec.app.enqueue_workflow(Dag((made[0], made[1])), workflow_id="z")
    with pytest.raises(ValueError, match="two steps alike"):
        await rec.app.enqueue_workflow(Dag((made[0], made[0])), workflow_id="z")
    with pytest.raises(ValueError, match="at least one step"):
        await rec.app.enqueue_workflow(Dag(()), workflow_id="z")
    assert await store.list_jobs("default", JobState.READY) == []


async def test_a_job_shows_what_comes_after_it_in_its_graph(autojump_clock: object) -> None:
    from chronos_trio.cli._output import job_details

    store = MemoryStore()
    rec = recorder(store)
    inc = t(rec, "inc")
    g = diamond(rec).add("extra", inc.s(), after="publish")
    await rec.app.enqueue_workflow(chain(t(rec, "num").s(0), g, inc.s()), workflow_id="w")
    first = await store.get_job("w.0")
    assert first is not None and first.then is not None
    assert describe(first.then) == "graph w.1 of 5 steps -> inc (w.2)"
    await rec.app.enqueue_workflow(diamond(rec), workflow_id="d")
    fetch = await store.get_job("d.fetch")
    assert fetch is not None and fetch.then is not None
    assert describe(fetch.then) == "graph d after fetch: inc (d.resize); inc (d.thumb)"
    assert describe(fetch.then) in job_details(fetch, 0.0)
    resize = next(j for j in advance(fetch.then, b"7").jobs if j.id == "d.resize")
    assert resize.then is not None and describe(resize.then) == (
        "graph d after resize: total (d.publish) once its 2 inputs are in (this is input 1)"
    )
    # a sink hands on to what follows the graph
    sink = (
        '{"dag":{"id":"g","steps":[{"name":"a","after":[]}]},"done":"a",'
        '"after":{"seq":[{"job":{"id":"n","kind":"k"}}]}}'
    )
    assert describe(sink) == "k (n)"
    assert describe('{"dag":{"id":"g"},"done":"a"}').startswith("a damaged")


def test_a_step_carries_only_what_can_still_run_after_it() -> None:
    import json

    rec = recorder(MemoryStore())
    num, inc, total = t(rec, "num"), t(rec, "inc"), t(rec, "total")
    g = graph().add("root", num.s(1)).add("other", num.s(2))
    for k in range(50):
        g.add(f"w{k}", inc.s(), after="root")
    g.add("sum", total.s(), after=[f"w{k}" for k in range(50)]).add("last", inc.s(), after="sum")
    roots = start(chain(g, total.s()), "f").jobs
    assert [j.id for j in roots] == ["f.0.root", "f.0.other"]
    carried = {j.id[4:]: json.loads(j.then or "")["dag"] for j in roots}
    assert len(carried["root"]["steps"]) == 53, "itself, the 50, sum and last"
    assert "node" not in carried["root"]["steps"][0], "its own node: it runs now"
    assert [s["name"] for s in carried["other"]["steps"]] == ["other"]
    assert carried["root"]["sinks"] == ["other", "last"], "they join for total"
    alone = json.loads(start(g.freeze(), "a").jobs[0].then or "")["dag"]
    assert "sinks" not in alone, "nothing follows the graph: its sinks join nothing"
    fanned = advance(roots[0].then or "", b"1").jobs
    assert len(fanned) == 50
    w7 = json.loads(fanned[7].then or "")["dag"]
    assert [s["name"] for s in w7["steps"]] == ["w7", "sum", "last"]
    assert len(fanned[7].then or "") < len(roots[0].then or "") / 5


async def test_a_damaged_graph_continuation_stops_only_its_flow(autojump_clock: object) -> None:
    for damaged in (
        '{"dag":{"id":"g","steps":[]},"done":"nope"}',
        '{"dag":{"id":"g","steps":[{"name":"a","after":["b"]}]},"done":"b"}',
        '{"dag":{"id":"g"},"run":"a"}',
    ):
        with pytest.raises(ValueError, match="damaged workflow continuation"):
            advance(damaged, b"1")


async def test_every_step_of_a_graph_carries_the_flows_headers(autojump_clock: object) -> None:
    store = MemoryStore()
    rec = recorder(store)
    hooked: list[str] = []

    @rec.app.producer_hook
    def trace(kind: str, headers: dict[str, str]) -> None:
        hooked.append(kind)
        headers["trace"] = "t-1"

    g = diamond(rec).add("after", t(rec, "inc").s(), after="publish")
    async with rec.app.open_worker(poll_interval=0.5):
        started = await rec.app.enqueue_workflow(chain(g, t(rec, "inc").s()), workflow_id="h")
        with trio.fail_after(60):
            assert await started.result(timeout=30) == 18
    assert hooked == ["num"], "the hooks run once per workflow"
    for job_id in rec.runs:
        job = await store.get_job(job_id)
        assert job is not None and job.headers == (("trace", "t-1"),), job_id
    assert len(rec.runs) == 6


async def test_a_graph_runs_in_eager_mode() -> None:
    from chronos_trio.testing import eager

    rec = recorder(MemoryStore())
    with eager(rec.app):
        started = await rec.app.enqueue_workflow(diamond(rec), workflow_id="e")
        assert await started.result(timeout=5) == 16
    assert rec.given["e.publish"] == [8, 8] and set(rec.runs.values()) == {1}


# -- randomized ------------------------------------------------------------------------
def _random_graph(rng: random.Random, step: Any, size: int) -> tuple[Graph, dict[str, list[str]]]:
    """A random graph of ``size`` steps (added in a shuffled order); its edges."""
    names = [f"s{k}" for k in range(size)]
    after: dict[str, list[str]] = {}
    for k, name in enumerate(names):
        earlier = names[:k]
        after[name] = rng.sample(earlier, rng.randint(0, min(3, k))) if earlier else []
    needed = {d for deps in after.values() for d in deps}
    g = graph()
    for name in rng.sample(names, size):
        deps = after[name]
        if not deps:
            g.add(name, step.s(name))
        elif name in needed and rng.random() < 0.25:
            # a step that is a chain or a group of its own (not a sink: the
            # flow's result is its sinks' steps' results)
            part = chain(step.s(), step.s()) if rng.random() < 0.5 else group(step.s(), step.s())
            g.add(name, part, after=deps)
        else:
            g.add(name, step.s(), after=deps)
    return g, after


@pytest.mark.parametrize("seed", range(16))
async def test_random_graphs_run_each_step_once_after_all_it_comes_after(
    seed: int, autojump_clock: object
) -> None:
    await _random_graph_run(seed, MemoryStore(), {"poll_interval": 0.5}, 0.5)


@pytest.mark.parametrize("seed", [100, 101])
async def test_random_graphs_on_a_real_store(seed: int, backend: Backend, clock: object) -> None:
    if backend.virtual:
        pytest.skip("the memory store runs the 16 seeds above")
    await _random_graph_run(seed, backend.store(), backend.timing(poll_interval=0.5), 0.05)


async def _random_graph_run(seed: int, store: Any, timing: dict[str, Any], longest: float) -> None:
    """A random graph (steps after up to 3 others, some of them chains or
    groups, about 15% failing once and re-run): each job runs once, after
    every job of each step it comes after; the result follows the sinks."""
    rng = random.Random(seed)
    app = App(store)
    started_at: dict[str, float] = {}
    finished_at: dict[str, float] = {}
    succeeded: collections.Counter[str] = collections.Counter()
    fail_once: set[str] = set()
    given: dict[str, Any] = {}

    @app.task("step")
    async def step(payload: Any, job: JobContext) -> Any:
        started_at.setdefault(job.id, trio.current_time())
        given[job.id] = payload
        await trio.sleep(rng.random() * longest)
        if job.id in fail_once:
            fail_once.discard(job.id)
            raise SkipRetry("injected failure")
        finished_at[job.id] = trio.current_time()
        succeeded[job.id] += 1
        return [job.id, payload]

    g, after = _random_graph(rng, step, rng.randint(2, 24))
    dag = g.freeze()
    waits = predecessors(dag, "wf")
    fail_once.update(j for j in waits if rng.random() < 0.15)
    injected = set(fail_once)
    async with app.open_worker(**timing, concurrency=8):
        started = await app.enqueue_workflow(g, workflow_id="wf")
        with trio.fail_after(600 if longest > 0.1 else 60):
            while not all(succeeded[j] for j in waits):
                await trio.sleep(longest * 2)
                for job_id in injected:
                    found = await store.get_job(job_id)
                    if found is not None and found.state is JobState.DEAD:
                        assert await store.run_now(job_id)  # re-run the failed step
            result = await started.result(timeout=60)
    assert succeeded == collections.Counter(dict.fromkeys(waits, 1)), "each step once"
    # every job starts after every job of each step it comes after
    steps_jobs: dict[str, list[str]] = collections.defaultdict(list)
    for job_id in waits:
        steps_jobs[job_id.split(".")[1]].append(job_id)
    for name, deps in after.items():
        for job_id in steps_jobs[name]:
            for dep in deps:
                for earlier in steps_jobs[dep]:
                    assert finished_at[earlier] <= started_at[job_id], f"{job_id} before {earlier}"
    for job_id, before in waits.items():
        for earlier in before:
            assert finished_at[earlier] <= started_at[job_id]

    # a step got the result of the step it comes after, or their results in
    # its after order (a group's result: its members', a list)
    def origin(result: Any) -> str:
        return str(result[0]).split(".")[1] if isinstance(result[0], str) else origin(result[0])

    for name, deps in after.items():
        payload = given[f"wf.{name}"] if f"wf.{name}" in given else None
        if payload is None or not deps:
            continue  # a chain or a group: its own jobs, checked by order above
        assert ([origin(payload)] if len(deps) == 1 else [origin(r) for r in payload]) == deps
    sinks = [s.name for s in dag.steps if not any(s.name in o.after for o in dag.steps)]
    if len(sinks) == 1:
        assert result[0].startswith(f"wf.{sinks[0]}")
    else:
        assert [r[0].split(".")[1] for r in result] == sinks


# -- kill -9 (worker processes on Redis) ------------------------------------------------
def _process_graph(member: Any, callback: Any) -> Graph:
    """A diamond of three, joined, then a second join: tests_app's
    ``wf_callback`` records ``<job id> <sum>`` for j (3) and z (6)."""
    g = graph().add("a", member.s(1))
    for name in "bcd":
        g.add(name, member.s(), after="a")
    g.add("j", callback.s(), after=["b", "c", "d"])
    g.add("e", member.s(), after="j")
    return g.add("z", callback.s(), after=["j", "e"])


@pytest.mark.redis
async def test_kill_9_mid_graph_runs_every_join_exactly_once(redis_url: str, tmp_path: Any) -> None:
    """Graphs across two worker processes, one killed with kill -9 while it
    holds leases: every join is made once and runs with every input; one
    the victim ran but had not settled runs again elsewhere (at least once
    execution), never twice outside it."""
    import os
    import signal

    import redis

    from chronos_trio.cli import EXIT_OK
    from tests.test_process_e2e import DUPLICATE_WINDOW, Manager, leased_by
    from tests.tests_app import make_app

    flows = 30
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    inspector = producer.inspector()
    client = redis.Redis.from_url(redis_url)
    g = _process_graph(producer.tasks["tests.wf_member"], producer.tasks["tests.wf_callback"])
    try:
        with trio.fail_after(120):
            victim = (await manager.wait_ready())[0]
            for i in range(flows):
                await producer.enqueue_workflow(g, workflow_id=f"g{i}")
            while True:  # kill it mid-flight: some steps done, leases held
                held = await leased_by(inspector, victim)
                if held and client.llen("wf:done") >= 50:
                    break
                await trio.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            while client.llen("wf:callbacks") < 2 * flows:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    expected = {line: 1 for i in range(flows) for line in (f"g{i}.j 3", f"g{i}.z 6")}
    fired = collections.Counter(x.decode() for x in client.lrange("wf:callbacks", 0, -1))
    # every join ran with every input (its sum), and none ran more than once
    # outside the victim: a join the victim ran but had not settled when it
    # was killed runs again (at least once), never a second join made
    assert set(fired) == set(expected), "each join with every input"
    runs = [x.decode().split() for x in client.lrange("wf:callback_pids", 0, -1)]
    survivors = collections.Counter(job for job, pid in runs if pid != str(victim))
    on_victim = collections.Counter(job for job, pid in runs if pid == str(victim))
    for line in expected:
        job = line.split()[0]
        assert survivors[job] + on_victim[job] >= 1, job
        assert survivors[job] <= 1, f"{job} ran twice after the kill: {runs}"
        assert on_victim[job] <= 1, f"{job} ran twice in the victim: {runs}"
    done = {x.decode().split()[0] for x in client.lrange("wf:done", 0, -1)}
    assert done == {f"g{i}.{n}" for i in range(flows) for n in "abcde"}
    assert f"worker process exited index=0 pid={victim} code=-9" in manager.log()


@pytest.mark.redis
@pytest.mark.parametrize("target", ["gk.a", "gk.c", "gk.j"])
async def test_kill_9_in_the_continuer_after_it_continued_a_graph_step(
    target: str, redis_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A continuer enqueues what follows a graph step (a fan-out, a join
    arrival, a join's step) and dies with kill -9 before it removes the
    outbox entry: another continuer handles the entry again, and every step
    and join still runs once."""
    import signal

    import redis

    from chronos_trio.cli import EXIT_OK
    from tests.test_process_e2e import DUPLICATE_WINDOW, Manager
    from tests.tests_app import make_app

    monkeypatch.setenv("WF_KILL_IN_CONTINUER", target)
    monkeypatch.setenv("WF_KILL_CONTINUED", "1")
    monkeypatch.setenv("WF_KILL_MARK", str(tmp_path / "killed"))
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    client = redis.Redis.from_url(redis_url)
    g = _process_graph(producer.tasks["tests.wf_member"], producer.tasks["tests.wf_callback"])
    try:
        with trio.fail_after(90):
            await manager.wait_ready()
            await producer.enqueue_workflow(g, workflow_id="gk")
            while client.llen("wf:callbacks") < 2:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    fired = sorted(x.decode() for x in client.lrange("wf:callbacks", 0, -1))
    # a join the killed process had leased (made by its continuer, leased in
    # the round trip before the kill) runs again after its lease: at least
    # once; a join run twice is allowed only when one run was the victim's
    log = manager.log()
    killed = {m.split("=")[1] for m in re.findall(r"pid=\d+(?= code=-9)", log)}
    pids = collections.defaultdict(list)
    for x in client.lrange("wf:callback_pids", 0, -1):
        job_id, pid = x.decode().split()
        pids[job_id].append(pid)
    for job_id, where in pids.items():
        assert len(where) == 1 or (len(where) == 2 and where[0] in killed), (job_id, where)
    assert sorted(set(fired)) == ["gk.j 3", "gk.z 6"]
    ran = collections.Counter(x.decode().split()[0] for x in client.lrange("wf:done", 0, -1))
    # a step the killed process held runs again (at least once); the joins,
    # whose arrivals the redrain repeated, ran once
    assert set(ran) == {f"gk.{n}" for n in "abcde"}
    assert "code=-9" in manager.log(), "a continuer died with the entry in hand"
    assert (tmp_path / "killed").exists()
