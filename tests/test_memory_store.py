"""MemoryStore behaviour beyond the conformance suite (white-box where the
point is what another task can observe between two checkpoints)."""

from __future__ import annotations

import trio

from chronos_trio.records import NewJob
from chronos_trio.store import MemoryStore, TriggerResult


async def _fire_and_cancel_when_seen(store: MemoryStore, epoch: int, fire_at: float) -> bool:
    """Fire a trigger while a watcher looks at every checkpoint and cancels
    the trigger the first time it shows as fired, as a step-down racing the
    trigger would. Returns whether its job existed when the watcher saw it."""
    job = NewJob(f"sched:s:{fire_at}", "q", "k", b"{}")
    scope = trio.CancelScope()
    seen: list[bool] = []

    async def fire() -> None:
        with scope:
            await store.enqueue_trigger("cron", epoch, "s", fire_at, job)

    async def watch() -> None:
        for _ in range(100):  # bounded: a trigger takes a handful of checkpoints
            if store._last_fired.get("cron", {}).get("s") == fire_at:
                seen.append(job.id in store._records)
                scope.cancel()
                return
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fire)
        nursery.start_soon(watch)
    assert seen, "the watcher never saw the trigger"
    assert await store.get_job(job.id) is not None, f"trigger {fire_at} lost its job"
    again = await store.enqueue_trigger("cron", epoch, "s", fire_at, job)
    assert again is TriggerResult.ALREADY_FIRED
    return seen[0]


async def test_a_cancelled_trigger_never_loses_its_job(autojump_clock: object) -> None:
    """A trigger is recorded and its job enqueued in one step: a cancellation
    that arrives while the trigger runs (a leader stepping down, shutdown)
    cannot leave it recorded as fired with no job, a fire that would then be
    skipped for good (the MemoryStore has no pending-trigger log to redo it).

    Trio orders the tasks of one scheduling batch at random, so the watcher
    gets its chance between two steps of a trigger in only some runs; twenty
    triggers make a store with such a gap fail all but surely."""
    store = MemoryStore()
    lead = await store.acquire_leadership("cron", "A", 600)
    assert lead is not None
    for n in range(20):
        assert await _fire_and_cancel_when_seen(store, lead.epoch, 1000.0 + n), (
            f"trigger {n} was visible as fired before its job was enqueued"
        )
