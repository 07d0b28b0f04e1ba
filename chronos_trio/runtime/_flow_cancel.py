"""The continuer's side of cancelling a workflow (``WorkflowRole``): every
step of a cancelled flow that exists or is made later is aborted, and
nothing follows a step of it.

Cancelling is two steps: the canceller marks the workflow's record
(``cancel_workflow``, atomic in the record's own slot), *then* sweeps the
flow's jobs, aborting each that exists (``app._workflow_control``). The
continuer, which makes a flow's next jobs in other slots than the record's
(so no atomic step can span both), works out a batch's next jobs as ever
(recording group arrivals), then checks the mark twice:

1. :func:`split` before it enqueues: the jobs of a marked flow are not
   enqueued but aborted (they may exist: made by a continuer that died
   before its outbox entry was removed), the others are enqueued;
2. :func:`abort_made` after it enqueued: the jobs it just made whose flow
   was marked meanwhile are aborted.

Only then is the outbox entry removed. Why every step of a cancelled flow
ends aborted (or finished before the cancel reached it): take a job J of
the flow that a continuer enqueued. If the
enqueue came before the mark, the canceller's sweep (which starts after
the mark) finds J and aborts it. If it came after the mark, the check that
follows the enqueue (2) sees the mark and aborts J; and if that continuer
died before (2), its outbox entry is still there, so the next continuer
handles it again: its check (1) sees the mark and aborts J. Either way J is
aborted: before its lease while it waits, else flagged and cancelled at
its next renewal, as any abort (so J runs only if a worker leased it in
the instant between its enqueue and check 2, and then only until the next
renewal; a step of a flow cancelled before (1) is never made at all). A
group whose member was cancelled never
completes (the member never succeeds), and a complete group's callback is
a job like any other. Continuations written by an older worker carry no
workflow ID: their steps are not checked here, and only the sweep stops
them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..records._jobs import NewJob, abort_error
from ..records._log import log_event
from ..store import AdminRole, Continuation, WorkflowRole
from ._state import log

#: The reason kept in the ``last_error`` of a step aborted because its flow was.
CANCEL_REASON = "workflow cancelled"
#: What the ``last_error`` of such a step starts with (``abort_error``'s text).
CANCELLED_ERROR = abort_error(CANCEL_REASON)


def cancelled_step(entry: Continuation) -> bool:
    """Whether outbox entry ``entry`` is the failed end of a step aborted
    because its whole flow was cancelled (its error starts with
    :data:`CANCELLED_ERROR`). An aborted step ends failed in its flow (its
    batch completes, its ``on_failure`` is called), but a cancelled flow
    stays cancelled: the continuer records no arrival and makes nothing of
    such an entry (as before aborts reached the outbox). Never raises."""
    return entry.failed and entry.error.startswith(CANCELLED_ERROR)


async def split(
    store: WorkflowRole, made: Mapping[str, str], jobs: Sequence[NewJob]
) -> tuple[list[NewJob], list[NewJob]]:
    """``jobs`` as (to enqueue, of a cancelled workflow) by ``made`` (job ID
    -> workflow ID; a job not in it is enqueued): one store call, none when
    no job's workflow is known. Raises StoreError."""
    if not made:
        return list(jobs), []
    gone = await store.cancelled(sorted(set(made.values())))
    if not gone:
        return list(jobs), []
    live = [job for job in jobs if made.get(job.id) not in gone]
    dropped = [job for job in jobs if made.get(job.id) in gone]
    for wid in sorted(gone):
        log_event(
            log, logging.INFO, "workflow cancelled: its next steps are not made", workflow=wid
        )
    return live, dropped


async def abort_jobs(store: object, jobs: Sequence[NewJob]) -> None:
    """Abort each of ``jobs`` (those that exist; one store call each)."""
    if not isinstance(store, AdminRole):
        return
    for job in jobs:
        await store.abort(job.id, queue=job.queue, reason=CANCEL_REASON)


async def abort_made(
    store: WorkflowRole, made: Mapping[str, str], jobs: Sequence[NewJob]
) -> list[str]:
    """After ``jobs`` were enqueued: abort those whose workflow (``made``:
    job ID -> workflow ID) was cancelled meanwhile (one store call, and one
    abort per such job). Returns their IDs. Raises StoreError."""
    known = {job.id: made[job.id] for job in jobs if job.id in made}
    if not known:
        return []
    gone = await store.cancelled(sorted(set(known.values())))
    late = [job for job in jobs if known.get(job.id) in gone]
    await abort_jobs(store, late)
    return [job.id for job in late]
