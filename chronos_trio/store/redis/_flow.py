"""Workflow continuations on Redis: the partitions' outboxes (filled by the
fenced success settle, see ``lua/settle.lua``) and group arrivals.

Each operation here but ``wait_continuations`` (a Trio event) is a
sans-IO plan (see ``_core``), run by ``StoreContext.run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...records._workflow import FAILED_OUTCOME, Arrival
from .._roles import Continuation, GroupStatus
from . import _scripts as S
from ._codec import ident
from ._context import StoreContext
from ._core import Call, NeedMeta, Plan
from ._scripts import Op
from .keys import PartitionKeys


def continuations(
    ctx: StoreContext, queues: Sequence[str], limit: int, finished: Sequence[Continuation] = ()
) -> Plan[list[Continuation]]:
    """The reads, after the removal of ``finished`` (``finish_continuations``)
    in the same round trip: each partition's ZREM goes before its read, to
    the same node, which runs them in order."""
    removals = _removals(ctx, finished)
    if limit <= 0 or not queues:
        if removals:
            yield Call(removals)
        return []
    metas = yield NeedMeta(queues)
    slots: list[PartitionKeys] = [
        pk for q in dict.fromkeys(queues) for pk in ctx.partitions_of(q, metas[q])
    ]
    replies = yield Call(
        [
            *removals,
            *(Op.script_call(S.OUTBOX_READ, [pk.outbox, pk.job_prefix], [limit]) for pk in slots),
        ]
    )
    replies = replies[len(removals) :]
    out: list[Continuation] = []
    for pk, reply in zip(slots, replies, strict=True):
        # per entry: id, continuation, result, state, last_error, attempts, kind, kept
        for k in range(0, len(reply), 8):
            then, state, error, attempts, kind = (
                reply[k + 1], reply[k + 3], reply[k + 4], reply[k + 5], reply[k + 6]
            )  # fmt: skip
            failed = _text(state) != "succeeded"  # dead or aborted: a failure
            out.append(
                Continuation(
                    ident(reply[k]),
                    pk.queue,
                    pk.placement,
                    _text(then),
                    None if failed else reply[k + 2] or None,
                    failed=failed,
                    kind=_text(kind) if failed else "",
                    error=_text(error) if failed else "",
                    attempts=int(attempts) if failed else 0,
                    kept=bool(reply[k + 7]),
                )
            )
    return out[:limit]


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def finish_continuations(ctx: StoreContext, done: Sequence[Continuation]) -> Plan[None]:
    ops = _removals(ctx, done)
    if ops:
        yield Call(ops)


def _removals(ctx: StoreContext, done: Sequence[Continuation]) -> list[Op]:
    """One DEL per partition of the gone keys of ``done``'s deleted jobs'
    entries (``kept``), then one ZREM per outbox that it has entries in."""
    ids: dict[str, tuple[str, list[str]]] = {}
    kept: dict[str, list[str]] = {}
    for c in done:
        pk = ctx.keys.placed(c.queue, c.placement)
        ids.setdefault(pk.outbox, (pk.tag, []))[1].append(c.job_id)
        if c.kept:
            kept.setdefault(pk.tag, []).append(pk.gone(c.job_id))
    # the kept hashes first: an entry whose ZREM is lost then has nothing
    # left to read and leaves the outbox at its next read
    ops = [Op.command(tag, "DEL", *keys) for tag, keys in kept.items()]
    return ops + [
        Op.command(tag, "ZREM", outbox, *job_ids) for outbox, (tag, job_ids) in ids.items()
    ]


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


def group_status(ctx: StoreContext, group_ids: Sequence[str]) -> Plan[list[GroupStatus]]:
    """One ``group_status.lua`` per group, all in one round trip."""
    if not group_ids:
        return []
    replies = yield Call(
        [Op.script_call(S.GROUP_STATUS, [ctx.keys.group(g)], [FAILED_OUTCOME]) for g in group_ids]
    )
    return [
        GroupStatus(int(arrived), tuple(sorted(int(k) for k in failed)))
        for arrived, failed in replies
    ]
