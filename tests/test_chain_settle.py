"""Chain links continued by their own success settle (issue 29, chain
throughput): the worker hands a link's one successor to the settle
(``Settlement.successor``), and a store that ``continues_in_settle`` stores
it in the same fenced step instead of an outbox entry; every other case
(a group, a delayed step, a Cluster, a cancelled workflow) keeps the
outbox path. Memory (virtual clock) and Redis; a Redis Cluster for the
fallback there."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobState, MemoryStore, QueueWeight, chain, group
from chronos_trio.actors import completer, continuer
from chronos_trio.records._jobs import LeasedJob, NewJob
from chronos_trio.records._workflow import chain_successor
from chronos_trio.store import Continuation, SettleKind, Settlement, Store
from tests._backends import Backend


def chain_app(store: Any) -> tuple[App, collections.Counter[str]]:
    app = App(store)
    runs: collections.Counter[str] = collections.Counter()

    @app.task("inc")
    async def inc(payload: int, job: JobContext) -> int:
        runs[job.id] += 1
        return payload + 1

    @app.task("total")
    async def total(payload: list[int], job: JobContext) -> int:
        runs[job.id] += 1
        return sum(payload)

    return app, runs


def continues(store: Store) -> bool:
    """Whether ``store`` continues chains in its settle (the SQL stores keep
    the outbox path: the same tests hold there with it)."""
    return bool(getattr(type(store), "continues_in_settle", False))


def chain_settles(store: Any) -> int:
    if isinstance(store, MemoryStore):
        return store.chain_settles
    if not continues(store):
        return 0
    return int(store.statistics().chain_settles)


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job IDs of the outbox entries the continuer handles."""
    seen: list[str] = []
    handle = continuer._continue

    async def spy(store: Store, batch: list[Continuation]) -> None:
        seen.extend(entry.job_id for entry in batch)
        await handle(store, batch)

    monkeypatch.setattr(continuer, "_continue", spy)
    return seen


async def test_a_chain_is_continued_by_its_settles_not_the_outbox(
    backend: Backend, clock: object, handled: list[str]
) -> None:
    store = backend.store()
    app, runs = chain_app(store)
    inc = app.tasks["inc"]
    flow = chain(inc.s(0), *(inc.s() for _ in range(9)))
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(flow, workflow_id="ten")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 10
            if not continues(store):
                # the last link's entry (its empty continuation) is handled
                # after its result is there: wait for it, so the counts are whole
                while "ten.9" not in handled:
                    await trio.sleep(0.05)
            else:
                await trio.sleep(1.0)  # time for an entry of the last link, were there one
    assert len(runs) == 10 and set(runs.values()) == {1}
    if not continues(store):
        assert sorted(set(handled)) == sorted(f"ten.{k}" for k in range(10))
        return
    assert chain_settles(store) == 9, "every link but the last stored its successor"
    # the last link's continuation asks for nothing: no entry for it either
    assert handled == [], "no outbox entry was written for the chain's links"
    assert await _outbox(store) == []
    # ... and its record is kept as every step's is (its ID stays taken)
    last = await store.get_job("ten.9")
    assert last is not None and last.state is JobState.SUCCEEDED and last.then is not None


async def test_groups_and_delayed_links_keep_the_outbox_path(
    backend: Backend, clock: object, handled: list[str]
) -> None:
    store = backend.store()
    app, runs = chain_app(store)
    inc, total = app.tasks["inc"], app.tasks["total"]
    # 0 -> 1 by the settle; 1 -> the group, its members -> total by the
    # outbox; total -> the delayed link by the outbox; that -> the last by the settle
    flow = chain(inc.s(0), inc.s(), group(inc.s(), inc.s()), total.s(), inc.s(delay=0.5), inc.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = await app.enqueue_workflow(flow, workflow_id="mix")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 3 + 3 + 2
            if not continues(store):
                while "mix.5" not in handled:  # the last step's entry, after its result
                    await trio.sleep(0.05)
            else:
                await trio.sleep(1.0)  # time for an entry of the last step, were there one
    assert len(runs) == 7 and set(runs.values()) == {1}
    if continues(store):
        assert chain_settles(store) == 2
        # the last step's continuation asks for nothing: no entry
        assert sorted(set(handled)) == ["mix.1", "mix.2.0", "mix.2.1", "mix.3"]


async def _first_link(store: Store, app: App, workflow_id: str) -> tuple[LeasedJob, Settlement]:
    """A three-link chain enqueued and its first link leased: the lease and
    its success as the completer sends it (with its successor)."""
    inc = app.tasks["inc"]
    await app.enqueue_workflow(chain(inc.s(1), inc.s(), inc.s()), workflow_id=workflow_id)
    (leased,) = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=30)
    ).jobs
    ok = Settlement(leased.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60)
    sent = completer._successor(leased.job.then, ok)
    assert sent.successor is not None and sent.successor.job.id == f"{workflow_id}.1"
    assert sent.successor.workflow == workflow_id
    return leased, sent


