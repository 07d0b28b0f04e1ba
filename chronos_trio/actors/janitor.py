"""janitor: keeps the store bounded by trimming retained and dead jobs.

A singleton duty: it trims only while this worker is the elected leader, and
then every queue the store knows (not just this worker's), so a queue that
the leader does not consume is still kept bounded. The per-queue cap on
retained successes (``max_retained_succeeded``) is enforced here, so it holds
within one ``janitor_interval``; queues that share a cap share one trim."""

from __future__ import annotations

import logging

import trio
from trio_util import periodic

from ..records._log import log_event
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
            by_cap: dict[int | None, list[str]] = {}
            for queue in queues:
                by_cap.setdefault(cfg.retained_cap(queue), []).append(queue)
            trimmed = 0
            for cap, capped in by_cap.items():
                done = await rt.store.trim(
                    capped,
                    dead_max_age=cfg.dead_max_age,
                    dead_max_count=cfg.dead_max_count,
                    keep_succeeded=cap,
                )
                trimmed += done.count
                rt.counters.trimmed += done.count
                rt.report_aside(done.aside)
        except StoreError as exc:
            log_event(
                log, logging.WARNING, "janitor trim failed: retried next round", error=str(exc)
            )
            continue
        if trimmed:
            log_event(log, logging.INFO, "janitor trimmed", count=trimmed)
