"""leaser: ready -> leased, in batches sized by free in-flight slots.

Asks the store for at most ``min(batch_size, free slots)`` jobs, so a slow
worker leases less; waits on the store's wake-up when nothing is ready.
Leased jobs enter the in-flight table at once and then its run queue, as
fast as the queue has room. After a full batch it leases again at once (the
round trip overlaps the handlers); after a short one it first lets the
executors it woke start their handlers, so an idle worker's pickup does not
wait for a lease that will most likely come back empty. Idle (its last
lease short, nothing held back), it waits for a wake-up with
``store.wait_lease``, which leases with the wake-up in one round trip
where the store offers it (one Redis node: the lease runs in Redis right
when the wake-up read returns) within ``wait_lease_window`` (worker option) of
its last lease of a job it has a handler for; otherwise ``wait_ready``, then
a lease.

With ``max_jobs`` (recycling) it leases that many jobs in all, then no
more, and tells the runtime's ``recycle`` so (see ``runtime._recycle``).
"""

from __future__ import annotations

import math

import trio

from ..runtime._backoff import Backoff
from ..runtime._inflight import Stage
from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    names = cfg.queue_names
    table = rt.table
    backoff = Backoff(log, "leaser")
    task_status.started()
    # Leases a previous incarnation took (or the completer was handed) but
    # never queued.
    await rt.dispatch(table.in_stage(Stage.LEASED))
    # The last lease was short, nothing held back: wait for a wake-up and
    # lease with it (one round trip where the store offers it). Where it is
    # not offered, as before: after no jobs wait_ready then lease, after a
    # short batch lease at once.
    idle = found_none = False
    warm_until = -math.inf  # wait_lease only until then (wait_lease_window)
    while True:
        await table.wait_free()
        want = min(cfg.batch_size, table.free)
        if cfg.max_jobs is not None:  # recycling: never lease more than it will run
            want = min(want, cfg.max_jobs - rt.counters.leased)
            if want <= 0:
                rt.recycle.jobs_capped.set()
                await trio.sleep_forever()
        asked_at = trio.current_time()
        result = None
        if idle:
            warm = warm_until - asked_at
            if warm > 0:
                result = await backoff.call(
                    rt.store.wait_lease,
                    cfg.queues,
                    want,
                    worker_id=cfg.worker_id,
                    lease_duration=cfg.lease_duration,
                    strict=cfg.strict_priority,
                    timeout=min(cfg.poll_interval, warm),
                )
            idle = False
            if result is None and found_none:  # not offered here (now): wait, then lease
                try:
                    await rt.store.wait_ready(names, timeout=cfg.poll_interval)
                except StoreError as exc:  # back off, then try leasing again
                    await backoff.failed(exc)
                continue
        if result is None:
            result = await backoff.call(
                rt.store.lease,
                cfg.queues,
                want,
                worker_id=cfg.worker_id,
                lease_duration=cfg.lease_duration,
                strict=cfg.strict_priority,
            )
        rt.report_aside(result.aside)
        for job in result.expired:
            rt.report_dead(job, recovered=False)
        batch = result.jobs
        held_for = result.held_for
        held = held_for is not None or result.capped
        idle = not held and len(batch) < want
        found_none = not batch
        if not batch:
            if idle:
                continue  # the lease was the look: wait_lease next
            # Ready jobs held back by flow control: sleep until the next
            # permit, or until a wake-up (a new job, a freed slot), not at
            # once for the jobs that are there (see LeaseResult).
            timeout = cfg.poll_interval if held_for is None else min(cfg.poll_interval, held_for)
            try:
                await rt.store.wait_ready(names, timeout=timeout, held=True)
            except StoreError as exc:  # back off, then try leasing again
                await backoff.failed(exc)
            continue
        tasks = rt.registry.tasks
        if any(leased.job.kind in tasks for leased in batch):
            # Only jobs it can run open the window: a worker that leases
            # nothing but kinds it has no handler for (sent back for a worker
            # that has one) must not win every race for them by leasing in
            # Redis the moment they come back (a mixed fleet: issue 23).
            warm_until = asked_at + cfg.wait_lease_window
        # Every lease enters the table before the first checkpoint, so a
        # crash while queueing leaves them there for the next incarnation.
        await rt.dispatch(rt.admit(batch, asked_at))
        if len(batch) < want:
            # A short batch: the ready jobs ran out, so the next lease most
            # likely comes back empty. Let the executors just woken for this
            # batch start their handlers before we build and send it (an
            # idle worker's pickup would otherwise wait for that, and, half
            # the time, for its reply too). A full batch leases on at once:
            # that next round trip overlaps the handlers (prefetch).
            await _let_woken_run()


async def _let_woken_run() -> None:
    """Return once every task woken before the call has run a step.

    Trio runs a round's tasks in either order and queues tasks woken during
    a round for the next one. After one checkpoint this task is in the same
    round as those woken before it, maybe ahead of them; after a second it
    is in a later round, so they have run. Costs two scheduling rounds."""
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()
