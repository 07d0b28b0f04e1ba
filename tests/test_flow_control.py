"""Flow control through the public API: task and enqueue options, their
checks, and what a worker does with priorities, expiry, rate limits,
concurrency limits and ``RateLimited`` (memory store on Trio's virtual clock;
Redis for routing). The store-level semantics are conformance checks
(chronos_trio/testing/_conformance_control.py)."""

from __future__ import annotations

import datetime as dt
import itertools
import json

import attrs
import pytest
import trio

from chronos_trio import (
    App,
    ConcurrencyLimit,
    Job,
    JobContext,
    JobState,
    RateLimit,
    RateLimited,
)
from chronos_trio.records._control import JobControl, decode_control
from chronos_trio.store import LeaseResult
from chronos_trio.store.redis import RedisStore


@attrs.frozen
class Item:
    n: int
    tenant: str = "t1"


def test_limits_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="count"):
        RateLimit(0)
    with pytest.raises(ValueError, match="period"):
        RateLimit(5, per=0)
    with pytest.raises(ValueError, match="burst"):
        RateLimit(5, burst=0)
    with pytest.raises(ValueError, match="limit key"):
        RateLimit(5, key="a\nb")
    with pytest.raises(ValueError, match="concurrency limit"):
        ConcurrencyLimit(0)
    app = App()
    with pytest.raises(ValueError, match="priority"):
        app.task("x", priority=11)
    with pytest.raises(ValueError, match="expires"):
        app.task("y", expires=-1)
    with pytest.raises(TypeError, match="rate_limit"):
        app.task("z", rate_limit=5)  # type: ignore[arg-type]


def test_control_encodes_and_decodes() -> None:
    control = JobControl(
        priority=-3, expires_at=1234.5, rates=(("api:x/y", 10, 2.0, 3),), caps=(("db", 4),)
    )
    assert decode_control(control.encode()) == control
    assert decode_control("") is None
    with pytest.raises(ValueError, match="not one"):
        decode_control("q7")


async def test_options_reach_the_stored_job(autojump_clock: object) -> None:
    app = App()

    @app.task("t", priority=2, rate_limit=RateLimit(5, key=lambda p: f"tenant:{p.tenant}"))
    async def t(item: Item, job: JobContext) -> None: ...

    plain = await t.enqueue(Item(1))
    urgent = await t.enqueue(
        Item(2, tenant="t9"),
        priority=9,
        expires=30,
        concurrency_limit=ConcurrencyLimit(2, key="db"),
    )
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    dated = await t.enqueue(Item(3), expires=at, rate_limit=None)
    got = {h.job_id: await app.store.get_job(h.job_id) for h in (plain, urgent, dated)}
    p, u, d = (got[h.job_id] for h in (plain, urgent, dated))
    assert isinstance(p, Job) and isinstance(u, Job) and isinstance(d, Job)
    assert p.control == JobControl(priority=2, rates=(("tenant:t1", 5, 1.0, 1),))
    assert u.control is not None and u.priority == 9 and u.control.caps == (("db", 2),)
    assert u.control.rates == (("tenant:t9", 5, 1.0, 1),), "the key is made from the payload"
    assert u.control.expires_at is not None and 29 < u.control.expires_at - u.created_at <= 30
    assert d.control is not None and d.control.rates == (), "an enqueue option replaces the task's"
    assert d.control.expires_at == pytest.approx(at.timestamp())
    with pytest.raises(ValueError, match="priority"):
        await t.enqueue(Item(4), priority=-11)
    with pytest.raises(ValueError, match="timezone-aware"):
        await t.enqueue(Item(4), expires=dt.datetime(2030, 1, 1))


async def test_higher_priority_runs_first(autojump_clock: object) -> None:
    app = App()
    order: list[int] = []

    @app.task("p")
    async def p(item: Item, job: JobContext) -> None:
        order.append(item.n)

    for n, priority in [(1, 0), (2, -5), (3, 5), (4, 0), (5, 10)]:
        await p.enqueue(Item(n), priority=priority)
    async with app.open_worker(concurrency=1, batch_size=1, poll_interval=0.5) as worker:
        with trio.fail_after(30):
            await worker.wait_idle()
    assert order == [5, 3, 1, 4, 2]


