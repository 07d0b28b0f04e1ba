"""Conformance checks of flow control (``records._control``): priority,
expiry, rate limits, concurrency limits and the deferred settle. Registered
in :data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported (its ``CHECKS`` is the full suite)."""

from __future__ import annotations

import trio

from ..records._control import JobControl, expired_error
from ..records._jobs import JobState, NewJob
from ..store._capabilities import Capability
from ..store._roles import SettleKind, Store
from .conformance import Fresh, check, job, lease, lease_result, settle, state_of


def limited(job_id: str, control: JobControl, **kw: object) -> NewJob:
    """A job under flow control whose ID is the store's to choose (a limited
    job routes to the partition of its key, as a unique job does)."""
    return job(job_id, control=control, id_given=False, **kw)  # type: ignore[arg-type]


async def _ids(store: Store, jobs: list[NewJob]) -> list[str]:
    return [r.job_id for r in await store.enqueue_many(jobs)]


def _rated(key: str, count: int, per: float, burst: int = 1, **kw: object) -> JobControl:
    return JobControl(rates=((key, count, per, burst),), **kw)  # type: ignore[arg-type]


def _capped(key: str, limit: int) -> JobControl:
    return JobControl(caps=((key, limit),))


@check(Capability.PROMOTION, Capability.PRIORITY)
async def check_priority_leases_highest_first_due_order_within(fresh: Fresh) -> None:
    store = await fresh()
    now = await store.now()
    jobs = [
        job("p0", run_at=now - 5),
        job("p5-late", run_at=now - 1, control=JobControl(priority=5)),
        job("m3", run_at=now - 9, control=JobControl(priority=-3)),
        job("p5-early", run_at=now - 2, control=JobControl(priority=5)),
        job("p10", run_at=now - 0.5, control=JobControl(priority=10)),
        job("later", delay=0.2, control=JobControl(priority=7)),
    ]
    await store.enqueue_many(jobs)
    await trio.sleep(0.3)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    got = await lease(store)
    assert [lj.job.id for lj in got] == ["p10", "later", "p5-early", "p5-late", "p0", "m3"]
    by_id = {lj.job.id: lj for lj in got}
    # the due time is the job's own, not its place in the ready order
    assert abs(by_id["p5-early"].job.run_at - (now - 2)) < 0.01
    assert by_id["p5-early"].job.priority == 5 and by_id["p0"].job.priority == 0
    # a released job takes its priority back to ready with it
    await store.settle([settle(by_id["m3"], SettleKind.RELEASE)])
    await store.settle([settle(by_id["p5-late"], SettleKind.RELEASE)])
    await store.enqueue_many([job("n0")])
    assert [lj.job.id for lj in await lease(store)] == ["p5-late", "n0", "m3"]


@check(Capability.ADMIN, Capability.PRIORITY)
async def check_ready_jobs_list_in_lease_order(fresh: Fresh) -> None:
    # list_jobs(READY) shows what runs next: highest priority first, then
    # due time, then job ID, page after page; a lease takes its head
    store = await fresh()
    now = await store.now()
    jobs = [
        job("d-low", run_at=now - 40, control=JobControl(priority=-1)),
        job("a-mid", run_at=now - 30),
        job("e-mid", run_at=now - 30),
        job("b-high", run_at=now - 10, control=JobControl(priority=2)),
        job("c-high", run_at=now - 20, control=JobControl(priority=2)),
        job("f-mid", run_at=now - 35),
    ]
    await store.enqueue_many(jobs)
    order = ["c-high", "b-high", "f-mid", "a-mid", "e-mid", "d-low"]
    assert [j.id for j in await store.list_jobs("q", JobState.READY)] == order
    pages = [await store.list_jobs("q", JobState.READY, offset=o, limit=2) for o in (0, 2, 4)]
    assert [j.id for page in pages for j in page] == order
    assert [lj.job.id for lj in await lease(store, count=3)] == order[:3]
    assert [j.id for j in await store.list_jobs("q", JobState.READY)] == order[3:]


