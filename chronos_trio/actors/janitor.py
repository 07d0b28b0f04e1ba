"""janitor: keeps the store bounded by trimming retained and dead jobs.

A singleton duty: it trims only while this worker is the elected leader, and
then every queue the store knows (not just this worker's), so a queue that
the leader does not consume is still kept bounded."""

from __future__ import annotations

import trio
from trio_util import periodic

from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    task_status.started()
    async for _ in periodic(cfg.janitor_interval):
        await rt.leadership.wait_value(lambda lead: lead is not None)
        try:
            queues = sorted(set(cfg.queue_names) | set(await rt.store.queues()))
            trimmed = await rt.store.trim(
                queues, dead_max_age=cfg.dead_max_age, dead_max_count=cfg.dead_max_count
            )
        except StoreError as exc:
            log.warning("janitor: trim failed (%s); will retry next round", exc)
            continue
        rt.counters.trimmed += trimmed
        rt.report_aside(trimmed)
        if trimmed:
            log.info("janitor trimmed %d job(s)", trimmed)
