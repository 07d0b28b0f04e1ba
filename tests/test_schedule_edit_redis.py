"""Stored schedules edited while the leader changes, for real on Redis:
three ``tests/schedule_app.py`` worker processes whose app declares no
schedule (``stored``), a schedule added, changed, paused and resumed from
this process while the leader is SIGKILLed and SIGSTOPped: every
(schedule, fire time) enqueued at most once, and the edits followed."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import App, JobContext
from chronos_trio.store import ScheduleEdit
from chronos_trio.store.redis import RedisStore
from tests.schedule_app import Tick
from tests.test_schedule_redis import Cluster

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def editor(url: str) -> App:
    """An admin program of the same app (same name, same task)."""
    app = App(url)

    @app.task("tick")
    async def tick(args: Tick, job: JobContext) -> None:
        pass

    return app


async def test_edits_while_the_leader_is_killed_fire_each_time_once(
    redis_url: str, redis_store: Factory, tmp_path: Path
) -> None:
    store = await redis_store()
    admin = editor(redis_url)
    cluster = Cluster(redis_url, tmp_path, store, extra=("stored",))
    try:
        for i in range(3):
            cluster.spawn(f"w{i}")
        with trio.fail_after(90):
            await cluster.wait_ready()
            await admin.dynamic_schedules.add("st", Tick(), task="tick", every=1)
            old = await cluster.leader()
            await trio.sleep(3)
            assert len(cluster.fire_times()) >= 2, "the leader fires the stored schedule"
            # kill -9 the leader and change the spec while nobody leads
            cluster.procs[old.holder].send_signal(signal.SIGKILL)
            await admin.dynamic_schedules.change("st", Tick(), task="tick", every=2)
            changed_at = await store.now()
            new = await cluster.wait_new_leader(old)
            await trio.sleep(5)
            # pause it: nothing fires from the next tick on
            await admin.dynamic_schedules.pause("st")
            paused_at = await store.now()
            await trio.sleep(3)
            # SIGSTOP the leader, resume the schedule while the lease lapses
            cluster.procs[new.holder].send_signal(signal.SIGSTOP)
            await admin.dynamic_schedules.resume("st")
            resumed_at = await store.now()
            third = await cluster.wait_new_leader(new)
            await trio.sleep(4)
            cluster.procs[new.holder].send_signal(signal.SIGCONT)  # a stale ex-leader
            await trio.sleep(3)
            fired = cluster.fire_times()  # asserts each first attempt ran once
            last = await store.schedule_last_fired(admin.registry.leadership_name)
    finally:
        cluster.close()
        await admin.store.aclose()
    assert third.holder not in (old.holder, new.holder)
    tick = 1.0
    after_change = [t for t in fired if t > changed_at + tick]
    assert after_change and all(t % 2 == 0 for t in after_change), fired
    paused = [t for t in fired if paused_at + tick < t <= resumed_at]
    assert paused == [], "nothing fires while paused"
    assert [t for t in fired if t > resumed_at + tick], "it fires again after resume"
    assert last["st"] == max(fired)


async def test_an_unreadable_stored_value_is_left_out_and_logged(
    redis_url: str, redis_store: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    store = await redis_store()
    name = "app:leader"
    assert await store.edit_schedule(name, ScheduleEdit.ADD, "good", '{"a": 1}') == 1
    keys = store._ctx.keys.leader(name)
    tags = {key.split("}")[0] for key in (keys.schedules, keys.schedules_version, keys.lead)}
    assert len(tags) == 1, "one hash tag: every schedule script touches one slot"
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.hset(keys.schedules, "bad", b"no separators")
    finally:
        raw.close()
    got = await store.stored_schedules(name)
    assert [s.id for s in got.schedules] == ["good"] and got.version == 1
    assert "stored schedule unreadable" in caplog.text
    # an edit of the damaged entry still applies (a change keeps it not paused)
    assert await store.edit_schedule(name, ScheduleEdit.CHANGE, "bad", "{}") == 2
    got = await store.stored_schedules(name)
    assert [(s.id, s.paused) for s in got.schedules] == [("bad", False), ("good", False)]