async def _outbox(store: Any) -> list[str]:
    return [c.job_id for c in await store.continuations(["default"], 10)]


async def test_a_stale_token_settles_nothing_and_stores_no_successor(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app, _ = chain_app(store)
    leased, sent = await _first_link(store, app, "fence")
    stale = Settlement(
        attrs.evolve(leased.ref, token="not-the-token"),
        SettleKind.SUCCEEDED,
        result=b"2",
        result_ttl=60,
        successor=sent.successor,
    )
    result = await store.settle([stale])
    assert result.settled == (False,) and not result.continued
    assert await store.get_job("fence.1") is None, "a refused settle stores nothing"
    assert await _outbox(store) == []
    result = await store.settle([sent])
    assert result.settled == (True,)
    if not continues(store):
        assert not result.continued and await _outbox(store) == ["fence.0"]
        return
    assert result.continued == {0}
    made = await store.get_job("fence.1")
    assert made is not None and made.state is JobState.READY and made.payload == b"2"
    assert made.then is not None and '"wf":"fence"' in made.then
    assert await _outbox(store) == [], "no outbox entry for a stored successor"
    again = await store.settle([sent])
    assert again.settled == (False,), "a second settle of the lease is fenced off"


async def test_a_cancelled_workflow_s_settle_stores_no_successor(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app, runs = chain_app(store)
    _leased, sent = await _first_link(store, app, "gone")
    done = await app.workflow("gone").abort()  # marked while its first link runs
    assert done.found
    result = await store.settle([sent])
    assert result.settled == (True,) and not result.continued
    assert await store.get_job("gone.1") is None
    assert await _outbox(store) == ["gone.0"], "the outbox path, whose continuer checks the mark"
    batch = await store.continuations(["default"], 10)
    await continuer._continue(store, batch)
    await store.finish_continuations(batch)
    assert await store.get_job("gone.1") is None, "the continuer drops it too"
    assert not runs


async def test_an_existing_job_of_the_successor_s_id_is_left_alone(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app, _ = chain_app(store)
    _leased, sent = await _first_link(store, app, "there")
    await store.enqueue_many([NewJob(id="there.1", queue="default", kind="inc", payload=b"40")])
    result = await store.settle([sent])
    assert result.settled == (True,) and result.continued == ({0} if continues(store) else set())
    job = await store.get_job("there.1")
    assert job is not None and job.payload == b"40" and job.then is None
    assert await _outbox(store) == ([] if continues(store) else ["there.0"])


def test_only_a_single_due_job_is_a_successor() -> None:
    app, _ = chain_app(MemoryStore())
    inc, total = app.tasks["inc"], app.tasks["total"]

    def first_then(flow: Any) -> str:
        from chronos_trio.records._flow_build import start

        (job, *_) = start(flow, "w").jobs
        assert job.then is not None
        return job.then

    one = chain_successor(first_then(chain(inc.s(1), inc.s())), b"2", "w.0")
    assert one is not None and [j.id for j in one.jobs] == ["w.1"] and one.workflow == "w"
    assert chain_successor(first_then(chain(inc.s(1), inc.s(delay=1))), b"2", "w.0") is None
    fan = chain(inc.s(1), group(inc.s(), inc.s()), total.s())
    assert chain_successor(first_then(fan), b"2", "w.0") is None
    member = chain(group(inc.s(1), inc.s(2)), total.s())
    assert chain_successor(first_then(member), b"2", "w.0.0") is None
    assert chain_successor("{damaged", b"2", "w.0") is None


async def _run_chains(store: Store, n: int) -> Sequence[Any]:
    app, runs = chain_app(store)
    inc = app.tasks["inc"]
    async with app.open_worker(poll_interval=0.2):
        started = [
            await app.enqueue_workflow(chain(inc.s(k), inc.s(), inc.s()), workflow_id=f"cl{k}")
            for k in range(n)
        ]
        with trio.fail_after(30):
            results = [await s.result(timeout=20) for s in started]
    assert len(runs) == 3 * n and set(runs.values()) == {1}
    return results


@pytest.mark.redis
@pytest.mark.cluster
async def test_a_cluster_keeps_the_outbox_path(redis_cluster_url: str) -> None:
    from chronos_trio.store.redis import RedisStore

    store = RedisStore.from_url(redis_cluster_url, default_partitions=8)
    try:
        assert await _run_chains(store, 5) == [k + 3 for k in range(5)]
        assert store.statistics().chain_settles == 0
    finally:
        await store.aclose()
