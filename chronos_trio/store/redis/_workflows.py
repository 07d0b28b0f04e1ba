"""Workflow records on Redis (``WorkflowRole``): one hash per workflow in
its own slot (``KeySpace.workflow``), written by ``workflow_save.lua`` and
``workflow_cancel.lua``, read with plain commands. Sans-IO plans (see
``_core``), run by ``StoreContext.run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _scripts as S
from ._codec import text
from ._context import StoreContext
from ._core import Call, Plan
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


def save(ctx: StoreContext, workflow_id: str, tree: str, first_kind: str, ttl: float) -> Plan[bool]:
    key = ctx.keys.workflow(workflow_id)
    (reply,) = yield Call(
        [Op.script_call(S.WORKFLOW_SAVE, [key], [tree, first_kind, _ttl_ms(ttl)])]
    )
    return bool(int(reply))


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
