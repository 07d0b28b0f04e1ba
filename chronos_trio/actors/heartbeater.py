"""heartbeater: renews every lease this worker holds, in one batch per tick.

A lease the store no longer grants (expired and recovered elsewhere, or its
token superseded) is marked lost in the in-flight table, which cancels its
handler: a stale worker must not keep running a job someone else now holds.

A renewed lease whose job an abort was asked for comes back flagged in the
same reply (no call of its own, nothing to subscribe to): the in-flight
table marks it, which cancels its handler the same way, and its outcome is
ABORTED, settled under the lease's fence. So an abort reaches a running
handler within one heartbeat interval (plus a round trip).
"""

from __future__ import annotations

import logging

import trio
from trio_util import periodic

from ..records._log import log_event
from ..runtime._backoff import Backoff
from ..runtime._events import LeaseLost
from ..runtime._inflight import Entry, lease_deadline
from ..runtime._state import Runtime, log
from ..store import StoreError, aborted_of


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "heartbeater")
    table = rt.table
    task_status.started()
    lease = rt.config.lease_duration
    async for _ in periodic(rt.config.heartbeat_interval):
        # Renewals that did not get through in time (this process was paused,
        # or the store was out of reach): the store may hand these jobs to
        # another worker any moment, so stop using them now, without waiting
        # for the store to refuse the next renewal.
        for entry in table.overdue():
            if table.mark_lost(entry):
                _lost(rt, entry, "lease expired before it could be renewed")
        entries = table.renewable()
        if not entries:
            continue
        asked_at = trio.current_time()
        try:
            held = await rt.store.renew([e.leased.ref for e in entries], lease)
        except StoreError as exc:
            # Keep ticking: the next renewal may get through before expiry.
            await backoff.failed(exc)
            continue
        backoff.reset()
        rt.report_aside(held)
        deadline = lease_deadline(asked_at, lease)
        for entry, ok in zip(entries, held, strict=True):
            if ok:
                table.renewed(entry, deadline)
            elif table.mark_lost(entry):
                _lost(rt, entry, "renewal refused")
        for i in aborted_of(held):
            entry = entries[i]
            if table.mark_aborted(entry):
                job = entry.leased.job
                log_event(
                    log,
                    logging.INFO,
                    "abort asked",
                    job=job.id,
                    kind=job.kind,
                    queue=job.queue,
                    attempt=job.attempts,
                    then="calling off its run",
                )


def _lost(rt: Runtime, entry: Entry, why: str) -> None:
    job = entry.leased.job
    log_event(
        log,
        logging.WARNING,
        "lease lost",
        job=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempts,
        why=why,
    )
    rt.counters.lost += 1
    rt.events.publish(LeaseLost(job))
