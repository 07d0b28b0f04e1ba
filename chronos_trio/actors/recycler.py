"""recycler: asks for the worker's recycle once it is past ``max_jobs`` or
``max_memory_mb`` (see ``runtime._recycle``); idle when neither is set.

* **Jobs.** The leaser leases at most ``max_jobs`` jobs and then reports
  it; this actor waits until every one of them is settled (the in-flight
  table is empty), so a worker recycled for its job count runs each job it
  leased and hands none back.
* **Memory.** Every ``memory_check_interval`` seconds it reads the
  process's resident memory (one small file read, off the job path); at
  or over the limit it asks at once: the worker stops leasing, hands back
  the jobs it has not started and lets the running ones finish.

Restarted after a crash it simply looks again: a request made before
stays made (the first one wins).
"""

from __future__ import annotations

import logging
import math

import attrs
import trio
from trio_util import periodic

from ..records._log import log_event
from ..runtime._recycle import MAX_JOBS, MAX_MEMORY, Recycled, resident_mb
from ..runtime._state import Runtime, log


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    async with trio.open_nursery() as nursery:
        if cfg.max_jobs is not None:
            nursery.start_soon(_after_last_job, rt, cfg.max_jobs)
        if cfg.max_memory_mb is not None:
            nursery.start_soon(_watch_memory, rt, cfg.max_memory_mb)
        task_status.started()
        await trio.sleep(math.inf)


async def _after_last_job(rt: Runtime, limit: int) -> None:
    await rt.recycle.jobs_capped.wait()
    table = rt.table
    await table.wait_until(lambda: len(table) == 0)
    _request(rt, Recycled(MAX_JOBS, limit, rt.counters.leased))


async def _watch_memory(rt: Runtime, limit: int) -> None:
    async for _ in periodic(rt.config.memory_check_interval):
        rss = resident_mb()
        if rss >= limit:
            _request(rt, Recycled(MAX_MEMORY, limit, rt.counters.leased, round(rss, 1)))
            return


def _request(rt: Runtime, recycled: Recycled) -> None:
    if rt.recycle.requested is None:
        fields = attrs.asdict(recycled)
        log_event(log, logging.INFO, "worker recycling", worker=rt.config.worker_id, **fields)
    rt.recycle.request(recycled)
