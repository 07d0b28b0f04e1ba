"""Cancelling and looking at a whole workflow from its stored record
(``WorkflowRole``): :func:`abort_workflow` and :func:`workflow_view`, used
by :class:`~chronos_trio.app._handle.Workflow`, the inspector, the command
line and the dashboard. Every job of a flow is named by its record's tree,
so neither needs an index of jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..records._flow_control import (
    StepRef,
    StepView,
    WorkflowAbortResult,
    WorkflowState,
    WorkflowView,
    build_view,
    decode_tree,
    overall_state,
    tree_steps,
    workflow_of,
)
from ..records._jobs import Job
from ..records._workflow import MAX_DEPTH
from ..runtime._flow_cancel import CANCEL_REASON
from ..store._capabilities import Capability
from ..store._offers import capabilities_of, require_capabilities
from ..store._results import AbortResult

#: Store calls a sweep or a view keeps in flight at once.
PARALLEL = 16


async def _each(steps: Sequence[StepRef], call: object) -> list[object]:
    """``await call(step)`` for every step, :data:`PARALLEL` at a time, in order."""
    out: list[object] = [None] * len(steps)
    limiter = trio.CapacityLimiter(PARALLEL)

    async def one(k: int, step: StepRef) -> None:
        async with limiter:
            out[k] = await call(step)  # type: ignore[operator]

    async with trio.open_nursery() as nursery:
        for k, step in enumerate(steps):
            nursery.start_soon(one, k, step)
    return out


async def abort_workflow(store: object, workflow_id: str, reason: str = "") -> WorkflowAbortResult:
    """Cancel workflow ``workflow_id``: mark its record, then abort each of
    its jobs that exists (see ``runtime._flow_cancel`` for why mark-then-
    sweep means no step of it ever starts afterwards). Idempotent: a second
    call sweeps again and reports ``first`` False. A workflow without a
    record (unknown, expired, or started by an older version) is reported
    ``found`` False, nothing changed.

    Raises StoreError when the store cannot be reached (calling again is
    safe), ``MissingCapability`` when the store lacks workflow control,
    admin or abort."""
    require_capabilities(
        store,
        [Capability.WORKFLOW_CONTROL, Capability.ADMIN, Capability.ABORT],
        what="aborting a workflow",
    )
    before = await store.workflow_record(workflow_id)  # type: ignore[attr-defined]
    record = await store.cancel_workflow(workflow_id)  # type: ignore[attr-defined]
    if record is None:
        return WorkflowAbortResult(workflow_id, found=False)
    steps = list(tree_steps(decode_tree(record.tree)))
    why = f"{CANCEL_REASON}: {reason}" if reason else CANCEL_REASON

    async def abort(step: StepRef) -> AbortResult:
        result: AbortResult = await store.abort(step.id, queue=step.queue, reason=why)  # type: ignore[attr-defined]
        return result

    results = await _each(steps, abort)
    by: dict[AbortResult, list[str]] = {r: [] for r in AbortResult}
    for step, result in zip(steps, results, strict=True):
        by[result].append(step.id)  # type: ignore[index]
    return WorkflowAbortResult(
        workflow_id,
        found=True,
        first=before is None or before.cancelled is None,
        aborted_running=tuple(by[AbortResult.FLAGGED]),
        dropped=tuple(by[AbortResult.ABORTED]),
        finished=tuple(by[AbortResult.FINISHED]),
        not_created=tuple(by[AbortResult.NOT_FOUND]),
    )


def step_view(ref: StepRef, job: Job | None) -> StepView:
    """How one step stands, from its job (None: not made, or gone)."""
    if job is None:
        return StepView(ref.id, ref.kind, ref.queue, None)
    starts = [a.started for a in job.history if a.started is not None]
    due = max(job.created_at, job.run_at) if job.created_at else job.run_at
    finished = job.finished_at
    return StepView(
        ref.id,
        job.kind,
        job.queue,
        job.state,
        attempts=job.attempts,
        created=job.created_at or None,
        started=min(starts) if starts else None,
        finished=finished,
        duration=None if finished is None else max(0.0, finished - due),
        last_error=job.last_error,
    )


async def workflow_view(store: object, workflow_id: str) -> WorkflowView:
    """Workflow ``workflow_id`` as it stands: its steps as a tree, each with
    its state, attempts and times, and the flow's overall state
    (NOT_FOUND when it has no record). One read of the record and one per
    step (:data:`PARALLEL` at a time). Raises StoreError when the store
    cannot be reached, ValueError for a damaged record, ``MissingCapability``
    when the store lacks workflow control or admin."""
    require_capabilities(
        store, [Capability.WORKFLOW_CONTROL, Capability.ADMIN], what="viewing a workflow"
    )
    record = await store.workflow_record(workflow_id)  # type: ignore[attr-defined]
    if record is None:
        return WorkflowView(workflow_id, WorkflowState.NOT_FOUND)
    tree = decode_tree(record.tree)
    steps = list(tree_steps(tree))

    async def read(step: StepRef) -> StepView:
        job = await store.get_job(step.id, queue=step.queue)  # type: ignore[attr-defined]
        return step_view(step, job)

    views: list[StepView] = await _each(steps, read)  # type: ignore[assignment]
    by_id = {v.id: v for v in views}
    return WorkflowView(
        workflow_id,
        overall_state(record, views),
        created=record.created,
        cancelled=record.cancelled,
        root=build_view(tree, by_id),
    )


async def workflow_of_job(store: object, job_id: str, then: str | None) -> str | None:
    """The workflow job ``job_id`` (with continuation ``then``) belongs to:
    the ID its continuation carries, else (a flow's last step carries none)
    the longest dotted prefix of its ID whose record lists it (one read per
    prefix, at most ``MAX_DEPTH`` + 1). None when there is none, or the
    store keeps no workflow records. Raises StoreError."""
    found = workflow_of(then)
    if found is not None or Capability.WORKFLOW_CONTROL not in capabilities_of(store):
        return found
    prefix = job_id
    for _ in range(MAX_DEPTH + 1):
        if "." not in prefix:
            return None
        prefix = prefix.rsplit(".", 1)[0]
        record = await store.workflow_record(prefix)  # type: ignore[attr-defined]
        if record is not None:
            try:
                steps = tree_steps(decode_tree(record.tree))
                return prefix if any(step.id == job_id for step in steps) else None
            except ValueError:
                return None
    return None


async def record_lists(store: object, workflow_id: str, job_id: str) -> bool | None:
    """Whether the record of ``workflow_id`` lists job ``job_id``; None when
    there is no record (or the store keeps none). Raises StoreError."""
    if Capability.WORKFLOW_CONTROL not in capabilities_of(store):
        return None
    record = await store.workflow_record(workflow_id)  # type: ignore[attr-defined]
    if record is None:
        return None
    try:
        return any(step.id == job_id for step in tree_steps(decode_tree(record.tree)))
    except ValueError:
        return None
