"""promoter: scheduled / retry_wait -> ready when due.

Sleeps until the next due time the store reports (capped at poll_interval),
counted from when the store read its clock (about halfway through the call),
and is woken early when a job due sooner is scheduled, so delayed jobs start
on time without fast polling.
"""

from __future__ import annotations

import trio

from ..runtime._backoff import Backoff
from ..runtime._state import Runtime, log
from ..store import StoreError

#: Jobs promoted per store call; a full batch means "call again at once".
PROMOTE_BATCH = 512
#: A next due time closer than this (seconds) is slept until, not waited for
#: in the store.
SHORT_WAIT = 0.01


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    queues = rt.config.queue_names
    backoff = Backoff(log, "promoter")
    task_status.started()
    while True:
        asked_at = trio.current_time()
        result = await backoff.call(rt.store.promote_due, queues, PROMOTE_BATCH)
        # The store read its clock (result.now) during the call, about
        # halfway through it on ours: the wait counts from then, not from
        # the reply, so a job is promoted a one-way trip after its due time
        # rather than a round trip and the reply's handling later. (After
        # retries the midpoint is early: one extra promote call, no harm.)
        then = (asked_at + trio.current_time()) / 2
        rt.counters.promoted += result.promoted
        rt.report_aside(result.aside)
        if result.promoted >= PROMOTE_BATCH:
            continue
        wait = rt.config.poll_interval
        if result.next_due_at is not None:
            wait = min(wait, max(0.0, result.next_due_at - result.now))
        if wait <= 0:
            await trio.lowlevel.checkpoint()
            continue
        if wait <= SHORT_WAIT:
            # Due this soon: a plain sleep is more punctual than a blocking
            # wait in Redis (no thread hop, no cancelled XREAD), and a job
            # scheduled meanwhile can be early by at most this long.
            await trio.sleep_until(then + wait)
            continue
        timeout = max(0.0, then + wait - trio.current_time())
        try:
            await rt.store.wait_scheduled(queues, earlier_than=result.next_due_at, timeout=timeout)
        except StoreError as exc:  # back off, then promote again
            await backoff.failed(exc)
