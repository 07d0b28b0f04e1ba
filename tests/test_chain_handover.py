"""A chain link's successor handed over to the worker that settles the link
(issue 29, chain throughput): the settle stores it already leased to that
worker (``Successor.lease_to``, a store that ``leases_in_settle``), which
runs it in the slot its predecessor gave back, with no ready entry, wake-up
or lease of it. Only a worker with a handler for its kind, consuming its
queue and not stopping takes it over; an abort of its workflow still
reaches it. Memory (virtual clock) and Redis; the store side is in the
conformance checks (``testing/_conformance_chain_lease.py``), the kill -9
in tests/test_process_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import trio

from chronos_trio import App, JobContext, JobState, MemoryStore, QueueWeight, chain
from chronos_trio.actors import completer
from chronos_trio.records._jobs import LeasedJob, NewJob
from chronos_trio.runtime._config import WorkerConfig
from chronos_trio.runtime._inflight import Entry
from chronos_trio.runtime._state import Runtime
from chronos_trio.store import SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from tests._backends import Backend
from tests.test_chain_settle import chain_app


def _takes(store: Any) -> bool:
    return bool(getattr(type(store), "leases_in_settle", False))


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The IDs of the jobs the completer took over from its settles."""
    seen: list[str] = []
    take = completer._take_over

    async def spy(
        rt: Runtime, batch: list[LeasedJob], asked_at: float, runs: list[int]
    ) -> list[Entry]:
        seen.extend(leased.job.id for leased in batch)
        return await take(rt, batch, asked_at, runs)

    monkeypatch.setattr(completer, "_take_over", spy)
    return seen


async def _ten_links(backend: Backend, store: Any, ids: list[str]) -> None:
    """A chain of ten ``inc`` links per workflow ID, run by one worker; each
    link ran once and each chain ended with 10."""
    app, runs = chain_app(store)
    inc = app.tasks["inc"]
    flow = chain(inc.s(0), *(inc.s() for _ in range(9)))
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        started = [await app.enqueue_workflow(flow, workflow_id=w) for w in ids]
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert [await s.result(timeout=20) for s in started] == [10] * len(ids)
    assert len(runs) == 10 * len(ids) and set(runs.values()) == {1}, "each link once"


async def test_a_worker_runs_the_successors_its_settles_hand_it(
    backend: Backend, clock: object, handed: list[str]
) -> None:
    store = backend.store()
    await _ten_links(backend, store, ["h0", "h1", "h2"])
    if not _takes(store):
        assert handed == []
        return
    # every link but each chain's first came from its predecessor's settle
    assert sorted(handed) == sorted(f"h{k}.{i}" for k in range(3) for i in range(1, 10))
    last = await store.get_job("h2.9")
    assert last is not None and last.state is JobState.SUCCEEDED and last.attempts == 1


