"""Workflow records on Redis (``WorkflowRole``): one hash per workflow in
its own slot (``KeySpace.workflow``), written by ``workflow_save.lua`` and
``workflow_cancel.lua``, read with plain commands. Sans-IO plans (see
``_core``), run by ``StoreContext.run``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...records._jobs import EnqueueResult, NewJob
from . import _scripts as S
from ._codec import text
from ._context import StoreContext
from ._core import Call, Plan, RedisCore
from ._enqueue import enqueue_plan
from ._enqueue_one import enqueue_one_plan
from ._scripts import Op

if TYPE_CHECKING:
    from ...records._flow_control import WorkflowRecord


def _ttl_ms(ttl: float) -> int:
    return max(1, math.ceil(ttl * 1000))


def _record(workflow_id: str, fields: Sequence[Any]) -> WorkflowRecord | None:
    """A record from its fields (t, c, k, x); None when it has no tree."""
    tree, created, kind, cancelled = (text(v) if v is not None else None for v in fields)
    if not tree:
        return None
    from ...records._flow_control import WorkflowRecord  # first read: loads the records

    return WorkflowRecord(
        workflow_id,
        tree,
        float(created or 0.0),
        kind or "",
        float(cancelled) if cancelled else None,
    )


def _save_op(
    ctx: RedisCore, workflow_id: str, tree: str, first_kind: str, ttl: float, *, soft: bool = False
) -> Op:
    key = ctx.keys.workflow(workflow_id)
    return Op.script_call(S.WORKFLOW_SAVE, [key], [tree, first_kind, _ttl_ms(ttl)], soft=soft)


def save(ctx: StoreContext, workflow_id: str, tree: str, first_kind: str, ttl: float) -> Plan[bool]:
    (reply,) = yield Call([_save_op(ctx, workflow_id, tree, first_kind, ttl)])
    return bool(int(reply))


class RecordNotSaved(Exception):
    """A start's record could not be saved (``error``, the reply), but the
    enqueue sent in the same round trip ran: ``results`` are its results."""

    def __init__(self, error: Exception, results: list[EnqueueResult]) -> None:
        super().__init__(str(error))
        self.error = error
        self.results = results


_UNSENT: Any = object()


def start(
    ctx: RedisCore,
    workflow_id: str,
    tree: str,
    first_kind: str,
    ttl: float,
    jobs: Sequence[NewJob],
) -> Plan[list[EnqueueResult]]:
    """``WorkflowRole.start_workflow`` on one Redis node in one round trip:
    :func:`~._enqueue.enqueue_plan` of ``jobs`` (of a lone job,
    :func:`~._enqueue_one.enqueue_one_plan`), its batch of enqueue
    scripts sent after the record's ``workflow_save.lua`` in the same
    pipeline (one connection's commands apply in order: a job of the flow
    never exists before its record did, but in one case: the save script
    missing from the server, after a restart or ``SCRIPT FLUSH``). The save
    is sent soft, so its reply comes back beside the enqueue's: a save that
    got NOSCRIPT was loaded and run again by the transport before this plan
    sees it, one round trip after the jobs were stored (the call has not
    returned: a cancel in that window finds no record and changes nothing).
    Any other error reply of the save (an ACL refusing the key, a
    script killed...) is tried once more alone; still an error, it raises
    :class:`RecordNotSaved` with the enqueue's results, for the store to
    abort the jobs it created. When the enqueue sends no batch of its own
    (every job already stored in a draining version) the save goes alone,
    after. Raises what ``enqueue_plan`` raises (then nothing was sent or
    the failure is the enqueue's)."""
    save_op = _save_op(ctx, workflow_id, tree, first_kind, ttl, soft=True)
    saved: Any = _UNSENT
    # a chain's one first job: the lone enqueue's plan (the same script,
    # arguments and replies as a batch of one, without its bookkeeping)
    plan = enqueue_one_plan(ctx, jobs[0]) if len(jobs) == 1 else enqueue_plan(ctx, jobs)
    try:
        step = next(plan)
        while True:
            if saved is _UNSENT and type(step) is Call and _enqueues(step):
                replies = yield Call([save_op, *step.ops], step.after, step.replicas)
                saved = replies[0]
                step = plan.send(replies[1:])
            else:
                step = plan.send((yield step))
    except StopIteration as done:
        results: list[EnqueueResult] = done.value
    finally:
        plan.close()
    if saved is _UNSENT or isinstance(saved, Exception):
        (saved,) = yield Call([save_op])
        if isinstance(saved, Exception):
            raise RecordNotSaved(saved, results)
    return results


def _enqueues(call: Call) -> bool:
    """Whether ``call`` is an enqueue's batch of ``enqueue.lua`` calls (or a
    lone plain job's ``enqueue_plain.lua``)."""
    ops = call.ops
    return bool(ops) and (ops[0].script is S.ENQUEUE or ops[0].script is S.ENQUEUE_PLAIN)


def read(ctx: StoreContext, workflow_id: str) -> Plan[WorkflowRecord | None]:
    key = ctx.keys.workflow(workflow_id)
    (reply,) = yield Call([Op.soft_command(key, "HMGET", key, "t", "c", "k", "x")])
    if isinstance(reply, Exception):
        return None  # not a record (a key of another type): none
    return _record(workflow_id, reply)


def cancel(ctx: StoreContext, workflow_id: str) -> Plan[WorkflowRecord | None]:
    key = ctx.keys.workflow(workflow_id)
    (reply,) = yield Call([Op.script_call(S.WORKFLOW_CANCEL, [key], [])])
    return _record(workflow_id, reply) if reply else None


def cancelled(ctx: StoreContext, workflow_ids: Sequence[str]) -> Plan[set[str]]:
    """One ``HEXISTS`` per workflow, all in one round trip (per node on a Cluster)."""
    ids = list(dict.fromkeys(workflow_ids))
    if not ids:
        return set()
    keys = [ctx.keys.workflow(wid) for wid in ids]
    replies = yield Call([Op.soft_command(key, "HEXISTS", key, "x") for key in keys])
    return {wid for wid, r in zip(ids, replies, strict=True) if r == 1}


def keep(ctx: StoreContext, keeps: Mapping[str, float]) -> Plan[dict[str, float]]:
    """One ``workflow_keep.lua`` per workflow, all in one round trip (per
    node on a Cluster)."""
    ids = list(keeps)
    if not ids:
        return {}
    replies = yield Call(
        [
            Op.script_call(S.WORKFLOW_KEEP_SCRIPT, [ctx.keys.workflow(wid)], [_ttl_ms(keeps[wid])])
            for wid in ids
        ]
    )
    return {wid: int(r) / 1000 for wid, r in zip(ids, replies, strict=True) if int(r) >= 0}
