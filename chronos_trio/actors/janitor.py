"""janitor: keeps the store bounded by trimming retained and dead jobs."""

from __future__ import annotations

import trio
from trio_util import periodic

from .._runtime import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    task_status.started()
    async for _ in periodic(cfg.janitor_interval):
        try:
            trimmed = await rt.store.trim(
                cfg.queue_names, dead_max_age=cfg.dead_max_age, dead_max_count=cfg.dead_max_count
            )
        except StoreError as exc:
            log.warning("janitor: trim failed (%s); will retry next round", exc)
            continue
        rt.counters.trimmed += trimmed
        if trimmed:
            log.info("janitor trimmed %d job(s)", trimmed)