async def test_a_long_chain_waits_its_turn_in_the_queue_now_and_then(
    backend: Backend, clock: object, handed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After HANDOVER_RUN links in a row taken over, the next one is stored
    ready (behind what waits in its queue) and leased as any job is."""
    monkeypatch.setattr(completer, "HANDOVER_RUN", 3)
    store = backend.store()
    await _ten_links(backend, store, ["run"])
    if _takes(store):
        assert handed == [f"run.{k}" for k in (1, 2, 3, 5, 6, 7, 9)]


async def test_a_successor_of_another_queue_or_kind_is_left_for_its_workers(
    backend: Backend, clock: object, handed: list[str]
) -> None:
    """inc -> inc -> tenfold, tenfold in a queue of its own with a worker
    of its own: the first settle hands the second inc over; the second's
    successor is stored ready for the other worker (this one neither has
    its handler nor consumes its queue)."""
    store = backend.store()
    app, runs = chain_app(store)
    other = App(store)

    @other.task("tenfold", queue="totals")
    async def tenfold(payload: int, job: JobContext) -> int:
        runs[job.id] += 1
        return payload * 10

    inc = app.tasks["inc"]
    flow = chain(inc.s(1), inc.s(), other.tasks["tenfold"].s())
    timing = backend.timing(poll_interval=0.5)
    async with (
        app.open_worker(queues=["default"], **timing),
        other.open_worker(queues=["totals"], **timing),
    ):
        started = await app.enqueue_workflow(flow, workflow_id="mixed")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            assert await started.result(timeout=20) == 30
    assert set(runs.values()) == {1} and len(runs) == 3
    assert handed == (["mixed.1"] if _takes(store) else [])


def test_only_a_worker_that_can_run_it_asks_for_the_successor() -> None:
    taker = completer._Taker("w1", 30.0, ["default"], {"inc": None})
    kinds = {
        ("inc", "default"): True,
        ("total", "default"): False,  # no handler here
        ("inc", "other"): False,  # a queue it does not consume
    }
    for (kind, queue), takes in kinds.items():
        job = NewJob(id="x", queue=queue, kind=kind, payload=b"1")
        assert taker.takes(job) is takes


def test_a_stopping_or_recycling_worker_asks_for_nothing() -> None:
    app, _ = chain_app(MemoryStore())
    store = app.store
    make = lambda **kw: Runtime.create(  # noqa: E731
        app, store, WorkerConfig(worker_id="w1", **kw)
    )
    assert completer._taker_of(make()) is not None
    draining = make()
    draining.table.release_unstarted()
    assert completer._taker_of(draining) is None, "a stopping worker takes nothing over"
    assert completer._taker_of(make(max_jobs=10)) is None, "nor one that counts its leases"


async def test_a_workflow_abort_reaches_a_handed_over_step(
    backend: Backend, clock: object, handed: list[str]
) -> None:
    """The second link, handed over to the worker, blocks; the workflow's
    abort cancels it (its lease is flagged as any is) and nothing after it
    runs."""
    store = backend.store()
    app = App(store)
    started_second = trio.Event()
    ran: list[str] = []

    @app.task("step")
    async def step(payload: int, job: JobContext) -> int:
        ran.append(job.id)
        if job.id == "ab.1":
            started_second.set()
            await trio.sleep(3600)
        return payload + 1

    s = app.tasks["step"]
    flow = chain(s.s(0), s.s(), s.s())
    async with app.open_worker(**backend.timing(poll_interval=0.5, heartbeat_interval=0.2)):
        await app.enqueue_workflow(flow, workflow_id="ab")
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            await started_second.wait()
            done = await app.workflow("ab").abort(reason="stop")
            assert done.found
            while True:
                second = await store.get_job("ab.1")
                assert second is not None
                if second.state is JobState.ABORTED:
                    break
                await trio.sleep(0.05)
            await trio.sleep(1.0)  # time for a next step, were one made
    assert ran == ["ab.0", "ab.1"]
    assert await store.get_job("ab.2") is None
    if _takes(store):
        assert handed == ["ab.1"], "the aborted step was handed over"


async def _first_link(store: Any, workflow_id: str) -> tuple[App, LeasedJob]:
    """A three-link chain started and its first link leased by worker w1."""
    if not _takes(store):
        pytest.skip("the store does not hand successors over")
    app, _ = chain_app(store)
    inc = app.tasks["inc"]
    await app.enqueue_workflow(chain(inc.s(1), inc.s(), inc.s()), workflow_id=workflow_id)
    (first,) = (
        await store.lease([QueueWeight("default")], 10, worker_id="w1", lease_duration=30)
    ).jobs
    return app, first


async def test_a_handed_over_lease_is_settled_as_any_lease(backend: Backend, clock: object) -> None:
    """What the worker is handed is fenced by its own token: the store's
    record holds it, and a settle under another token is refused."""
    store = backend.store()
    app, first = await _first_link(store, "f")
    ok = Settlement(first.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60)
    taker = completer._Taker("w1", 30.0, ["default"], app.registry.tasks)
    sent = completer._successor(first.job.then, ok, taker)
    assert sent.successor is not None and sent.successor.lease_to == "w1"
    result = await store.settle([sent])
    [(_, handed_job)] = result.leased
    assert handed_job.job.id == "f.1" and handed_job.job.payload == b"2"
    assert handed_job.job.then is not None and handed_job.job.then == sent.successor.job.then
    stored = await store.get_job("f.1")
    assert stored is not None and stored.lease_token == handed_job.token
    assert stored.then == handed_job.job.then
    if isinstance(store, RedisStore):
        assert handed_job.job.placement == stored.placement
    other = Settlement(first.ref, SettleKind.SUCCEEDED)  # the predecessor's token
    assert (await store.settle([other])).settled == (False,)
    # its own success, from the worker, makes the last link (handed over again)
    own = Settlement(handed_job.ref, SettleKind.SUCCEEDED, result=b"3", result_ttl=60)
    nxt = completer._successor(handed_job.job.then, own, taker)
    again = await store.settle([nxt])
    assert again.settled == (True,) and [j.job.id for _, j in again.leased] == ["f.2"]


@pytest.mark.redis
async def test_a_long_handed_over_chain_keeps_its_topology_fresh(
    redis_url: str, handed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose chains are all handed over leases nothing for long
    (its lease kept the cached topology fresh): its settles read the
    successors' topology again in their own round trip, so every link is
    still handed over, well past the cache's TTL, and none takes the outbox
    path."""
    monkeypatch.setattr(completer, "HANDOVER_RUN", 1000)  # every link handed over
    store = RedisStore.from_url(redis_url, namespace="warm", topology_ttl=0.2)
    app = App(store)

    @app.task("slow")
    async def slow(payload: int, job: JobContext) -> int:
        await trio.sleep(0.03)
        return payload + 1

    s = app.tasks["slow"]
    links = 40  # 1.2 s or more: six TTLs
    try:
        async with app.open_worker(poll_interval=0.5):
            started = await app.enqueue_workflow(
                chain(s.s(0), *(s.s() for _ in range(links - 1))), workflow_id="warm"
            )
            with trio.fail_after(30):
                assert await started.result(timeout=20) == links
        assert handed == [f"warm.{k}" for k in range(1, links)]
        assert store.statistics().chain_settles == links - 1
    finally:
        await store.aclose()


async def test_a_paused_queue_s_successor_waits_ready(backend: Backend, clock: object) -> None:
    """A link that ends after its queue was paused: its successor is stored
    ready (a lease would not take it now), not handed over. (A worker
    would not ask then either, were it to know: the store decides.)"""
    store = backend.store()
    app, first = await _first_link(store, "p")
    await store.set_paused("default", True)  # type: ignore[attr-defined]
    await trio.sleep(1.5)  # past the Redis client's topology cache (1 s) ...
    nothing = await store.lease([QueueWeight("default")], 10, worker_id="w2", lease_duration=30)
    assert nothing.jobs == ()  # ... which this lease of the paused queue read again
    ok = Settlement(first.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60)
    taker = completer._Taker("w1", 30.0, ["default"], app.registry.tasks)
    sent = completer._successor(first.job.then, ok, taker)
    result = await store.settle([sent])
    assert result.settled == (True,) and result.leased == ()
    made = await store.get_job("p.1")
    assert made is not None and made.state is JobState.READY


async def _first_links(store: RedisStore, ids: list[str]) -> tuple[App, list[LeasedJob]]:
    """A three-link chain started per workflow ID and every first link
    leased by worker w1 (in the order of ``ids``)."""
    app, _ = chain_app(store)
    inc = app.tasks["inc"]
    for w in ids:
        await app.enqueue_workflow(chain(inc.s(1), inc.s(), inc.s()), workflow_id=w)
    got = (await store.lease([QueueWeight("default")], 10, worker_id="w1", lease_duration=30)).jobs
    by_id = {leased.job.id: leased for leased in got}
    return app, [by_id[f"{w}.0"] for w in ids]


def _link_successes(app: App, firsts: list[LeasedJob]) -> list[Settlement]:
    taker = completer._Taker("w1", 30.0, ["default"], app.registry.tasks)
    return [
        completer._successor(
            f.job.then, Settlement(f.ref, SettleKind.SUCCEEDED, result=b"2", result_ttl=60), taker
        )
        for f in firsts
    ]


@pytest.mark.redis
async def test_a_batch_of_links_reads_its_partition_s_closed_marker_once(redis_url: str) -> None:
    """settle.lua asks whether a successor's partition is closed once per
    call and partition, not once per link (a batch's links mostly go to one
    partition; nothing in the call closes one): three links' successors
    stored with four EXISTS, the marker's and each successor ID's."""
    store = RedisStore.from_url(redis_url, namespace="memo", default_partitions=1)
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(30):
            app, firsts = await _first_links(store, ["a", "b", "c"])
            sent = _link_successes(app, firsts)
            client.config_resetstat()
            result = await store.settle(sent)
            exists = client.info("commandstats")["cmdstat_exists"]["calls"]
        assert result.settled == (True, True, True)
        assert sorted(j.job.id for _, j in result.leased) == ["a.1", "b.1", "c.1"]
        assert exists == 3 + 1
    finally:
        client.close()
        await store.aclose()


@pytest.mark.redis
async def test_no_link_s_successor_goes_to_a_closed_partition(redis_url: str) -> None:
    """A successor whose partition is closed (its version completed under a
    worker with a stale topology) is not stored by the settle, for any link
    of the batch: each success goes to the outbox, as before, and the
    continuer enqueues the successor where the queue's topology now says."""
    store = RedisStore.from_url(redis_url, namespace="shut", default_partitions=1)
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(30):
            app, firsts = await _first_links(store, ["a", "b"])
            sent = _link_successes(app, firsts)
            client.set(store._ctx.keys.partition("default", 1, 0).closed, "1")
            result = await store.settle(sent)
            assert result.settled == (True, True) and result.leased == ()
            assert await store.get_job("a.1") is None and await store.get_job("b.1") is None
            entries = await store.next_continuations(["default"], 10, finished=[])
        assert sorted(c.job_id for c in entries) == ["a.0", "b.0"]
    finally:
        client.close()
        await store.aclose()


@pytest.mark.redis
async def test_a_batch_s_times_are_written_as_each_link_alone_would_write_them(
    redis_url: str,
) -> None:
    """settle.lua works out a call's shared times once (now + a duration,
    formatted as '%.17g'): every link of the batch gets the same exact texts
    and scores a settle of it alone would write: its result's expiry, its
    succeeded entry (24 h, its workflow's keep), its successor's lease
    expiry in the record and in the leased index."""
    store = RedisStore.from_url(redis_url, namespace="times", default_partitions=1)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        with trio.fail_after(30):
            app, firsts = await _first_links(store, ["a", "b"])
            result = await store.settle(_link_successes(app, firsts))
        assert result.settled == (True, True) and len(result.leased) == 2
        pk = store._ctx.keys.partition("default", 1, 0)
        until = [client.hget(pk.job_prefix + w + ".0", "result_until") for w in "ab"]
        done = [client.hget(pk.job_prefix + w + ".0", "finished_at") for w in "ab"]
        expires = [client.hget(pk.job_prefix + w + ".1", "lease_expires_at") for w in "ab"]
        assert until[0] == until[1] and expires[0] == expires[1] and done[0] == done[1]
        now = float(done[0])
        assert until[0] == "%.17g" % (now + 60) and expires[0] == "%.17g" % (now + 30)
        for w in "ab":
            assert client.zscore(pk.leased, w + ".1") == float(expires[0])
            assert client.zscore(pk.succeeded, w + ".0") == float("%.17g" % (now + 86400))
    finally:
        client.close()
        await store.aclose()
