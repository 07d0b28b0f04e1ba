"""heartbeater: renews every lease this worker holds, in one batch per tick.

A lease the store no longer grants (expired and recovered elsewhere, or its
token superseded) is marked lost in the in-flight table, which cancels its
handler: a stale worker must not keep running a job someone else now holds.
"""

from __future__ import annotations

import trio
from trio_util import periodic

from ..runtime._backoff import Backoff
from ..runtime._events import LeaseLost
from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "heartbeater")
    table = rt.table
    task_status.started()
    async for _ in periodic(rt.config.heartbeat_interval):
        entries = table.renewable()
        if not entries:
            continue
        try:
            held = await rt.store.renew([e.leased.ref for e in entries], rt.config.lease_duration)
        except StoreError as exc:
            # Keep ticking: the next renewal may get through before expiry.
            await backoff.failed(exc)
            continue
        backoff.reset()
        for entry, ok in zip(entries, held, strict=True):
            if not ok and table.mark_lost(entry):
                job = entry.leased.job
                log.warning(
                    "lease lost job=%s kind=%s queue=%s attempt=%s",
                    job.id,
                    job.kind,
                    job.queue,
                    job.attempts,
                )
                rt.counters.lost += 1
                rt.events.publish(LeaseLost(job))
