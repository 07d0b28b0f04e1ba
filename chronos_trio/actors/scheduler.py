"""scheduler: fires the app's cron and interval triggers, on the leader only.

While ``rt.leadership`` holds this worker's leadership it reads the trigger
bookkeeping (last fired per schedule) from the store once, then loops: read
the store's clock, fire every due trigger through ``store.enqueue_trigger``
with the leadership's epoch, sleep until the next trigger (at most
``scheduler_tick``), waking at once if leadership changes. Guarantees:

* **Once per trigger.** The store records each trigger and enqueues its job
  (deterministic ID) in one fenced step: it refuses an epoch that is not the
  current one, and a trigger at or before the schedule's last fired time. A
  paused ex-leader that wakes up is rejected (logged as "stale epoch
  rejected") and steps down; a new leader never fires a trigger twice.
* **Misfires** follow each schedule's policy, judged against the store's
  clock with ``misfire_grace`` (see :meth:`Schedule.due_triggers`).
* A round that has started runs to its end even if leadership is lost in the
  meantime: the store's fence, not this process's belief, decides.
* **Schedules edited at run time** (kept in the store,
  :class:`~chronos_trio.store.ScheduleStoreRole`) are fired beside the
  code's: each round reads the store's schedules version (one cheap read)
  and the schedules only when it moved, so an edit (add, change, pause,
  resume, remove) takes effect from the next round, at most
  ``scheduler_tick`` later. A stored schedule with a code schedule's id is
  ignored (logged): code is authoritative for its names.
* Store errors are backed off; a trigger that could not be fired within the
  grace window is a misfire.
"""

from __future__ import annotations

import logging

import trio

from ..records._log import log_event
from ..runtime._backoff import Backoff
from ..runtime._schedule import Schedule
from ..runtime._state import Runtime
from ..runtime._stored_schedules import ScheduleFeed
from ..store import Leadership, StoreError, TriggerResult

log = logging.getLogger("chronos_trio.scheduler")


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    while True:
        lead: Leadership = await rt.leadership.wait_value(lambda v: v is not None)
        await _fire_while_leading(rt, lead)


async def _fire_while_leading(rt: Runtime, lead: Leadership) -> None:
    """Fire due triggers until ``lead`` is no longer this worker's leadership."""
    store = rt.store
    cfg = rt.config
    backoff = Backoff(log, "scheduler")
    # The code's schedules and the store's (one version read per round, a
    # full read only when it moved: an edit is fired from the next round).
    feed = ScheduleFeed(store, lead.name, rt.registry.schedules, log)
    # This worker is the only writer while it leads, so the store's
    # bookkeeping is read once per leadership and then followed locally.
    last_fired: dict[str, float] | None = None
    # Each schedule's next trigger after the last round that handled it: until
    # the store's clock reaches it, nothing can be due (saves cron arithmetic).
    # Keyed by the schedule itself, so a changed spec starts afresh.
    upcoming: dict[Schedule, float] = {}
    schedules: list[Schedule] = []
    while True:
        try:
            schedules = await feed.current()
            if not schedules:
                upcoming.clear()
                with trio.move_on_after(cfg.scheduler_tick):
                    await rt.leadership.wait_value(lambda v: v != lead)
                    return
                continue
            if last_fired is None:
                last_fired = await store.schedule_last_fired(lead.name)
            now = await store.now()
            read_at = trio.current_time()
            if len(upcoming) > len(schedules):  # forget the ones changed or removed
                live = set(schedules)
                upcoming = {s: t for s, t in upcoming.items() if s in live}
            for schedule in schedules:
                if now < upcoming.get(schedule, now):
                    continue
                due = schedule.due_triggers(last_fired.get(schedule.id), now, cfg.misfire_grace)
                for fire_at in due:
                    job = schedule.new_job(fire_at, rt.registry.tasks.get(schedule.kind))
                    result = await store.enqueue_trigger(
                        lead.name, lead.epoch, schedule.id, fire_at, job
                    )
                    if result is TriggerResult.STALE_EPOCH:
                        log_event(
                            log,
                            logging.WARNING,
                            "stale epoch rejected: no longer the leader, trigger not fired; "
                            "stepping down",
                            holder=lead.holder,
                            lock=lead.name,
                            epoch=lead.epoch,
                            trigger=job.id,
                            schedule=schedule.id,
                        )
                        if rt.leadership.value == lead:
                            rt.leadership.value = None
                        return
                    last_fired[schedule.id] = max(fire_at, last_fired.get(schedule.id, fire_at))
                    if result is TriggerResult.ENQUEUED:
                        rt.counters.triggered += 1
                        log_event(
                            log,
                            logging.INFO,
                            "fired",
                            job=job.id,
                            schedule=schedule.id,
                            spec=schedule.spec,
                        )
                upcoming[schedule] = schedule.next_after(now)
        except StoreError as exc:
            # Bounded by a tick: a trigger retried later than its grace is lost.
            with trio.move_on_after(cfg.scheduler_tick):
                await backoff.failed(exc)
            if rt.leadership.value != lead:
                return
            continue
        backoff.reset()
        wait = cfg.scheduler_tick
        for schedule in schedules:
            wait = min(wait, upcoming.get(schedule, now) - now)
        with trio.move_on_at(read_at + max(0.0, wait)):
            await rt.leadership.wait_value(lambda v: v != lead)
            return
