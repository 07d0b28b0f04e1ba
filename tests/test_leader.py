"""The leader-elector on the MemoryStore under Trio's virtual clock: it takes
the lease, renews it, steps down when refused or cut off (before its lease
expires), resigns on the way out, and followers take over on time."""

from __future__ import annotations

import pytest
import trio

from chronos_trio import App, Leadership, Task, leadership_name
from tests.schedule_app import Fleet, Tick, anchored_store

NAME = leadership_name("chronos")
TTL = 6.0


def no_schedules(app: App, task: Task[Tick]) -> None:
    return None


async def wait_leaders(fleet: Fleet, predicate: object) -> list[str]:
    while not predicate(fleet.leaders()):  # type: ignore[operator]
        await trio.sleep(0.01)
    return fleet.leaders()


async def test_one_worker_leads_and_keeps_renewing(autojump_clock: object) -> None:
    store = anchored_store(1000.0)
    fleet = Fleet(store, no_schedules, size=3)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            [leader] = fleet.leaders()
            assert leader == "w0", "the first to start wins"
            held = fleet.workers[leader].runtime.leadership.value
            assert held == Leadership(NAME, "w0", 1, 1000.0 + TTL)
            for _ in range(10):
                await trio.sleep(TTL / 2)
                current = await store.current_leader(NAME)
                assert current is not None and (current.holder, current.epoch) == ("w0", 1)
                assert fleet.leaders() == ["w0"]
        assert await store.current_leader(NAME) is None, "resigned on shutdown"


async def test_refused_renewal_steps_down_within_a_heartbeat(autojump_clock: object) -> None:
    store = anchored_store(1000.0)
    fleet = Fleet(store, no_schedules, size=1)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            await trio.sleep(0.5)
            assert await store.resign_leadership(NAME, "w0", 1)
            taken = await store.acquire_leadership(NAME, "intruder", 3 * TTL)
            assert taken is not None and taken.epoch == 2
            since = trio.current_time()
            await wait_leaders(fleet, lambda leaders: leaders == [])
            assert trio.current_time() - since <= TTL / 2  # at its next renewal
            # Back as soon as the intruder's lease expires, with a new epoch.
            [leader] = await wait_leaders(fleet, lambda leaders: leaders != [])
            assert trio.current_time() - since == pytest.approx(3 * TTL, abs=0.01)
            lead = fleet.workers[leader].runtime.leadership.value
            assert lead is not None and lead.epoch == 3


async def test_cut_off_leader_steps_down_before_its_lease_expires(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = anchored_store(1000.0)
    fleet = Fleet(store, no_schedules, size=2)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            await trio.sleep(1.3)
            fleet.stores["w0"].break_ops()  # w0 can no longer reach the store
            lease = await store.current_leader(NAME)
            assert lease is not None and lease.holder == "w0"
            await wait_leaders(fleet, lambda leaders: leaders == [])
            stepped_down = await store.now()
            [leader] = await wait_leaders(fleet, lambda leaders: leaders != [])
            took_over = await store.now()
            fleet.stores["w0"].heal()
            await trio.sleep(TTL)
            assert fleet.leaders() == ["w1"], "the healed ex-leader stays a follower"
    assert leader == "w1"
    # w0 gave up no later than its lease ran out, w1 took over right then.
    assert stepped_down == pytest.approx(lease.expires_at - 0.05 * TTL, abs=0.01)
    assert took_over == pytest.approx(lease.expires_at, abs=0.01)
    assert any("before its lease expired" in r.getMessage() for r in caplog.records)


async def test_stopping_the_leader_hands_over_at_once(autojump_clock: object) -> None:
    fleet = Fleet(anchored_store(1000.0), no_schedules, size=3)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            await trio.sleep(1)
            since = trio.current_time()
            await fleet.stop("w0")
            [leader] = await wait_leaders(fleet, lambda leaders: leaders != [])
            assert trio.current_time() - since <= TTL / 3
            lead = fleet.workers[leader].runtime.leadership.value
            assert lead is not None and lead.epoch == 2


async def test_crashed_elector_resigns_and_comes_back(autojump_clock: object) -> None:
    store = anchored_store(1000.0)
    fleet = Fleet(store, no_schedules, size=1)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            await trio.sleep(1)
            worker = fleet.workers["w0"]
            worker.crash_actor("leader")
            await trio.sleep(0.1)
            lead = worker.runtime.leadership.value
            assert lead is not None and lead.epoch == 2, "resigned, then re-elected"
            assert worker.statistics().restarts == {"leader": 1}


async def test_store_outage_is_backed_off_not_crashed_on(autojump_clock: object) -> None:
    store = anchored_store(1000.0)
    fleet = Fleet(store, no_schedules, size=1)
    with trio.fail_after(100):
        async with fleet.running(leader_ttl=TTL):
            await trio.sleep(1)
            fleet.stores["w0"].break_ops("renew_leadership", "acquire_leadership")
            await trio.sleep(3 * TTL)
            assert fleet.leaders() == []
            fleet.stores["w0"].heal()
            await trio.sleep(TTL)
            assert fleet.leaders() == ["w0"]
            assert fleet.workers["w0"].statistics().restarts == {}
