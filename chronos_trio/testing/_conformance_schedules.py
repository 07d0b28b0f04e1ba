"""Conformance checks of stored schedules
(:class:`~chronos_trio.store.ScheduleStoreRole`): each edit atomic and
refused as the contract says, the version moving once per applied edit,
names apart, and a schedule's last fired time kept across edits.
Registered in :data:`~chronos_trio.testing.conformance.CHECKS` like the
others when ``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..store._capabilities import Capability
from ..store._results import ScheduleEdit, StoredSchedule, StoredSchedules, TriggerResult
from .conformance import Fresh, check, job

_SLACK = 0.01


@check(Capability.DYNAMIC_SCHEDULES)
async def check_schedule_edits_and_versions(fresh: Fresh) -> None:
    store = await fresh()
    assert await store.schedules_version("app:leader") == 0
    assert await store.stored_schedules("app:leader") == StoredSchedules(0, ())
    before = await store.now()
    assert await store.edit_schedule("app:leader", ScheduleEdit.ADD, "b", '{"x": 1}') == 1
    assert await store.edit_schedule("app:leader", ScheduleEdit.ADD, "a", '{"y": 2}') == 2
    after = await store.now()
    # an ADD of a stored id, any other edit of a missing one: refused, nothing moves
    assert await store.edit_schedule("app:leader", ScheduleEdit.ADD, "a", "{}") is None
    for edit in (ScheduleEdit.PAUSE, ScheduleEdit.RESUME, ScheduleEdit.REMOVE):
        assert await store.edit_schedule("app:leader", edit, "nope") is None
    assert await store.edit_schedule("app:leader", ScheduleEdit.CHANGE, "nope", "{}") is None
    assert await store.schedules_version("app:leader") == 2
    got = await store.stored_schedules("app:leader")
    assert got.version == 2 and [s.id for s in got.schedules] == ["a", "b"], got
    a, b = got.schedules
    assert (a.definition, a.paused, b.definition, b.paused) == (
        '{"y": 2}',
        False,
        '{"x": 1}',
        False,
    )
    assert before - _SLACK <= a.updated_at <= after + _SLACK, "stamped by the store's clock"

    assert await store.edit_schedule("app:leader", ScheduleEdit.PAUSE, "a") == 3
    assert await store.edit_schedule("app:leader", ScheduleEdit.CHANGE, "a", '{"y": 3}') == 4
    got = await store.stored_schedules("app:leader")
    assert got.schedules[0] == StoredSchedule("a", '{"y": 3}', True, got.schedules[0].updated_at)
    assert await store.edit_schedule("app:leader", ScheduleEdit.PAUSE, "a") == 5, "idempotent"
    assert await store.edit_schedule("app:leader", ScheduleEdit.RESUME, "a") == 6
    got = await store.stored_schedules("app:leader")
    assert got.schedules[0].paused is False and got.schedules[0].definition == '{"y": 3}'

    assert await store.edit_schedule("app:leader", ScheduleEdit.REMOVE, "a") == 7
    assert await store.edit_schedule("app:leader", ScheduleEdit.REMOVE, "b") == 8
    assert await store.stored_schedules("app:leader") == StoredSchedules(8, ())
    assert await store.schedules_version("app:leader") == 8, "a version is never reused"
    assert await store.stored_schedules("other:leader") == StoredSchedules(0, ())


@check(Capability.DYNAMIC_SCHEDULES)
async def check_schedule_edits_refuse_bad_arguments(fresh: Fresh) -> None:
    store = await fresh()
    bad: list[tuple[ScheduleEdit, str, str | None]] = [
        (ScheduleEdit.ADD, "a", None),
        (ScheduleEdit.ADD, "a", ""),
        (ScheduleEdit.CHANGE, "a", None),
        (ScheduleEdit.PAUSE, "a", "{}"),
        (ScheduleEdit.ADD, "", "{}"),
    ]
    for edit, schedule_id, definition in bad:
        try:
            await store.edit_schedule("app:leader", edit, schedule_id, definition)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{edit} of {schedule_id!r} with {definition!r} must be refused")
    assert await store.stored_schedules("app:leader") == StoredSchedules(0, ())


@check(Capability.DYNAMIC_SCHEDULES, Capability.LEADERSHIP)
async def check_edits_keep_the_last_fired_time(fresh: Fresh) -> None:
    """An edit never rewinds a schedule's trigger bookkeeping: a changed, or
    removed and added again, schedule does not fire a fired time again."""
    store = await fresh()
    lead = await store.acquire_leadership("app:leader", "A", 5)
    assert lead is not None
    await store.edit_schedule("app:leader", ScheduleEdit.ADD, "s", "{}")
    t = 1_000_000.0
    fired = await store.enqueue_trigger("app:leader", lead.epoch, "s", t, job("sched:s:1"))
    assert fired is TriggerResult.ENQUEUED
    await store.edit_schedule("app:leader", ScheduleEdit.CHANGE, "s", '{"changed": 1}')
    await store.edit_schedule("app:leader", ScheduleEdit.REMOVE, "s")
    await store.edit_schedule("app:leader", ScheduleEdit.ADD, "s", "{}")
    assert (await store.schedule_last_fired("app:leader"))["s"] == t
    again = await store.enqueue_trigger("app:leader", lead.epoch, "s", t, job("sched:s:1"))
    assert again is TriggerResult.ALREADY_FIRED


@check(Capability.DYNAMIC_SCHEDULES)
async def check_concurrent_adds_of_one_id_store_one(fresh: Fresh) -> None:
    store = await fresh()
    answers: list[int | None] = []

    async def add(n: int) -> None:
        answers.append(
            await store.edit_schedule("app:leader", ScheduleEdit.ADD, "s", f'{{"n": {n}}}')
        )

    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(add, n)
    assert sorted(a for a in answers if a is not None) == [1], answers
    got = await store.stored_schedules("app:leader")
    assert got.version == 1 and len(got.schedules) == 1
