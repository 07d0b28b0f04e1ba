"""recoverer: takes back leases that expired (their worker crashed or hung).

Expired jobs go back to ready, or dead when their attempts are used up, so a
job that keeps killing its worker cannot loop forever. Any worker may run
this: the store's recovery is atomic and judged by the store's clock. An
expired lease whose job an abort was asked for is made aborted instead (its
worker died before it could settle the abort).
"""

from __future__ import annotations

import logging

import trio

from ..records._log import log_event
from ..runtime._backoff import Backoff
from ..runtime._events import JobAbortApplied, JobsRecovered
from ..runtime._state import Runtime, log

RECOVER_BATCH = 256


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    queues = rt.config.queue_names
    backoff = Backoff(log, "recoverer")
    task_status.started()
    while True:
        result = await backoff.call(rt.store.recover_expired, queues, RECOVER_BATCH)
        rt.report_aside(result.aside, recovered=True)
        found = len(result.requeued) + len(result.dead) + len(result.aborted)
        rt.counters.recovered += found
        if result.requeued:
            log_event(
                log,
                logging.INFO,
                "recovered expired leases",
                count=len(result.requeued),
                jobs=",".join(result.requeued[:10]),
            )
            rt.events.publish(JobsRecovered(result.requeued))
        for job in result.dead:
            rt.report_dead(job, recovered=True)
        for job in result.aborted:
            rt.counters.aborted += 1
            log_event(
                log,
                logging.INFO,
                "aborted at lease expiry",
                job=job.id,
                kind=job.kind,
                queue=job.queue,
            )
            if rt.events.wants(JobAbortApplied):
                rt.events.publish(JobAbortApplied(job, recovered=True))
        if found < RECOVER_BATCH:
            await trio.sleep(rt.config.recover_interval)
