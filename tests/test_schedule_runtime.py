"""Schedules fired by workers on the MemoryStore under Trio's virtual clock:
exact fire times, exactly once across several workers, misfire policies after
downtime, cron across DST changes, and the inspector rows."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest
import trio

from chronos_trio import (
    App,
    JobContext,
    Schedule,
    Task,
    UnknownTask,
    leadership_name,
    schedule_rows,
)
from chronos_trio.store import TriggerResult
from tests.schedule_app import Fleet, Tick, anchored_store

BERLIN = ZoneInfo("Europe/Berlin")
#: An instant on a whole 10-second boundary (2025-06-15T15:06:40Z).
BASE = 1_750_000_000.0
#: Worker options for runs over virtual days: nothing wakes more than needed.
SLOW = {
    "scheduler_tick": 60.0,
    "leader_ttl": 600.0,
    "poll_interval": 60.0,
    "lease_duration": 600.0,
    "recover_interval": 60.0,
    "janitor_interval": 3600.0,
}


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC).timestamp()


def every(seconds: float, **options: object) -> object:
    def register(app: App, task: Task[Tick]) -> Schedule:
        return app.every(seconds, Tick(), task=task, **options)  # type: ignore[arg-type]

    return register


def cron(spec: str, **options: object) -> object:
    def register(app: App, task: Task[Tick]) -> Schedule:
        return app.cron(spec, Tick(), task=task, **options)  # type: ignore[arg-type]

    return register


async def test_interval_fires_at_exact_times(autojump_clock: object) -> None:
    fleet = Fleet(anchored_store(BASE + 3), every(10), size=1)  # type: ignore[arg-type]
    with trio.fail_after(100):
        async with fleet.running():
            await trio.sleep(35)
    assert fleet.enqueued() == [BASE + 10, BASE + 20, BASE + 30]
    assert [r.fire_at for r in fleet.runs] == fleet.enqueued()
    assert [r.ran_at for r in fleet.runs] == pytest.approx(fleet.enqueued(), abs=1e-6)
    [schedule] = fleet.workers["w0"].app.schedules
    assert [r.job_id for r in fleet.runs] == [
        f"sched:{schedule.id}:{round(t * 1000)}" for t in fleet.enqueued()
    ]


async def test_cron_fires_at_exact_times(autojump_clock: object) -> None:
    start = utc(2025, 6, 15, 12, 0, 30)
    fleet = Fleet(anchored_store(start), cron("*/2 * * * *"), size=1)  # type: ignore[arg-type]
    with trio.fail_after(1000):
        async with fleet.running():
            await trio.sleep(7 * 60)
    assert fleet.enqueued() == [utc(2025, 6, 15, 12, m) for m in (2, 4, 6)]
    assert [r.ran_at for r in fleet.runs] == pytest.approx(fleet.enqueued(), abs=1e-6)


async def test_three_workers_fire_each_trigger_exactly_once(autojump_clock: object) -> None:
    fleet = Fleet(anchored_store(BASE + 0.5), every(1))  # type: ignore[arg-type]
    with trio.fail_after(300):
        async with fleet.running():
            await trio.sleep(60)
            [leader] = fleet.leaders()
            # The leader-elector crashes: it resigns on the way out and comes back.
            fleet.workers[leader].crash_actor("leader")
            await trio.sleep(20)
            # The scheduler crashes: restarted under the same leadership.
            [leader] = fleet.leaders()
            fleet.workers[leader].crash_actor("scheduler")
            await trio.sleep(20)
    fired = fleet.enqueued()
    # Started 0.5 s after BASE: within the misfire grace, so BASE fires too.
    assert fired == [BASE + k for k in range(101)], "every trigger, in order, no gap"
    assert set(fleet.first_runs().values()) == {1} and len(fleet.first_runs()) == 101
    assert {c.worker for c in fleet.calls} <= set(fleet.workers)


async def test_failover_when_the_leader_stops_or_is_cut_off(autojump_clock: object) -> None:
    ttl = 6.0
    fleet = Fleet(anchored_store(BASE + 0.5), every(1))  # type: ignore[arg-type]
    with trio.fail_after(300):
        async with fleet.running(leader_ttl=ttl):
            await trio.sleep(20)
            [first] = fleet.leaders()
            stopped_at = trio.current_time()
            await fleet.stop(first)  # graceful: resigns at once
            while not fleet.leaders():
                await trio.sleep(0.01)
            handover = trio.current_time() - stopped_at
            [second] = fleet.leaders()
            await trio.sleep(20)
            # Now cut the new leader off the store (a crash, as far as the
            # others can tell): it must step down by its own deadline and a
            # follower must take over once the lease expires.
            fleet.stores[second].break_ops()
            cut_at = trio.current_time()
            while fleet.leaders() in ([second], []):
                await trio.sleep(0.01)
            takeover = trio.current_time() - cut_at
            [third] = fleet.leaders()
            await trio.sleep(20)
            fleet.stores[second].heal()
            await trio.sleep(5)
    assert second != first and third not in (first, second)
    assert handover <= ttl / 3 + 0.01, "a resigning leader is replaced within ttl/3"
    assert takeover <= ttl + 0.01, "a dead leader is replaced within its lease"
    fired = fleet.enqueued()
    assert len(set(fired)) == len(fired), "no trigger enqueued twice"
    assert set(fleet.first_runs().values()) == {1}
    gaps = [b - a for a, b in itertools.pairwise(fired)]
    assert max(gaps) <= ttl + 1, "gap without a trigger at most lease + one tick"
    # The cut-off leader stepped down before anyone else could lead.
    epochs = [c.epoch for c in fleet.calls]
    assert epochs == sorted(epochs)


async def test_stale_epoch_is_rejected_and_the_ex_leader_steps_down(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = anchored_store(BASE + 0.5)
    fleet = Fleet(store, every(1), size=1)  # type: ignore[arg-type]
    name = leadership_name("chronos")
    with trio.fail_after(300):
        # A long lease: the scheduler, not the renewal, finds out first.
        async with fleet.running(leader_ttl=300):
            await trio.sleep(5)
            worker = fleet.workers["w0"]
            old = worker.runtime.leadership.value
            assert old is not None
            # Someone else takes leadership behind w0's back (as if w0 had
            # been paused past its lease): w0's next trigger must bounce.
            assert await store.resign_leadership(name, "w0", old.epoch)
            usurper = await store.acquire_leadership(name, "usurper", 30)
            assert usurper is not None and usurper.epoch == old.epoch + 1
            await trio.sleep(1)
            assert worker.runtime.leadership.value is None, "stepped down at once"
            # A paused ex-leader calling in directly is refused as well.
            [schedule] = worker.app.schedules
            job = schedule.new_job(BASE + 7)
            assert await store.enqueue_trigger(name, old.epoch, schedule.id, BASE + 7, job) is (
                TriggerResult.STALE_EPOCH
            )
            assert await store.get_job(job.id) is None
            await trio.sleep(40)  # the usurper's lease runs out; w0 leads again
            lead = worker.runtime.leadership.value
            assert lead is not None and lead.epoch == old.epoch + 2
    stale = [c for c in fleet.calls if c.result is TriggerResult.STALE_EPOCH]
    assert [(c.epoch, c.fire_at) for c in stale] == [(old.epoch, BASE + 6)]
    assert any("stale epoch rejected" in r.getMessage() for r in caplog.records)
    fired = fleet.enqueued()
    assert fired[:6] == [BASE + k for k in range(6)]
    # Nothing fired while the usurper (which fires nothing) held the lease;
    # w0 took over when it expired at BASE+35.5 and resumed on schedule
    # (misfire "skip": BASE+35 is within the grace, BASE+7..34 are dropped).
    assert fired[6:] == [BASE + k for k in range(35, 47)]
    assert len(set(fired)) == len(fired)


@pytest.mark.parametrize(
    ("misfire", "after_restart"),
    [
        ("skip", [130.0, 140.0, 150.0]),
        ("fire_once", [120.0, 130.0, 140.0, 150.0]),  # one catch-up, at once
    ],
)
async def test_misfire_policy_after_downtime(
    misfire: str, after_restart: list[float], autojump_clock: object
) -> None:
    store = anchored_store(BASE + 0.5)
    with trio.fail_after(300):
        first = Fleet(store, every(10, misfire=misfire), size=1)  # type: ignore[arg-type]
        async with first.running():
            await trio.sleep(25)  # fires at +0 (0.5 s late: within grace), +10, +20
        await trio.sleep(100)  # nobody runs: +30 .. +120 are missed
        second = Fleet(store, every(10, misfire=misfire), size=1)  # type: ignore[arg-type]
        async with second.running():
            restarted = await store.now()
            await trio.sleep(30)
    assert first.enqueued() == [BASE, BASE + 10, BASE + 20]
    assert restarted == pytest.approx(BASE + 125.5)
    assert second.enqueued() == [BASE + t for t in after_restart]
    # The catch-up job ran when the new leader started, the rest on time.
    ran = [r.ran_at for r in second.runs]
    expected = [max(BASE + t, restarted) for t in after_restart]
    assert ran == pytest.approx(expected, abs=1e-6)


async def test_cron_in_berlin_across_spring_forward(autojump_clock: object) -> None:
    # 2025-03-30 02:00 CET -> 03:00 CEST: 02:30 never happens that night.
    fleet = Fleet(
        anchored_store(utc(2025, 3, 28, 12)),
        cron("30 2 * * *", tz="Europe/Berlin"),  # type: ignore[arg-type]
        size=1,
    )
    with trio.fail_after(10 * 86400):
        async with fleet.running(**SLOW):
            await trio.sleep(4 * 86400)
    fired = fleet.enqueued()
    assert fired == [
        utc(2025, 3, 29, 1, 30),  # 02:30 CET
        utc(2025, 3, 30, 1, 0),  # 03:00 CEST: right after the gap, once
        utc(2025, 3, 31, 0, 30),  # 02:30 CEST
        utc(2025, 4, 1, 0, 30),
    ]
    assert [r.ran_at for r in fleet.runs] == pytest.approx(fired, abs=1e-6)


async def test_cron_in_berlin_across_fall_back(autojump_clock: object) -> None:
    # 2025-10-26 03:00 CEST -> 02:00 CET: 02:00-02:59 happens twice.
    fleet = Fleet(
        anchored_store(utc(2025, 10, 25, 21, 30)),
        cron("0 * * * *", tz="Europe/Berlin"),  # type: ignore[arg-type]
        size=2,
    )
    daily = Fleet(
        anchored_store(utc(2025, 10, 25, 21, 30)),
        cron("30 2 * * *", tz="Europe/Berlin"),  # type: ignore[arg-type]
        size=1,
    )
    with trio.fail_after(10 * 86400):
        async with fleet.running(**SLOW), daily.running(**SLOW):
            await trio.sleep(30 * 3600)
    hourly = fleet.enqueued()
    assert hourly[:7] == [utc(2025, 10, 25, 22) + 3600 * i for i in range(7)]
    assert [dt.datetime.fromtimestamp(t, BERLIN).strftime("%H:%M%z") for t in hourly[1:4]] == [
        "01:00+0200",
        "02:00+0200",
        "02:00+0100",
    ]
    assert len(hourly) == 30 and len(set(hourly)) == 30, "once per elapsed hour"
    # A fixed-time job runs once in the repeated hour (its first pass).
    assert daily.enqueued() == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]


async def test_schedule_rows_for_the_inspector(autojump_clock: object) -> None:
    store = anchored_store(BASE + 0.5)
    fleet = Fleet(store, every(10), size=1)  # type: ignore[arg-type]
    app = fleet.make_app("inspector")
    app.cron("0 3 * * *", Tick(), task="tick", tz="Europe/Berlin", schedule_id="nightly")
    [idle_every, _] = await schedule_rows(app)
    assert idle_every.leader is None and idle_every.epoch is None
    assert idle_every.last_run is None and idle_every.next_run == BASE + 10
    with trio.fail_after(100):
        async with fleet.running():
            await trio.sleep(25)
            rows = await schedule_rows(app)
    every_row, nightly = rows
    assert every_row.spec == "every 10s" and every_row.tz == "UTC"
    assert (every_row.last_run, every_row.next_run) == (BASE + 20, BASE + 30)
    assert (every_row.leader, every_row.epoch) == ("w0", 1)
    assert every_row.queue == "default" and every_row.misfire == "skip"
    assert (nightly.id, nightly.spec, nightly.tz, nightly.last_run) == (
        "nightly",
        "0 3 * * *",
        "Europe/Berlin",
        None,
    )
    assert nightly.next_run is not None
    assert dt.datetime.fromtimestamp(nightly.next_run, BERLIN).strftime("%H:%M") == "03:00"


async def test_only_the_leader_trims(autojump_clock: object) -> None:
    fleet = Fleet(anchored_store(BASE), lambda app, task: None, size=3)
    with trio.fail_after(100):
        async with fleet.running(janitor_interval=1.0):
            await trio.sleep(10)
            [leader] = fleet.leaders()
    trims = {wid: s.calls["trim"] for wid, s in fleet.stores.items()}
    assert trims[leader] >= 10
    assert all(n == 0 for wid, n in trims.items() if wid != leader)


async def test_a_worker_refuses_a_schedule_of_an_unknown_task(autojump_clock: object) -> None:
    """On main, ``every(60, task="reprot.daily")`` fired a job each minute
    that went dead at once, for ever. Now the worker refuses to start,
    naming the schedule and the close match, and nothing is enqueued."""
    app = App(anchored_store(BASE))

    @app.task("report.daily")
    async def report(args: Tick, job: JobContext) -> None: ...

    app.every(60, Tick(), task="reprot.daily")
    with pytest.raises(UnknownTask, match=r"did you mean 'report.daily'\?"):
        with trio.fail_after(10):
            async with app.open_worker(**SLOW):
                await trio.sleep(3 * 3600)
    [stats] = await app.store.stats(["default"])
    assert stats.total == 0, "no trigger was fired"
