"""Workflows end to end (issue 14): chains pass results, groups hand their
members' results in member order to what follows, nesting, a failed step
stops its flow until it is re-run, and a continuation handled twice (a
continuer that died before removing its outbox entry) changes nothing — on
memory (virtual clock) and Redis. The store rules are in the conformance
suite (``check_continuations_*``, ``check_a_group_*``)."""

from __future__ import annotations

import collections
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobState, MemoryStore, SkipRetry, chain, group
from chronos_trio.actors import continuer
from tests._backends import Backend


@attrs.frozen
class Order:
    id: int
    amount: int


def flow_app(store: Any) -> tuple[App, collections.Counter[str], list[tuple[str, Any]]]:
    app = App(store)
    runs: collections.Counter[str] = collections.Counter()
    seen: list[tuple[str, Any]] = []
    broken: set[int] = set()
    app.broken = broken  # type: ignore[attr-defined]

    @app.task("add")
    async def add(payload: int, job: JobContext) -> int:
        runs[job.id] += 1
        seen.append(("add", payload))
        if payload in broken:
            raise SkipRetry(f"{payload} is broken")
        return payload + 1

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        runs[job.id] += 1
        seen.append(("total", payload))
        return sum(payload)

    @app.task("flat")
    async def flat(payload: list[Any], job: JobContext) -> int:
        runs[job.id] += 1
        seen.append(("flat", payload))

        def total_of(x: Any) -> int:
            return sum(map(total_of, x)) if isinstance(x, list) else int(x)

        return total_of(payload)

    @app.task("price")
    async def price(payload: Order, job: JobContext) -> int:
        runs[job.id] += 1
        return payload.amount

    @app.task("log")
    async def log_(payload: str, job: JobContext) -> None:
        runs[job.id] += 1
        seen.append(("log", payload))

    return app, runs, seen


def t(app: App, kind: str) -> Any:
    return app.tasks[kind]


