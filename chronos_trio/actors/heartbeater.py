"""heartbeater: renews every lease this worker holds, in one batch per tick.

A lease the store no longer grants (expired and recovered elsewhere, or its
token superseded) is marked lost in the in-flight table, which cancels its
handler: a stale worker must not keep running a job someone else now holds.

Each renewal runs in a task of its own, so a call that hangs (a link that
stopped forwarding: the store's socket timeout is seconds) does not hold up
the next tick: the next renewal goes out on time, on another connection,
with at most :data:`MAX_RENEWALS_IN_FLIGHT` calls waiting at once. Nothing
here enforces a lease's end: a running handler is cancelled by its own scope
when its lease deadline passes on this worker's clock (see
``runtime._inflight``), whatever the renewals are doing; the tick only marks
the leases that are not running.

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

from ..records._log import log_event, log_job_event
from ..runtime._backoff import Backoff
from ..runtime._inflight import Entry, lease_deadline
from ..runtime._state import Runtime, log
from ..store import StoreError

#: Renewal calls waiting for the store at once, at most: with that many
#: hung, a tick skips its renewal rather than pile more on the link.
MAX_RENEWALS_IN_FLIGHT = 3


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "heartbeater")
    table = rt.table
    calls = trio.Semaphore(MAX_RENEWALS_IN_FLIGHT)  # renewal calls under way
    async with trio.open_nursery() as nursery:
        task_status.started()
        async for _ in periodic(rt.config.heartbeat_interval):
            # Leases whose renewals did not get through in time (this process
            # was paused, or the store was out of reach): the store may hand
            # these jobs to another worker any moment, so stop using them now.
            # (A running handler's own scope has cancelled it already.)
            for entry in table.overdue():
                if table.mark_lost(entry):
                    rt.report_lost(entry, "lease expired before it could be renewed")
            entries = table.renewable()
            if not entries:
                continue
            try:
                calls.acquire_nowait()
            except trio.WouldBlock:
                log_event(
                    log,
                    logging.WARNING,
                    "heartbeater: renewal calls still waiting for the store; "
                    "skipping this tick's renewal",
                    waiting=MAX_RENEWALS_IN_FLIGHT,
                    leases=len(entries),
                )
                continue
            nursery.start_soon(_renew, rt, entries, backoff, calls)


async def _renew(
    rt: Runtime, entries: list[Entry], backoff: Backoff, calls: trio.Semaphore
) -> None:
    """One renewal of ``entries``' leases, and what its reply says; gives
    back its place in ``calls`` once the store answered (or failed)."""
    table = rt.table
    lease = rt.config.lease_duration
    asked_at = trio.current_time()
    try:
        result = await rt.store.renew([e.leased.ref for e in entries], lease)
    except StoreError as exc:
        # The next tick tries again, in time if the lease has not ended.
        backoff.failed_nowait(exc)
        return
    finally:
        calls.release()
    backoff.reset()
    rt.report_aside(result.aside)
    deadline = lease_deadline(asked_at, lease)
    for entry, ok in zip(entries, result.renewed, strict=True):
        if ok:
            table.renewed(entry, deadline)
        elif table.mark_lost(entry):
            rt.report_lost(entry, "renewal refused")
    for i in result.aborted:
        entry = entries[i]
        if table.mark_aborted(entry):
            job = entry.leased.job
            log_job_event(
                log,
                logging.INFO,
                "abort asked",
                job,
                then="calling off its run",
            )
