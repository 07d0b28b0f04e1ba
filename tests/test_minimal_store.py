"""A store with only the core (``testing.MinimalStore``): a real worker runs
jobs on it (retries with backoff, dead letters, a lost lease recovered),
it passes every conformance check its capabilities imply, and every feature
it lacks is refused with a clear message before anything is stored or
started."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, ConcurrencyLimit, Job, JobContext, RateLimit, RetryPolicy, chain
from chronos_trio.store import MissingCapability, QueueWeight, capabilities_of
from chronos_trio.testing import CHECKS, Check, MinimalStore

#: Short beats so lease expiry and recovery fit a test (virtual time anyway).
TIMING: dict[str, Any] = {"recover_interval": 0.5, "poll_interval": 0.5}


def test_it_has_only_the_core() -> None:
    assert capabilities_of(MinimalStore) == frozenset()
    assert capabilities_of(MinimalStore()) == frozenset()


CORE_CHECKS = [c for c in CHECKS if c.skip_reason(MinimalStore) is None]


def test_the_core_checks_are_exactly_those_without_needs() -> None:
    assert {c.name for c in CORE_CHECKS} == {c.name for c in CHECKS if not c.needs}
    assert len(CORE_CHECKS) >= 10
    [unique] = [c for c in CHECKS if c.name == "unique_job_holds_its_key_while_pending"]
    reason = unique.skip_reason(MinimalStore)
    assert reason is not None and "unique" in reason and "MinimalStore" in reason


@pytest.mark.parametrize("check", CORE_CHECKS, ids=str)
async def test_minimal_store_passes_the_core_checks(check: Check, autojump_clock: object) -> None:
    async def fresh() -> MinimalStore:
        return MinimalStore()

    await check(fresh)


# -- a real worker on it ------------------------------------------------------------------
@attrs.frozen
class Item:
    n: int


async def test_a_worker_runs_retries_dead_letters_and_recovers_on_it(
    autojump_clock: object,
) -> None:
    store = MinimalStore()
    app = App(store)
    ran: dict[int, list[float]] = {}
    dead: list[Job] = []
    done = trio.Event()
    expected = {"ok": 1, "flaky": 1, "doomed": 1, "orphan": 1}
    finished: dict[str, int] = {}

    def finish(what: str) -> None:
        finished[what] = finished.get(what, 0) + 1
        if finished == expected:
            done.set()

    @app.task("work", max_retries=2, retry=RetryPolicy(base=2.0, factor=2.0))
    async def work(item: Item, job: JobContext) -> None:
        ran.setdefault(item.n, []).append(trio.current_time())
        if item.n == 2 and len(ran[2]) < 3:
            raise RuntimeError("flaky")  # fails twice, succeeds on the third attempt
        if item.n == 3:
            raise RuntimeError("doomed")  # every attempt fails: dead after 3
        finish({1: "ok", 2: "flaky", 4: "orphan"}[item.n])

    @app.on_dead_letter
    async def on_dead(job: Job) -> None:
        dead.append(job)
        finish("doomed")

    # A worker that died holding a lease: leased for 2 s and never settled.
    [orphan] = await work.enqueue_many([Item(4)])
    [lost] = (
        await store.lease([QueueWeight("default")], 1, worker_id="gone", lease_duration=2.0)
    ).jobs
    assert lost.job.id == orphan.job_id
    await work.enqueue_many([Item(1), Item(2), Item(3)])
    started = trio.current_time()
    with trio.fail_after(120):
        async with app.open_worker(concurrency=4, **TIMING) as worker:
            await done.wait()
            stats = worker.statistics()
    assert finished == expected
    assert len(ran[1]) == 1
    # the flaky job: retried with the task's backoff (2 s, then 4 s), then succeeded
    first, second, third = ran[2]
    assert second - first >= 2.0 and third - second >= 4.0
    # the doomed one: three attempts (max_retries=2), then dead-lettered, kept dead
    assert len(ran[3]) == 3
    [corpse] = dead
    assert corpse.state.value == "dead" and "doomed" in corpse.last_error and corpse.attempts == 3
    # the orphan: recovered once its lease expired (store clock), then run
    assert len(ran[4]) == 1 and ran[4][0] - started >= 2.0
    assert stats.succeeded == 3 and stats.retried == 4 and stats.dead == 1
    assert stats.recovered == 1
    # no optional actor ran (none would find its methods: it would have crashed)
    assert all(n == 0 for n in stats.restarts.values()), stats.restarts


async def test_a_delayed_job_starts_at_its_due_time_without_a_promoter(
    autojump_clock: object,
) -> None:
    app = App(MinimalStore())
    started: list[float] = []

    @app.task("later")
    async def later(item: Item, job: JobContext) -> None:
        started.append(trio.current_time())

    sent = trio.current_time()
    await later.enqueue(Item(0), delay=30)
    with trio.fail_after(60):
        async with app.open_worker(poll_interval=5.0):
            while not started:
                await trio.sleep(0.1)
    assert 30 <= started[0] - sent < 30.5, started[0] - sent


# -- what it lacks is refused -----------------------------------------------------------
def _refusal(exc: pytest.ExceptionInfo[MissingCapability], *words: str) -> None:
    message = str(exc.value)
    assert "MinimalStore" in message, message
    for word in words:
        assert word in message, message


async def _nothing_stored(store: MinimalStore) -> None:
    leased = await store.lease([QueueWeight("default")], 100, worker_id="w", lease_duration=1)
    assert leased.jobs == ()


@pytest.mark.parametrize(
    ("options", "feature"),
    [
        ({"unique": "one-per-day"}, "unique"),
        ({"priority": 5}, "priority"),
        ({"expires": 60.0}, "expiry"),
        ({"rate_limit": RateLimit(10, per=1.0)}, "rate_limits"),
        ({"concurrency_limit": ConcurrencyLimit(2)}, "concurrency_limits"),
    ],
)
async def test_an_enqueue_with_a_feature_it_lacks_is_refused_and_stores_nothing(
    options: dict[str, Any], feature: str, autojump_clock: object
) -> None:
    store = MinimalStore()
    app = App(store)

    @app.task("k")
    async def k(item: Item, job: JobContext) -> None: ...

    with pytest.raises(MissingCapability) as refused:
        await k.enqueue(Item(1), **options)
    _refusal(refused, f"this enqueue needs {feature} (used by job", "no job of it was stored")
    # a batch with one such job among plain ones stores none of them
    jobs = [k.new_job(Item(0)), k.new_job(Item(1), **options)]
    with pytest.raises(MissingCapability):
        await app.enqueue_jobs(jobs)
    await _nothing_stored(store)
    with pytest.raises(MissingCapability):  # the store itself refuses too
        await store.enqueue_many(jobs)
    await _nothing_stored(store)


async def test_a_worker_refuses_schedules_and_kept_results_before_starting(
    autojump_clock: object,
) -> None:
    store = MinimalStore()
    app = App(store)

    @app.task("report")
    async def report(item: Item, job: JobContext) -> int:
        return item.n  # a result kept for an hour by default

    app.every(60, Item(1), task=report, schedule_id="hourly")
    await report.enqueue(Item(2), job_id="waiting")
    worker = app.worker()
    with trio.fail_after(5), pytest.raises(MissingCapability) as refused:
        await worker.run()
    _refusal(
        refused,
        "the worker of app 'chronos' needs",
        "leadership (used by schedule 'hourly')",
        "results (used by task 'report', which keeps its results)",
        "nothing was started",
    )
    # nothing ran: the job still waits, unleased
    [waiting] = (
        await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=1)
    ).jobs
    assert waiting.job.id == "waiting" and waiting.job.attempts == 1


async def test_a_result_wait_an_abort_and_a_workflow_are_refused(autojump_clock: object) -> None:
    store = MinimalStore()
    app = App(store)

    @app.task("k")  # returns nothing: keeps no result
    async def k(item: Item, job: JobContext) -> None: ...

    handle = await k.enqueue(Item(1))
    with pytest.raises(MissingCapability) as refused:
        await handle.result(timeout=math.inf)
    _refusal(refused, "following a job needs results")
    with pytest.raises(MissingCapability) as refused:
        await handle.abort()
    _refusal(refused, "aborting a job needs admin and abort")
    with pytest.raises(MissingCapability) as refused:
        await app.enqueue_workflow(chain(k.s(Item(2)), k.s(Item(3))))
    _refusal(refused, "flows (used by job")
    with pytest.raises(MissingCapability) as refused:
        await app.worker().wait_idle()
    _refusal(refused, "wait_idle needs admin")
    # only the plain job was stored
    [only] = (await store.lease([QueueWeight("default")], 10, worker_id="w", lease_duration=1)).jobs
    assert only.job.id == handle.job_id
