"""continuer: runs what follows a workflow job that succeeded (or that
failed for good, when its flow handles failures: its ``on_failure``
callback, its failed arrival in a group that allows failures).

The store's fenced success settle puts a workflow job in its partition's
outbox (see ``records._workflow`` and docs/workflows.md); this actor drains
the outboxes of the worker's queues: for each entry it enqueues the next
jobs under their deterministic IDs, or records a group member's arrival
(enqueueing what follows the group once it is complete), and only then
removes the entry (with the next pass's read, in the same call:
``FlowRole.next_continuations``; within :data:`FINISH_DELAY` when no
wake-up comes). A continuer that dies midway leaves the entry for the
next pass, whose enqueues are no-ops for the jobs already made. Woken by
this process's own settles; entries other processes left (a worker killed
between its settle and its continuation) are found every
:data:`SWEEP_FACTOR` recover intervals (30 s by default).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from ..records._jobs import NewJob
from ..records._log import log_event
from ..records._workflow import WORKFLOW_KEEP, Arrival, Steps, advance, after_group, failed
from ..runtime._backoff import Backoff
from ..runtime._flow_cancel import abort_jobs, abort_made, cancelled_step, split
from ..runtime._flow_keep import keeper_of
from ..runtime._state import Runtime, log
from ..store import Continuation, FlowRole, Store, WorkflowRole

#: Outbox entries handled per store call.
BATCH = 256
#: The outboxes are looked at without a wake-up every this many recover
#: intervals: found as surely as expired leases, at a sixth of the cost.
SWEEP_FACTOR = 6
#: Seconds handled entries stay in the outbox at most when no wake-up comes
#: (they are removed by the next pass's read, or then).
FINISH_DELAY = 0.1


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    store = rt.store
    task_status.started()
    if not isinstance(store, FlowRole):
        # a third-party store may offer only the roles a worker requires
        # (not FlowRole): its jobs have no workflows to continue
        await trio.sleep_forever()
    queues = rt.config.queue_names
    backoff = Backoff(log, "continuer")
    sweep = rt.config.recover_interval * SWEEP_FACTOR
    # Entries handled by the last pass: removed by the next read, in the same
    # call (FlowRole.next_continuations): a pass is a read and an enqueue, two
    # round trips on Redis, not three. The wait for the next wake-up is the
    # pause in which the next batch gathers (and stays as short as
    # FINISH_DELAY while there are entries to remove).
    handled: list[Continuation] = []
    while True:
        # backed off like every other call: a store whose wait returns at
        # each change of the store (SQLite) may be called in an outage
        await backoff.call(store.wait_continuations, FINISH_DELAY if handled else sweep)
        while True:
            batch = await backoff.call(store.next_continuations, queues, BATCH, finished=handled)
            handled = []
            if not batch:
                break
            await backoff.call(_continue, store, batch)
            handled = batch
            if len(batch) < BATCH:
                break


async def _continue(store: Store, batch: list[Continuation]) -> None:
    """Enqueue what each entry's continuation asks for (idempotent); then
    abort what was made of a workflow cancelled meanwhile (see
    ``runtime._flow_cancel``)."""
    made: dict[str, str] = {}
    jobs = await _next(store, batch, made)
    if not isinstance(store, WorkflowRole):
        if jobs:
            await store.enqueue_many(jobs)
        return
    jobs, dropped = await split(store, made, jobs)
    await abort_jobs(store, dropped)
    if jobs:
        await store.enqueue_many(jobs)
        await abort_made(store, made, jobs)


def _steps_of(entry: Continuation) -> Steps:
    """What an entry asks for: a success's next steps, or a failed job's
    failure handling (its callback, its failed arrival)."""
    if entry.failed:
        return failed(entry.then, entry.job_id, entry.kind, entry.error, entry.attempts)
    return advance(entry.then, entry.result, entry.job_id)


async def next_jobs(store: FlowRole, batch: Sequence[Continuation]) -> list[NewJob]:
    """The jobs that follow ``batch``'s entries, under their deterministic
    IDs: each entry's next steps, and what follows each group the entries
    complete (their arrivals recorded in ``store``, one call per round).
    An entry whose continuation cannot be read is logged and skipped; the
    steps of a cancelled workflow are left out (a store with
    ``WorkflowRole``). Raises StoreError when the store cannot be reached."""
    made: dict[str, str] = {}
    jobs = await _next(store, batch, made)
    if isinstance(store, WorkflowRole):
        jobs, _dropped = await split(store, made, jobs)
    return jobs


async def _next(
    store: FlowRole, batch: Sequence[Continuation], made: dict[str, str]
) -> list[NewJob]:
    """:func:`next_jobs`, filling ``made`` (job ID -> workflow ID) for the
    jobs whose workflow is known."""
    found: list[Steps] = []
    for entry in batch:
        if cancelled_step(entry):
            continue  # its flow is cancelled: nothing follows, nothing arrives
        try:
            steps = _steps_of(entry)
        except ValueError as exc:
            # nothing can follow a continuation that cannot be read; say so loudly
            log_event(
                log,
                logging.ERROR,
                "workflow stops here: continuation unreadable",
                job=entry.job_id,
                error=str(exc),
            )
            continue
        found.append(steps)
    jobs: list[NewJob] = []
    arrivals: list[Arrival] = []
    for steps in found:
        _made(steps, made)
        jobs.extend(steps.jobs)
        arrivals.extend(steps.arrivals)
    keeper = keeper_of(store)
    ttl = WORKFLOW_KEEP
    if arrivals:
        # the groups' records last as long as their workflows' (kept alive)
        flows = {a.workflow for a in arrivals if a.workflow is not None}
        await keeper.keep(store, dict.fromkeys(flows, WORKFLOW_KEEP))
        ttl = keeper.group_ttl(flows, trio.current_time())
    while arrivals:
        # every arrival of the batch in one store call: a group of many
        # members finishing together costs one round trip, not one each
        completed = await store.group_arrive(arrivals, ttl)
        fired: set[str] = set()
        next_arrivals: list[Arrival] = []
        for arrival, results in zip(arrivals, completed, strict=True):
            if results is None or arrival.group_id in fired:
                continue
            fired.add(arrival.group_id)  # what follows it once, not per arrival
            then: Steps = after_group(arrival, results)
            _made(then, made)
            jobs.extend(then.jobs)
            next_arrivals.extend(then.arrivals)
        arrivals = next_arrivals
    await keeper.keep(store, _keeps(jobs, made))
    return jobs


def _keeps(jobs: Sequence[NewJob], made: dict[str, str]) -> dict[str, float]:
    """Per workflow of ``jobs``, how long its record must last now: WORKFLOW_KEEP
    after the latest of its jobs is due."""
    out: dict[str, float] = {}
    for job in jobs:
        wid = made.get(job.id)
        if wid is not None:
            out[wid] = max(out.get(wid, 0.0), WORKFLOW_KEEP + max(0.0, job.delay))
    return out


def _made(steps: Steps, made: dict[str, str]) -> None:
    if steps.workflow is not None:
        for job in steps.jobs:
            made[job.id] = steps.workflow