async def test_expired_job_is_dead_and_the_hook_fires(autojump_clock: object) -> None:
    app = App()
    dead: list[Job] = []
    ran: list[int] = []

    @app.task("e", expires=5)
    async def e(item: Item, job: JobContext) -> None:
        ran.append(item.n)

    @app.on_dead_letter
    async def hook(job: Job) -> None:
        dead.append(job)

    await e.enqueue(Item(1), delay=10)  # due after its expiry
    await e.enqueue(Item(2), delay=1)
    async with app.open_worker(poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
            while not dead:
                await trio.sleep(0.1)
        stats = worker.statistics()
    assert ran == [2]
    [job] = dead
    assert job.state is JobState.DEAD and job.last_error.startswith("expired")
    assert stats.dead == 1


async def test_rate_limited_handler_runs_again_without_using_attempts(
    autojump_clock: object,
) -> None:
    app = App()
    runs: list[tuple[float, int]] = []

    @app.task("r", max_retries=0)
    async def r(item: Item, job: JobContext) -> None:
        runs.append((trio.current_time(), job.attempt))
        if len(runs) < 4:
            raise RateLimited(2.0, "upstream said 429")

    handle = await r.enqueue(Item(1))
    async with app.open_worker(poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    job = await app.store.get_job(handle.job_id)
    assert job is None or job.state is JobState.SUCCEEDED
    assert [attempt for _, attempt in runs] == [1, 1, 1, 1], "no attempt counted"
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs)]
    assert all(gap >= 2.0 for gap in gaps), gaps


async def test_rate_limit_paces_a_worker(autojump_clock: object) -> None:
    app = App()
    starts: list[float] = []

    @app.task("paced", rate_limit=RateLimit(4, per=1.0, burst=2))
    async def paced(item: Item, job: JobContext) -> None:
        starts.append(trio.current_time())

    await paced.enqueue_many([Item(n) for n in range(10)])
    leases = 0
    store = app.store
    real_lease = store.lease

    async def counted(*args: object, **kw: object) -> LeaseResult:
        nonlocal leases
        leases += 1
        return await real_lease(*args, **kw)  # type: ignore[arg-type]

    store.lease = counted  # type: ignore[method-assign]
    async with app.open_worker(concurrency=8, poll_interval=30.0) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    span = starts[-1] - starts[0]
    # 2 at once, then one per 0.25 s: the 10th starts 2 s after the first
    assert 1.95 <= span <= 2.3, span
    # the leaser sleeps until each permit instead of polling
    assert leases <= 3 * len(starts), leases


async def test_concurrency_limit_bounds_a_worker(autojump_clock: object) -> None:
    app = App()
    running, peak = 0, 0

    @app.task("c", concurrency_limit=ConcurrencyLimit(3, key=lambda p: p.tenant))
    async def c(item: Item, job: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1.0)
        running -= 1

    await c.enqueue_many([Item(n) for n in range(12)])
    await c.enqueue(Item(99, tenant="other"))
    async with app.open_worker(concurrency=16, poll_interval=30.0) as worker:
        with trio.fail_after(60):
            started = trio.current_time()
            await worker.wait_idle()
            took = trio.current_time() - started
    assert peak == 4, "three of t1 at once, and the other tenant beside them"
    # a settle frees the slot at once: four waves of one second
    assert took < 5.5, took


@pytest.mark.redis
async def test_limited_jobs_route_to_their_key_partition(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, namespace="route", default_partitions=8)
    app = App()
    app.use_store(store)

    @app.task("k", concurrency_limit=ConcurrencyLimit(2, key="one"))
    async def k(item: Item, job: JobContext) -> None: ...

    try:
        results = await k.enqueue_many([Item(n) for n in range(20)])
        assert len({r.partition for r in results}) == 1, "every job where its limit lives"
        with pytest.raises(ValueError, match="limited"):
            for n in range(20):  # some given ID routes elsewhere
                await k.enqueue(Item(n), job_id=f"given-{n}")
    finally:
        await app.aclose()


