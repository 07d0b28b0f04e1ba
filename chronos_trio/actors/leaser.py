"""leaser: ready -> leased, in batches sized by free in-flight slots.

Asks the store for at most ``min(batch_size, free slots)`` jobs, so a slow
worker leases less; waits on the store's wake-up when nothing is ready.
"""

from __future__ import annotations

import logging

import trio

from ..runtime._backoff import Backoff
from ..runtime._inflight import Stage
from ..runtime._state import JobDispatched, Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    names = cfg.queue_names
    backoff = Backoff(log, "leaser")
    task_status.started()
    # Entries a previous incarnation leased but never handed on.
    for entry in rt.table.in_stage(Stage.LEASED):
        await _dispatch(rt, entry.leased.token)
    while True:
        await rt.table.wait_free()
        want = min(cfg.batch_size, rt.table.free)
        try:
            batch = await rt.store.lease(
                cfg.queues, want, worker_id=cfg.worker_id, lease_duration=cfg.lease_duration
            )
        except StoreError as exc:
            await backoff.failed(exc)
            continue
        backoff.reset()
        if not batch:
            try:
                await rt.store.wait_ready(names, timeout=cfg.poll_interval)
            except StoreError as exc:
                await backoff.failed(exc)
            continue
        # Register every lease before the first checkpoint, so a crash while
        # dispatching leaves them in the table for the next incarnation.
        debug = log.isEnabledFor(logging.DEBUG)
        for leased in batch:
            rt.table.add(leased)
            if debug:
                log.debug(
                    "leased job=%s kind=%s queue=%s attempt=%d",
                    leased.job.id,
                    leased.job.kind,
                    leased.job.queue,
                    leased.job.attempts,
                )
        rt.counters.leased += len(batch)
        for leased in batch:
            await _dispatch(rt, leased.token)


async def _dispatch(rt: Runtime, token: str) -> None:
    entry = rt.table.get(token)
    if entry is None or entry.stage is not Stage.LEASED:
        return
    # QUEUED before sending: a waiting executor may run before send returns.
    # A send that raises delivered nothing (trio guarantees it), so revert.
    entry.stage = Stage.QUEUED
    message = JobDispatched(entry.leased)
    try:
        # No yield per job while the buffer has room: a whole batch reaches
        # the executors in one scheduling round.
        rt.dispatch_send.send_nowait(message)
    except trio.WouldBlock:
        try:
            await rt.dispatch_send.send(message)
        except BaseException:
            entry.stage = Stage.LEASED
            raise
