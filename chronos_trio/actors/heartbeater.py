"""heartbeater: renews every lease this worker holds, in one batch per tick.

A lease the store no longer grants (expired and recovered elsewhere, or its
token superseded) is marked lost, which cancels its handler: a stale worker
must not keep running a job someone else now holds.
"""

from __future__ import annotations

import trio
from trio_util import periodic

from ..runtime._backoff import Backoff
from ..runtime._inflight import Stage
from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "heartbeater")
    task_status.started()
    async for _ in periodic(rt.config.heartbeat_every):
        entries = [e for e in rt.table if not e.lost and e.stage is not Stage.SETTLING]
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
            if not ok and rt.table.get(entry.token) is entry and entry.stage is not Stage.SETTLING:
                log.warning(
                    "lease lost job=%s kind=%s queue=%s attempt=%d",
                    entry.leased.job.id,
                    entry.leased.job.kind,
                    entry.leased.job.queue,
                    entry.leased.job.attempts,
                )
                rt.counters.lost += 1
                entry.mark_lost()