def test_cli_limits_shows_use_and_declared_limits(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chronos_trio.cli import EXIT_OK, main
    from chronos_trio.store import MemoryStore, QueueWeight
    from tests import tests_app
    from tests.tests_app import Record

    monkeypatch.delenv("CHRONOS_URL", raising=False)
    store = MemoryStore()
    monkeypatch.setattr(tests_app.app, "_store", store)
    monkeypatch.setattr(tests_app.app, "_store_url", None)

    async def fill() -> None:
        app = tests_app.app
        await app.tasks["tests.capped"].enqueue_many([Record("c") for _ in range(6)])
        for _ in range(2):  # booked for minutes (the task's 50/s would lapse at once)
            await app.tasks["tests.rated"].enqueue(
                Record("r"), rate_limit=RateLimit(1, per=60.0, burst=5, key="tests.rated")
            )
        leased = (
            await store.lease([QueueWeight("flow")], 10, worker_id="w", lease_duration=600)
        ).jobs
        assert len(leased) == 4 + 2, "4 slots taken (2 capped jobs wait), 2 permits of a burst of 5"

    trio.run(fill)
    assert main(["limits", "tests.tests_app:app", "--queue", "flow"]) == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["QUEUE", "KIND", "KEY", "LIMIT", "IN", "USE", "PERMITS", "BOOKED"]
    by_kind = {line.split()[1]: line.split() for line in lines[1:]}
    assert by_kind["concurrency"][2:5] == ["tests.capped", "4", "4"]
    assert by_kind["rate"][2:6] == ["tests.rated", "50/1s", "burst", "5"]
    assert main(["limits", "tests.tests_app:app", "--json"]) == EXIT_OK
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["concurrency"]["in_use"] == 4 and rows["concurrency"]["declared"] == "4"
    assert rows["rate"]["booked_until"].endswith("Z")


def test_cli_job_shows_its_flow_control(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chronos_trio.cli import EXIT_OK, main
    from chronos_trio.store import MemoryStore
    from tests import tests_app
    from tests.tests_app import Record

    monkeypatch.delenv("CHRONOS_URL", raising=False)
    monkeypatch.setattr(tests_app.app, "_store", MemoryStore())
    monkeypatch.setattr(tests_app.app, "_store_url", None)

    async def fill() -> str:
        handle = await tests_app.app.tasks["tests.rated"].enqueue(Record("r"), priority=3)
        return handle.job_id

    job_id = trio.run(fill)
    assert main(["job", "tests.tests_app:app", job_id]) == EXIT_OK
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("control ")]
    assert "priority 3" in line and "rate 50/1s burst 5 key 'tests.rated'" in line
    assert main(["job", "tests.tests_app:app", job_id, "--json"]) == EXIT_OK
    control = json.loads(capsys.readouterr().out)["control"]
    assert control["priority"] == 3 and control["rate_limits"][0]["count"] == 50


@pytest.mark.redis
async def test_a_producer_outside_trio_gives_flow_control(redis_url: str) -> None:
    from chronos_trio.producers import SyncProducer

    store = RedisStore.from_url(redis_url, namespace="sync-flow")

    def produce() -> str:
        with SyncProducer(redis_url, namespace="sync-flow") as producer:
            handle = producer.enqueue(
                "by.name", {"n": 1}, priority=4, expires=60,
                concurrency_limit=ConcurrencyLimit(2, key="pool"),
            )  # fmt: skip
            return handle.job_id

    try:
        job_id = await trio.to_thread.run_sync(produce)
        job = await store.get_job(job_id)
        assert job is not None and job.control is not None
        assert job.priority == 4 and job.control.caps == (("pool", 2),)
        assert job.control.expires_at is not None
        assert 59 < job.control.expires_at - job.created_at <= 60, "judged by the store's clock"
    finally:
        await store.aclose()