@check(Capability.ADMIN, Capability.EXPIRY)
async def check_expired_job_is_dead_lettered_instead_of_leased(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many(
        [
            job("short", control=JobControl(expires_in=0.2)),
            job("long", control=JobControl(expires_in=60.0)),
        ]
    )
    await trio.sleep(0.3)
    batch = await lease_result(store)
    assert [lj.job.id for lj in batch.jobs] == ["long"]
    [expired] = batch.expired
    assert expired.id == "short" and expired.state is JobState.DEAD
    assert expired.last_error.startswith("expired"), expired.last_error
    assert await state_of(store, "short") is JobState.DEAD
    assert await lease(store) == [], "an expired job never comes back by itself"


@check(Capability.ADMIN, Capability.EXPIRY)
async def check_an_expired_job_says_when_in_utc(fresh: Fresh) -> None:
    """Its last error gives the expiry as an ISO time in UTC, to the
    millisecond, the same text on every backend (not epoch seconds)."""
    store = await fresh()
    at = 1_700_000_000.1234  # long past: expired at its first lease
    await store.enqueue_many([job("late", control=JobControl(expires_at=at))])
    assert await lease(store) == []
    found = await store.get_job("late")
    assert found is not None and found.state is JobState.DEAD
    assert found.last_error == "expired: not started by 2023-11-14T22:13:20.123Z (its expires_at)"
    assert found.last_error == expired_error(at)


@check(Capability.RATE_LIMITS)
async def check_rate_limit_holds_jobs_back_in_the_lease(fresh: Fresh) -> None:
    store = await fresh()
    # 4 per second with a burst of 2: two at once, then one every 0.25 s
    ids = await _ids(store, [limited(f"r{n}", _rated("api", 4, 1.0, 2)) for n in range(5)])
    await store.enqueue_many([job("free")])
    first = await lease(store)
    got = {lj.job.id for lj in first}
    assert "free" in got and len(got - {"free"} & set(ids)) == 2 and len(first) == 3, got
    again = await lease_result(store)
    assert again.jobs == (), "no permit yet: nothing leased, nothing burned"
    assert again.held_for is not None and not again.capped
    assert 0 < again.held_for <= 0.26, again.held_for
    await trio.sleep(again.held_for + 0.02)
    [third] = await lease(store)
    assert third.job.id in set(ids) - got and third.job.attempts == 1, "no attempt counted"
    # another key is another limit
    [other] = await _ids(store, [limited("other", _rated("other", 1, 60.0))])
    assert [lj.job.id for lj in await lease(store)] == [other]


@check(Capability.RATE_LIMITS)
async def check_rate_limit_sustained_rate(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([limited(f"s{n}", _rated("s", 20, 1.0)) for n in range(40)])
    started = await store.now()
    leased = 0
    with trio.fail_after(10):
        while leased < 11:
            batch = await lease_result(store)
            leased += len(batch.jobs)
            if not batch.jobs:
                assert batch.held_for is not None
                await trio.sleep(batch.held_for)
    took = await store.now() - started
    # 11 starts at 20/s with no burst: the 11th is due 0.5 s after the first
    assert 0.45 <= took < 1.5, took


@check(Capability.CONCURRENCY_LIMITS)
async def check_concurrency_limit_takes_and_gives_back_slots(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([limited(f"c{n}", _capped("db", 2)) for n in range(4)])
    first = await lease(store)
    assert len(first) == 2
    held = await lease_result(store)
    assert held.jobs == () and held.capped and held.held_for is None
    # a settle gives its slot back at once
    assert (await store.settle([settle(first[0], SettleKind.SUCCEEDED)])).settled == (True,)
    [third] = await lease(store, ttl=0.3)
    assert await lease(store) == []
    # a holder that died: its slot is back once its lease expired, recovered or not
    await trio.sleep(0.4)
    [fourth] = await lease(store)
    assert fourth.job.id not in {first[0].job.id, first[1].job.id, third.job.id}
    await store.enqueue_many([limited("c4", _capped("db", 2))])
    assert await lease(store) == [], "the live holders still have their slots"


@check(
    Capability.ADMIN,
    Capability.RATE_LIMITS,
    Capability.CONCURRENCY_LIMITS,
    Capability.EXPIRY,
)
async def check_held_back_jobs_do_not_shorten_a_batch(fresh: Fresh) -> None:
    # Jobs a limit holds back, or that expired, are replaced by the queue's
    # next ready jobs in its one order, wherever they are (partitions): the
    # batch is short only for want of ready jobs. "late" shares the
    # partition of the held-back "c1" (same key: a limit of 100 admits it)
    # but is due after the plain jobs, so it is not leased.
    store = await fresh()
    now = await store.now()
    first = await _ids(
        store,
        [
            limited("holder", _capped("db", 1), run_at=now - 300),
            limited("r0", _rated("api", 1, 3600), run_at=now - 200),
        ],
    )
    assert sorted(lj.job.id for lj in await lease(store, count=2)) == sorted(first)
    later = [
        limited("c1", _capped("db", 1), run_at=now - 90),
        limited("r1", _rated("api", 1, 3600), run_at=now - 85),
        job("e", run_at=now - 80, control=JobControl(expires_in=0.2)),
        limited("late", _capped("db", 100), run_at=now - 10),
        *(job(f"p{i}", run_at=now - 50 + i) for i in range(4)),
    ]
    ids = await _ids(store, later)
    await trio.sleep(0.3)  # e expires
    got = await lease_result(store, count=2)
    assert [lj.job.id for lj in got.jobs] == ["p0", "p1"], got
    assert [j.id for j in got.expired] == ["e"] and got.capped, got
    assert got.held_for is not None and got.held_for > 3000, got
    got = await lease_result(store, count=3)
    assert [lj.job.id for lj in got.jobs] == ["p2", "p3", ids[3]], got
    for held in ids[:2]:
        assert await state_of(store, held) is JobState.READY


@check(Capability.CONCURRENCY_LIMITS)
async def check_renewed_holder_keeps_its_slot(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([limited(f"h{n}", _capped("one", 1)) for n in range(2)])
    # three renewals 0.4 s apart outlast the first 1 s lease (0.3 s leases
    # 0.15 s apart lapsed under CI load between a renewal and the next)
    [holder] = await lease(store, ttl=1.0)
    for _ in range(3):
        await trio.sleep(0.4)
        assert (await store.renew([holder.ref], 1.0)).renewed == (True,)
        assert await lease(store) == [], "renewed: still holding its slot"


@check(Capability.CONCURRENCY_LIMITS)
async def check_wait_ready_held_waits_for_a_freed_slot(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([limited(f"w{n}", _capped("w", 1)) for n in range(2)])
    [holder] = await lease(store)
    drained = trio.Event()
    woke = trio.Event()

    async def wait() -> None:
        # As a leaser does, in one task: lease, then wait. The enqueue's own
        # wake-ups may still be there (a spurious return is allowed): let
        # them be taken first, until one wait runs to its timeout.
        assert await lease(store) == []
        for _ in range(20):
            started = trio.current_time()
            await store.wait_ready(["q"], 0.1, held=True)
            if trio.current_time() - started >= 0.09:
                break
        drained.set()
        await store.wait_ready(["q"], 30.0, held=True)
        woke.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await drained.wait()
            await trio.sleep(0.2)
            assert not woke.is_set(), "held jobs alone do not wake a held waiter"
            assert (await store.settle([settle(holder, SettleKind.SUCCEEDED)])).settled == (True,)
            await woke.wait()
    assert len(await lease(store)) == 1


@check(Capability.PROMOTION, Capability.ADMIN, Capability.RATE_LIMITS)
async def check_defer_gives_back_the_attempt_and_holds_the_limit(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many(
        [limited("d1", _rated("up", 100, 1.0, 10)), limited("d2", _rated("up", 100, 1.0, 10))]
    )
    [a, b] = await lease(store)
    assert a.job.attempts == 1
    assert (await store.settle([settle(b, SettleKind.RELEASE)])).settled == (True,)
    ok = await store.settle([settle(a, SettleKind.DEFER, error="429", retry_delay=0.4)])
    assert ok.settled == (True,)
    assert await state_of(store, a.job.id) is JobState.RETRY_WAIT
    # the upstream said wait: the limit's other jobs wait too
    assert await lease(store) == []
    await trio.sleep(0.5)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    again = await lease(store)
    assert sorted(lj.job.id for lj in again) == sorted([a.job.id, b.job.id])
    assert {lj.job.id: lj.job.attempts for lj in again}[a.job.id] == 1, "attempt not counted"
    assert {lj.job.id: lj.job.last_error for lj in again}[a.job.id] == "429"


@check(Capability.ADMIN, Capability.RATE_LIMITS, Capability.CONCURRENCY_LIMITS)
async def check_limit_usage_shows_held_slots_and_booked_permits(fresh: Fresh) -> None:
    store = await fresh()
    assert await store.limit_usage("q") == []
    await store.enqueue_many(
        [
            limited(f"u{n}", JobControl(caps=(("pool", 3),), rates=(("api", 1, 10.0, 2),)))
            for n in range(3)
        ]
    )
    now = await store.now()
    leased = await lease(store)
    assert len(leased) == 2, "two permits of a burst of 2"
    usage = {(u.kind, u.key): u for u in await store.limit_usage("q")}
    assert set(usage) == {("concurrency", "pool"), ("rate", "api")}
    assert usage[("concurrency", "pool")].in_use == 2
    booked = usage[("rate", "api")].booked_until
    assert booked is not None and now + 19 < booked <= now + 21, "two permits of 10 s booked"
    assert (await store.settle([settle(leased[0], SettleKind.SUCCEEDED)])).settled == (True,)
    usage = {(u.kind, u.key): u for u in await store.limit_usage("q")}
    assert usage[("concurrency", "pool")].in_use == 1