async def test_a_chain_passes_results_and_a_chord_gets_them_in_order(
    backend: Backend, clock: object
) -> None:
    app, runs, seen = flow_app(backend.store())
    add, total = t(app, "add"), t(app, "total")
    flow = chain(add.s(1), add.s(), group(add.s(), add.s(10), add.s(100)), total.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(flow)
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 4 + 11 + 101
    assert seen[:2] == [("add", 1), ("add", 2)]
    assert sorted(seen[2:5]) == [("add", 3), ("add", 10), ("add", 100)]
    assert seen[5] == ("total", [4, 11, 101]), "member order, not finishing order"
    assert set(runs.values()) == {1} and len(runs) == 6
    assert started.final is not None and started.final.job_id == f"{started.id}.3"


async def test_workflows_nest(backend: Backend, clock: object) -> None:
    app, runs, seen = flow_app(backend.store())
    add, flat = t(app, "add"), t(app, "flat")
    # a group whose members are a chain and a group (of a chain and a step)
    inner = group(chain(add.s(5), add.s()), add.s(20))
    flow = chain(group(chain(add.s(1), add.s(), add.s()), inner), flat.s(), add.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(flow)
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            # member 0: 1 -> 2 -> 3 -> 4; member 1: [7, 21], handed on as a list
            assert await started.result(timeout=20) == 4 + 7 + 21 + 1
    assert ("flat", [4, [7, 21]]) in seen
    assert set(runs.values()) == {1} and len(runs) == 8


async def test_a_failed_step_stops_its_flow_until_it_is_run_again(
    backend: Backend, clock: object
) -> None:
    app, runs, _ = flow_app(backend.store())
    add = t(app, "add")
    app.broken.add(2)  # type: ignore[attr-defined]
    flow = chain(add.s(1), add.s(), add.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(flow, workflow_id="wf-stop")
        failed = app.job("wf-stop.1")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            while (await _state(failed)) is not JobState.DEAD:
                await trio.sleep(0.1)
            await trio.sleep(1.0)
            assert await app.store.get_job("wf-stop.2") is None, "nothing after the dead step"
            app.broken.clear()  # type: ignore[attr-defined]
            assert await app.store.run_now("wf-stop.1")
            assert await started.result(timeout=20) == 4
    assert runs["wf-stop.0"] == 1 and runs["wf-stop.1"] == 2 and runs["wf-stop.2"] == 1


async def _state(handle: Any) -> JobState | None:
    try:
        return (await handle.status()).state
    except Exception:
        return None


async def test_a_continuation_handled_twice_changes_nothing(autojump_clock: object) -> None:
    store = MemoryStore()
    app, runs, _ = flow_app(store)
    add, total = t(app, "add"), t(app, "total")
    flow = chain(group(add.s(1), add.s(2)), total.s(), add.s())
    started = await app.enqueue_workflow(flow, workflow_id="twice")
    leased = (
        await store.lease(
            [__import__("chronos_trio").QueueWeight("default")],
            10,
            worker_id="w",
            lease_duration=30,
        )
    ).jobs
    from chronos_trio.store import SettleKind, Settlement

    await store.settle(
        [
            Settlement(lj.ref, SettleKind.SUCCEEDED, result=str(lj.job.payload[0] - 47).encode(),
                       result_ttl=60)
            for lj in leased
        ]
    )  # fmt: skip
    batch = await store.continuations(["default"], 10)
    assert len(batch) == 2
    # a continuer that died before finishing its batch: the next does it all again
    await continuer._continue(store, batch)
    await continuer._continue(store, batch)
    await continuer._continue(store, batch[::-1])
    await store.finish_continuations(batch)
    callbacks = [j for j in await store.list_jobs("default", JobState.READY) if j.kind == "total"]
    assert [j.id for j in callbacks] == ["twice.1"], "one callback, however often it is handled"
    assert callbacks[0].payload == b"[2,3]"
    async with app.open_worker(poll_interval=0.5):
        with trio.fail_after(60):
            assert await started.result(timeout=30) == 6
    assert runs["twice.1"] == 1 and runs["twice.2"] == 1


def test_a_workflow_is_checked_when_it_is_built() -> None:
    app, _, _ = flow_app(MemoryStore())
    add, total, price, log = t(app, "add"), t(app, "total"), t(app, "price"), t(app, "log")
    with pytest.raises(TypeError, match="'price' takes a Order payload"):
        chain(add.s(1), price.s())
    with pytest.raises(TypeError, match="keeps none"):
        chain(log.s("x"), add.s())
    with pytest.raises(TypeError, match="'add' takes a int payload"):
        chain(group(add.s(1), add.s(2)), add.s())
    chain(log.s("x"), add.s(1))  # a payload of its own: fine
    chain(group(add.s(1)), total.s())

    @app.task("evens")
    async def evens(payload: int, job: JobContext) -> list[int]:
        return list(range(0, payload, 2))

    @app.task("names")
    async def names(payload: list[str], job: JobContext) -> None:
        pass

    # a generic result feeds a step taking the same generic type, or the bare
    # type, or its abstract base with the same arguments; not other arguments
    chain(evens.s(6), total.s())
    chain(evens.s(6), t(app, "flat").s())
    with pytest.raises(TypeError, match="'names' takes a list\\[str\\] payload"):
        chain(evens.s(6), names.s())
    with pytest.raises(ValueError, match="at least one"):
        chain()
    with pytest.raises(ValueError, match="at least one"):
        group()


# -- randomized ------------------------------------------------------------------------
def _random_flow(rng: Any, step: Any, depth: int = 0) -> Any:
    shapes = ["chain", "group"] if depth == 0 else ["step", "step", "chain", "group"]
    shape = rng.choice(shapes) if depth < 4 else "step"
    if shape == "step":
        # a fixed payload, or (half the time) its predecessor's result
        return step.s(f"s{rng.randrange(10**6)}") if rng.random() < 0.5 else step.s()
    parts = [_random_flow(rng, step, depth + 1) for _ in range(rng.randint(1, 4))]
    return chain(*parts) if shape == "chain" else group(*parts)


def _paths(node: Any, path: str, after: set[str]) -> dict[str, set[str]]:
    """Every job's path and the paths that must have succeeded before it."""
    from chronos_trio.records._flow_build import Chain, FlowStep, Group

    if isinstance(node, FlowStep):
        return {path: set(after)}
    out: dict[str, set[str]] = {}
    if isinstance(node, Group):
        for k, member in enumerate(node.members):
            out.update(_paths(member, f"{path}.{k}", after))
        return out
    assert isinstance(node, Chain)
    before = set(after)
    for k, link in enumerate(node.links):
        part = _paths(link, f"{path}.{k}", before)
        out.update(part)
        before = before | set(part)
    return out


@pytest.mark.parametrize("seed", range(24))
async def test_random_nested_workflows_keep_order_and_run_each_step_once(
    seed: int, autojump_clock: object
) -> None:
    import random

    rng = random.Random(seed)
    store = MemoryStore()
    app = App(store)
    started_at: dict[str, float] = {}
    finished_at: dict[str, float] = {}
    succeeded: collections.Counter[str] = collections.Counter()
    fail_once: set[str] = set()

    @app.task("step")
    async def step(payload: Any, job: JobContext) -> Any:
        started_at.setdefault(job.id, trio.current_time())
        await trio.sleep(rng.random() * 0.5)
        if job.id in fail_once:
            fail_once.discard(job.id)
            raise SkipRetry("injected failure")
        finished_at[job.id] = trio.current_time()
        succeeded[job.id] += 1
        return [job.id, payload]

    flow = chain(_random_flow(rng, step), step.s("end"))  # a final step to wait on
    expected = _paths(flow, "wf", set())
    fail_once.update(p for p in expected if rng.random() < 0.2)
    injected = set(fail_once)
    async with app.open_worker(poll_interval=0.5, concurrency=8):
        started = await app.enqueue_workflow(flow, workflow_id="wf")
        with trio.fail_after(600):
            while not started_done(succeeded, expected):
                await trio.sleep(1.0)
                for job_id in injected:
                    found = await store.get_job(job_id)
                    if found is not None and found.state is JobState.DEAD:
                        assert await store.run_now(job_id)  # re-run the failed step
            final = await started.result(timeout=60)
    assert succeeded == collections.Counter(dict.fromkeys(expected, 1)), "each step once"
    for path, before in expected.items():
        for earlier in before:
            assert finished_at[earlier] <= started_at[path], f"{path} ran before {earlier}"
    assert final[0] == "wf." + str(len(flow.links) - 1)


def started_done(succeeded: collections.Counter[str], expected: dict[str, set[str]]) -> bool:
    return all(succeeded[p] for p in expected)


async def test_a_job_shows_what_waits_behind_it(backend: Backend, clock: object) -> None:
    from chronos_trio.cli._output import job_details, job_json
    from chronos_trio.records._workflow import describe

    app, _, _ = flow_app(backend.store())
    add, total = t(app, "add"), t(app, "total")
    await app.enqueue_workflow(chain(add.s(1), group(add.s(), add.s()), total.s()), workflow_id="w")
    first = await app.store.get_job("w.0")
    assert first is not None and first.then is not None
    waits = "group w.1 of 2 -> total (w.2)"
    assert describe(first.then) == waits
    assert f"then        {waits} (a workflow job: kept 24 h after it succeeds)" in job_details(
        first, 0.0
    )
    assert job_json(first)["then"]["seq"][0]["id"] == "w.1"
    assert describe(None) == "-" and describe("{").startswith("a damaged")
    member = '{"grp":"w.1","i":0,"n":2,"after":{"seq":[{"job":{"id":"w.2","kind":"total"}}]}}'
    assert describe(member) == "member 0 of group w.1 (2 in all) -> total (w.2)"


async def test_waiting_on_a_flow_reports_the_step_that_failed(
    backend: Backend, clock: object
) -> None:
    from chronos_trio import JobFailed, ResultTimeout

    app, _, _ = flow_app(backend.store())
    add = t(app, "add")
    app.broken.add(2)  # type: ignore[attr-defined]
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(chain(add.s(1), add.s(), add.s()), workflow_id="f")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            # the waiter follows the flow step by step: the dead step's error, not a timeout
            with pytest.raises(JobFailed) as failed:
                await started.result(timeout=15)
            assert failed.value.job_id == "f.1"
        slow = await app.enqueue_workflow(chain(add.s(5), add.s(), add.s()), workflow_id="g")
        with pytest.raises(ResultTimeout):
            await slow.result(timeout=0.0)


async def test_a_replayed_entry_does_not_run_the_finished_last_step_again(
    autojump_clock: object,
) -> None:
    """The last step keeps no result (``-> None``), yet its record is kept
    as every workflow job's is: replaying the entry of the step before it
    (a continuer that died before finishing it, found by the next sweep
    after the last step ran) finds the last step's ID taken."""
    store = MemoryStore()
    app = App(store)
    runs: collections.Counter[str] = collections.Counter()

    @app.task("first")
    async def first(n: int, job: JobContext) -> int:
        runs[job.id] += 1
        return n + 1

    @app.task("last")
    async def last(n: int, job: JobContext) -> None:
        runs[job.id] += 1

    started = await app.enqueue_workflow(chain(first.s(1), last.s()), workflow_id="f")
    from chronos_trio import QueueWeight
    from chronos_trio.store import SettleKind, Settlement

    [leased] = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    await store.settle([Settlement(leased.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60)])
    batch = await store.continuations(["default"], 10)
    await continuer._continue(store, batch)  # the last step is made; the entry stays
    async with app.open_worker(poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    kept = await store.get_job("f.1")
    assert kept is not None and kept.state is JobState.SUCCEEDED
    await continuer._continue(store, batch)  # the replay, after the last step ran
    await store.finish_continuations(batch)
    async with app.open_worker(poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    assert runs == {"f.1": 1}, runs
    assert await started.result(timeout=5) is None
