"""Schedules edited at run time (``app.dynamic_schedules``) on the
MemoryStore under Trio's virtual clock: validation that stores nothing,
code ids authoritative, edits picked up by the leader within one tick, and
each (schedule, fire time) fired at most once (exactly once with
``fire_once``) across leader changes while the schedule is edited."""

from __future__ import annotations

import collections
import logging

import pytest
import trio

from chronos_trio import (
    App,
    JobContext,
    MemoryStore,
    PayloadError,
    ScheduleAlreadyStored,
    ScheduleNotStored,
    UnknownTask,
)
from chronos_trio.store import Capability, MissingCapability, StoredSchedules, TriggerResult
from chronos_trio.testing import MinimalStore
from tests.schedule_app import Fleet, Tick, anchored_store

#: An instant on a whole 60-second boundary (2025-06-15T15:06:00Z + ...).
BASE = 1_750_000_020.0
assert BASE % 60 == 0


def app_with_task(store: MemoryStore | None = None) -> App:
    app = App(store or MemoryStore())

    @app.task("tick")
    async def tick(args: Tick, job: JobContext) -> None:
        pass

    return app


def nothing(app: App, task: object) -> None:
    """A Fleet whose apps declare no schedule in code."""


# -- the API ------------------------------------------------------------------------------
async def test_add_change_pause_resume_remove_list() -> None:
    app = app_with_task()
    s = await app.dynamic_schedules.add("nightly", Tick("n"), task="tick", cron="0 3 * * *",
                                        tz="Europe/Paris")  # fmt: skip
    assert (s.id, s.kind, s.cron, s.tz) == ("nightly", "tick", "0 3 * * *", "Europe/Paris")
    await app.dynamic_schedules.add("often", Tick("o"), task="tick", every=30, queue="q2")
    [nightly, often] = await app.dynamic_schedules.list()
    assert nightly.schedule == s and not nightly.paused and not nightly.shadowed
    assert often.schedule is not None and often.schedule.queue == "q2"

    changed = await app.dynamic_schedules.change("often", Tick("o2"), task="tick", every=45)
    await app.dynamic_schedules.pause("often")
    got = await app.dynamic_schedules.get("often")
    assert got is not None and got.paused and got.schedule == changed
    await app.dynamic_schedules.change("often", Tick("o3"), task="tick", every=60)
    got = await app.dynamic_schedules.get("often")
    assert got is not None and got.paused, "a change keeps the paused flag"
    await app.dynamic_schedules.resume("often")
    await app.dynamic_schedules.remove("nightly")
    assert [e.id for e in await app.dynamic_schedules.list()] == ["often"]
    assert await app.dynamic_schedules.get("nightly") is None


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cron": "61 * * * *"}, ValueError, "bad cron spec"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, ValueError, "unknown timezone"),
        ({"every": 0.5}, ValueError, "at least 1"),
        ({}, ValueError, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": 60}, ValueError, "exactly one of cron= and every="),
        ({"every": 60, "task": "nope"}, UnknownTask, "does not register"),
        ({"every": 60, "payload": "not a Tick"}, PayloadError, "expected a Tick payload"),
        ({"every": 60, "misfire": "twice"}, ValueError, "unknown misfire policy"),
        ({"every": 60, "max_retries": -1}, ValueError, "max_retries"),
        ({"every": 60, "queues": "x"}, TypeError, "queue"),
        ({"every": 60, "schedule_id": "with space"}, ValueError, "bad schedule id"),
    ],
)
async def test_bad_input_raises_and_stores_nothing(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    app = app_with_task()
    kw = {"task": "tick", **options}
    payload = kw.pop("payload", Tick())
    schedule_id = kw.pop("schedule_id", "s")
    with pytest.raises(error, match=message):
        await app.dynamic_schedules.add(schedule_id, payload, **kw)  # type: ignore[arg-type]
    assert await app.store.stored_schedules(app.registry.leadership_name) == StoredSchedules(0, ())


async def test_external_task_goes_as_json() -> None:
    app = app_with_task()
    s = await app.dynamic_schedules.add("ext", {"a": 1}, task="elsewhere", every=60,
                                        external=True)  # fmt: skip
    assert s.external and s.payload == b'{"a":1}'


async def test_ids_conflicts_and_missing_ones_are_clear_errors() -> None:
    app = app_with_task()
    app.every(60, Tick(), task="tick", schedule_id="code")
    with pytest.raises(ValueError, match="declared in the app's code"):
        await app.dynamic_schedules.add("code", Tick(), task="tick", every=10)
    with pytest.raises(ValueError, match="declared in the app's code"):
        await app.dynamic_schedules.pause("code")
    await app.dynamic_schedules.add("s", Tick(), task="tick", every=10)
    with pytest.raises(ScheduleAlreadyStored, match="already stored"):
        await app.dynamic_schedules.add("s", Tick(), task="tick", every=20)
    for edit in ("pause", "resume", "remove"):
        with pytest.raises(ScheduleNotStored, match="no stored schedule 'x'"):
            await getattr(app.dynamic_schedules, edit)("x")
    with pytest.raises(ScheduleNotStored, match="no stored schedule 'x'"):
        await app.dynamic_schedules.change("x", Tick(), task="tick", every=10)
    [entry] = await app.dynamic_schedules.list()
    assert entry.schedule is not None and entry.schedule.interval == 10, "nothing changed"


async def test_a_store_without_the_role_is_refused() -> None:
    app = App(MinimalStore())
    with pytest.raises(MissingCapability, match="dynamic_schedules"):
        await app.dynamic_schedules.list()
    assert Capability.DYNAMIC_SCHEDULES.value == "dynamic_schedules"


# -- the leader fires them ------------------------------------------------------------------
def fires(fleet: Fleet) -> collections.Counter[tuple[str, float]]:
    return collections.Counter(
        (c.schedule_id, c.fire_at) for c in fleet.calls if c.result is TriggerResult.ENQUEUED
    )


def times(fleet: Fleet, schedule_id: str) -> list[float]:
    return sorted(t for (s, t) in fires(fleet) if s == schedule_id)


async def test_edits_take_effect_within_one_tick(autojump_clock: object) -> None:
    fleet = Fleet(anchored_store(BASE + 0.5), nothing, size=1)  # type: ignore[arg-type]
    with trio.fail_after(1000):
        async with fleet.running(scheduler_tick=1.0):
            app = fleet.workers["w0"].app
            await trio.sleep(5)
            added_at = await app.store.now()
            await app.dynamic_schedules.add("s", Tick(), task="tick", every=10)
            await trio.sleep(30.2)
            changed_at = await app.store.now()  # BASE + 35.7
            await app.dynamic_schedules.change("s", Tick(), task="tick", every=3)
            await trio.sleep(10)
            paused_at = await app.store.now()  # BASE + 45.7
            await app.dynamic_schedules.pause("s")
            await trio.sleep(20)
            resumed_at = await app.store.now()  # BASE + 65.7
            await app.dynamic_schedules.resume("s")
            await trio.sleep(7)
            await app.dynamic_schedules.remove("s")
            removed_at = await app.store.now()  # BASE + 72.7
            await trio.sleep(20)
    assert added_at == BASE + 5.5
    got = times(fleet, "s")
    assert got == [
        BASE + 10, BASE + 20, BASE + 30,  # every 10 s from the add on
        # every 3 s from the change (35.7) on: 36 is 0.3 s later, within a tick
        BASE + 36, BASE + 39, BASE + 42, BASE + 45,
        # paused at 45.7 (48 ... 63 never fire), resumed at 65.7
        BASE + 66, BASE + 69, BASE + 72,
        # removed at 72.7: 75 never fires
    ], got  # fmt: skip
    assert (changed_at, paused_at, resumed_at, removed_at) == pytest.approx(
        (BASE + 35.7, BASE + 45.7, BASE + 65.7, BASE + 72.7))  # fmt: skip
    assert set(fires(fleet).values()) == {1}


async def test_a_stored_schedule_with_a_code_schedules_id_is_ignored(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = anchored_store(BASE + 0.5)
    # another program stored "dup" before this app declared it in code
    other = app_with_task(store)
    await other.dynamic_schedules.add("dup", Tick("stored"), task="tick", every=1)

    def code(app: App, task: object) -> None:
        app.every(10, Tick("code"), task="tick", schedule_id="dup")

    fleet = Fleet(store, code, size=1)  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, "chronos_trio.scheduler")
    with trio.fail_after(100):
        async with fleet.running():
            await trio.sleep(35)
    # started 0.5 s after BASE: within the misfire grace, so BASE fires too
    assert times(fleet, "dup") == [BASE, BASE + 10, BASE + 20, BASE + 30], "the code's spec wins"
    assert "stored schedule ignored" in caplog.text and "code wins" in caplog.text
    rows = await other.dynamic_schedules.list()
    assert rows[0].id == "dup" and not rows[0].shadowed, "this app has no code schedule 'dup'"


@pytest.mark.parametrize("misfire", ["skip", "fire_once"])
async def test_failover_while_editing_fires_each_time_at_most_once(
    autojump_clock: object, misfire: str
) -> None:
    """Three workers; the schedule is changed, paused and resumed while the
    leader is stopped (it resigns) and then while the next one is cut off
    the store (its lease lapses): no (schedule, time) is enqueued twice,
    the triggers follow each edit from the next tick, and with
    ``fire_once`` the trigger missed during the lapse is fired once."""
    ttl = 6.0
    fleet = Fleet(anchored_store(BASE + 0.5), nothing, size=3)  # type: ignore[arg-type]
    opts = {"task": "tick", "misfire": misfire}
    with trio.fail_after(1000):
        async with fleet.running(leader_ttl=ttl, scheduler_tick=1.0):
            editor = app_with_task(fleet.store)  # type: ignore[arg-type]  # an admin program
            await editor.dynamic_schedules.add("s", Tick(), every=2, **opts)  # type: ignore[arg-type]
            await trio.sleep(10)
            [first] = fleet.leaders()
            async with trio.open_nursery() as nursery:  # the edit races the hand-over
                nursery.start_soon(fleet.stop, first)
                nursery.start_soon(
                    lambda: editor.dynamic_schedules.change("s", Tick(), every=1, **opts)  # type: ignore[arg-type]
                )
            while not fleet.leaders():
                await trio.sleep(0.01)
            [second] = fleet.leaders()
            await trio.sleep(10)
            fleet.stores[second].break_ops()  # cut off: its lease lapses
            cut_at = await editor.store.now()
            await editor.dynamic_schedules.pause("s")
            await trio.sleep(3)
            await editor.dynamic_schedules.resume("s")
            await editor.dynamic_schedules.change("s", Tick(), every=4, **opts)  # type: ignore[arg-type]
            while fleet.leaders() in ([], [second]) or second in fleet.leaders():
                await trio.sleep(0.01)
            took_over = await editor.store.now()
            await trio.sleep(20)
            fleet.stores[second].heal()
            await trio.sleep(10)
    counted = fires(fleet)
    assert set(counted.values()) == {1}, {k: n for k, n in counted.items() if n > 1}
    assert set(fleet.first_runs().values()) == {1}
    got = times(fleet, "s")
    assert all(t % 2 == 0 for t in got if t <= BASE + 10), "every 2 s before the change"
    assert all(t % 4 == 0 for t in got if t > cut_at + 4), "every 4 s after the last change"
    lapse = [t for t in got if cut_at < t < took_over - 1]
    if misfire == "fire_once":
        assert len(lapse) == 1, (cut_at, took_over, got)  # the catch-up: the latest missed
    else:
        assert lapse == [], (cut_at, took_over, got)
    firing = {c.worker for c in fleet.calls if c.result is TriggerResult.ENQUEUED}
    assert len(firing) == 3, "each leader in turn fired triggers"


async def test_the_leader_reads_the_schedules_only_when_their_version_moved(
    autojump_clock: object,
) -> None:
    fleet = Fleet(anchored_store(BASE + 0.5), nothing, size=1)  # type: ignore[arg-type]
    with trio.fail_after(1000):
        async with fleet.running(scheduler_tick=1.0):
            app = fleet.workers["w0"].app
            await app.dynamic_schedules.add("s", Tick(), task="tick", every=7)
            await trio.sleep(30)
            await app.dynamic_schedules.pause("s")
            await trio.sleep(30)
    calls = fleet.stores["w0"].calls
    # one version read per round (a round per tick at most: 60 s), a full
    # read for the first round and after each of the two edits
    assert 50 <= calls["schedules_version"] <= 65, calls
    assert calls["stored_schedules"] == 3, calls
