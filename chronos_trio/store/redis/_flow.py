"""Workflow continuations on Redis: the partitions' outboxes (filled by the
fenced success settle, see ``lua/settle.lua``) and group arrivals.

Each operation here but ``wait_continuations`` (a Trio event) is a
sans-IO plan (see ``_core``), run by ``StoreContext.run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...records._workflow import Arrival
from .._roles import Continuation
from . import _scripts as S
from ._codec import ident
from ._context import StoreContext
from ._core import Call, NeedMeta, Plan
from ._scripts import Op
from .keys import PartitionKeys


def continuations(ctx: StoreContext, queues: Sequence[str], limit: int) -> Plan[list[Continuation]]:
    if limit <= 0 or not queues:
        return []
    metas = yield NeedMeta(queues)
    slots: list[PartitionKeys] = [
        pk for q in dict.fromkeys(queues) for pk in ctx.partitions_of(q, metas[q])
    ]
    replies = yield Call(
        [Op.script_call(S.OUTBOX_READ, [pk.outbox, pk.job_prefix], [limit]) for pk in slots]
    )
    out: list[Continuation] = []
    for pk, reply in zip(slots, replies, strict=True):
        for k in range(0, len(reply), 3):
            then = reply[k + 1]
            out.append(
                Continuation(
                    ident(reply[k]),
                    pk.queue,
                    pk.placement,
                    then.decode("utf-8", "replace") if isinstance(then, bytes) else then,
                    reply[k + 2] or None,
                )
            )
    return out[:limit]


def finish_continuations(ctx: StoreContext, done: Sequence[Continuation]) -> Plan[None]:
    if not done:
        return
    ops = []
    for c in done:
        pk = ctx.keys.placed(c.queue, c.placement)
        ops.append(Op.command(pk.tag, "ZREM", pk.outbox, c.job_id))
    yield Call(ops)


async def wait_continuations(ctx: StoreContext, timeout: float) -> None:
    await ctx.outbox_filled.take(timeout)


def group_arrive(
    ctx: StoreContext, arrivals: Sequence[Arrival], ttl: float
) -> Plan[list[list[bytes | None] | None]]:
    """One ``group_arrive.lua`` per arrival, all in one round trip (per node
    on a Cluster; the calls of one group run in their order)."""
    if not arrivals:
        return []
    ttl_ms = max(1, math.ceil(ttl * 1000))
    replies = yield Call(
        [
            Op.script_call(
                S.GROUP_ARRIVE,
                [ctx.keys.group(a.group_id)],
                [a.index, a.size, b"-" if a.result is None else b"=" + a.result, ttl_ms],
            )
            for a in arrivals
        ]
    )
    return [
        [None if not v or v == b"-" else bytes(v[1:]) for v in reply] if reply else None
        for reply in replies
    ]
