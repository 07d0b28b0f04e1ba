"""Inspection, administration and topology changes on Redis (not the hot path:
clarity over round trips, but still never one round trip per job)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from ...records._jobs import Job, JobState
from .._partitioning import partition_of
from .._roles import QueueStats, QueueTopology, TopologyError, VersionState
from . import _scripts as S
from ._alloc import earliest, pairs
from ._codec import JOB_FIELDS, decode_topology, encode_topology, job_from_fields
from ._context import StoreContext
from ._scripts import Op
from .keys import PartitionKeys

#: Work per trim script call (so one call never blocks Redis for long).
_TRIM_CHUNK = 1000
_REQUEUE_CHUNK = 1000
#: A completed version's partitions stay closed this long: far longer than any
#: writer's topology cache, so a stale writer is always refused.
_CLOSED_TTL_MS = 24 * 3600 * 1000


def zset_of(pk: PartitionKeys, state: JobState) -> str:
    return {
        JobState.SCHEDULED: pk.scheduled,
        JobState.READY: pk.ready,
        JobState.LEASED: pk.leased,
        JobState.RETRY_WAIT: pk.retry,
        JobState.SUCCEEDED: pk.succeeded,
        JobState.DEAD: pk.dead,
    }[state]


async def queue_names(ctx: StoreContext) -> list[str]:
    (names,) = await ctx.adapter.execute(
        [Op.command(ctx.keys.topology, "HKEYS", ctx.keys.topology)]
    )
    return sorted(n.decode() for n in names)


async def _slots(ctx: StoreContext, queue: str) -> list[PartitionKeys]:
    metas = await ctx.meta([queue], fresh=True)
    return ctx.partitions_of(queue, metas[queue])


async def _locations(ctx: StoreContext, job_id: str, queue: str | None) -> list[PartitionKeys]:
    """The one partition per live version where ``job_id`` would live."""
    names = [queue] if queue is not None else await queue_names(ctx)
    metas = await ctx.meta(names, fresh=True)
    return [
        ctx.keys.partition(q, v.version, partition_of(job_id, v.partitions))
        for q in names
        for v in metas[q].versions or ()
    ]


# -- inspection --------------------------------------------------------------------------
async def stats(ctx: StoreContext, queues: Sequence[str] | None) -> list[QueueStats]:
    names = list(queues) if queues is not None else await queue_names(ctx)
    metas = await ctx.meta(names, fresh=True)
    slots = {q: ctx.partitions_of(q, metas[q]) for q in dict.fromkeys(names)}
    # ZCOUNT below +inf: the leased zset's sentinel is not a job
    ops = [
        Op.command(pk.tag, "ZCOUNT", zset_of(pk, state), "-inf", "(+inf")
        for pks in slots.values()
        for pk in pks
        for state in JobState
    ]
    replies = iter(await ctx.adapter.execute(ops))
    per_queue: dict[str, QueueStats] = {}
    for q, pks in slots.items():
        counts = dict.fromkeys(JobState, 0)
        parts: dict[tuple[int, int], int] = {}
        for pk in pks:
            total = 0
            for state in JobState:
                n = next(replies)
                counts[state] += n
                total += n
            if total:
                parts[(pk.version, pk.partition)] = total
        per_queue[q] = QueueStats(q, counts, metas[q].paused, parts)
    return [per_queue[q] for q in names]


async def get_job(ctx: StoreContext, job_id: str, queue: str | None) -> Job | None:
    locs = await _locations(ctx, job_id, queue)
    replies = await ctx.adapter.execute(
        [Op.command(pk.tag, "HMGET", pk.job(job_id), *JOB_FIELDS) for pk in locs]
    )
    for pk, fields in zip(locs, replies, strict=True):
        if fields[3] is not None:
            return job_from_fields(job_id, pk.queue, pk.version, pk.partition, fields)
    return None


async def list_jobs(
    ctx: StoreContext, queue: str, state: JobState, offset: int, limit: int
) -> list[Job]:
    if limit <= 0:
        return []
    offset = max(0, offset)
    slots = await _slots(ctx, queue)
    n = offset + limit
    replies = await ctx.adapter.execute(
        [Op.command(pk.tag, "ZRANGE", zset_of(pk, state), 0, n - 1, "WITHSCORES") for pk in slots]
    )
    merged = list(
        heapq.merge(
            *([(score, member, k) for score, member in pairs(r)] for k, r in enumerate(replies))
        )
    )
    # Succeeded jobs are indexed by end of retention but listed by finish time:
    # load every candidate and sort them (other states are indexed in list order).
    picked = merged if state is JobState.SUCCEEDED else merged[offset:n]
    fetched = await ctx.adapter.execute(
        [
            Op.command(slots[k].tag, "HMGET", slots[k].job(member.decode()), *JOB_FIELDS)
            for _, member, k in picked
        ]
    )
    jobs = [
        job_from_fields(member.decode(), queue, slots[k].version, slots[k].partition, f)
        for (_, member, k), f in zip(picked, fetched, strict=True)
        if f[3] is not None
    ]
    if state is JobState.SUCCEEDED:
        jobs.sort(key=lambda j: (j.finished_at or 0.0, j.id))
        jobs = jobs[offset:n]
    return jobs


# -- administration ---------------------------------------------------------------------------
async def run_now(ctx: StoreContext, job_id: str, queue: str | None) -> bool:
    locs = await _locations(ctx, job_id, queue)
    # A job lives in one place; running the script everywhere it could be
    # saves the round trip that would find it first.
    replies = await ctx.adapter.execute(
        [
            Op.script_call(
                S.RUN_NOW, [pk.scheduled, pk.retry, pk.dead, pk.ready, pk.job_prefix], [job_id]
            )
            for pk in locs
        ]
    )
    moved = [pk for pk, r in zip(locs, replies, strict=True) if r == 1]
    if moved:
        await ctx.adapter.execute([], after=ctx.wake_ready_ops({moved[0].queue: 1}))
    return bool(moved)


async def delete_job(ctx: StoreContext, job_id: str, queue: str | None) -> bool:
    locs = await _locations(ctx, job_id, queue)
    replies = await ctx.adapter.execute(
        [
            Op.script_call(
                S.DELETE,
                [pk.scheduled, pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead, pk.job_prefix],
                [job_id],
            )
            for pk in locs
        ]
    )
    return any(r == 1 for r in replies)


async def requeue_dead(ctx: StoreContext, queue: str, limit: int | None) -> int:
    slots = await _slots(ctx, queue)
    if not slots:
        return 0
    total = 0
    if not limit:  # None or 0: all of them, in bounded chunks
        active = slots
        while active:
            replies = await ctx.adapter.execute(
                [
                    Op.script_call(
                        S.REQUEUE_DEAD, [pk.dead, pk.ready, pk.job_prefix], [_REQUEUE_CHUNK]
                    )
                    for pk in active
                ]
            )
            total += sum(replies)
            active = [pk for pk, r in zip(active, replies, strict=True) if r >= _REQUEUE_CHUNK]
    else:
        peek = await ctx.adapter.execute(
            [Op.command(pk.tag, "ZRANGE", pk.dead, 0, limit - 1, "WITHSCORES") for pk in slots]
        )
        plan = earliest({pk: pairs(r) for pk, r in zip(slots, peek, strict=True)}, limit)
        replies = await ctx.adapter.execute(
            [
                Op.script_call(S.REQUEUE_DEAD, [pk.dead, pk.ready, pk.job_prefix], [n])
                for pk, n in plan.items()
            ]
        )
        total = sum(replies)
    if total:
        await ctx.adapter.execute([], after=ctx.wake_ready_ops({queue: total}))
    return total


async def set_paused(ctx: StoreContext, queue: str, paused: bool) -> None:
    keys = ctx.keys
    default = encode_topology(ctx.default_versions())
    await ctx.adapter.execute(
        [
            Op.command(keys.paused, "SADD" if paused else "SREM", keys.paused, queue),
            # pausing registers the queue, as an enqueue would
            Op.command(keys.topology, "HSETNX", keys.topology, queue, default),
        ],
        after=[] if paused else ctx.wake_ready_ops({queue: 8}),
    )
    ctx.forget(queue)


async def trim(
    ctx: StoreContext,
    queues: Sequence[str],
    dead_max_age: float | None,
    dead_max_count: int | None,
) -> int:
    names = list(dict.fromkeys(queues))
    metas = await ctx.meta(names, fresh=True)
    slots = {q: ctx.partitions_of(q, metas[q]) for q in names}
    age = "" if dead_max_age is None else repr(float(dead_max_age))
    deleted = 0
    dead_left: dict[PartitionKeys, int] = {}
    active = [pk for pks in slots.values() for pk in pks]
    while active:
        replies = await ctx.adapter.execute(
            [
                Op.script_call(
                    S.TRIM, [pk.succeeded, pk.dead, pk.job_prefix], [age, _TRIM_CHUNK, 0]
                )
                for pk in active
            ]
        )
        for pk, (n, _more, left) in zip(active, replies, strict=True):
            deleted += n
            dead_left[pk] = left
        active = [pk for pk, r in zip(active, replies, strict=True) if r[1] == 1]
    if dead_max_count is None:
        return deleted
    for pks in slots.values():
        excess = sum(dead_left.get(pk, 0) for pk in pks) - max(0, dead_max_count)
        while excess > 0:
            step = min(excess, _TRIM_CHUNK)
            if len(pks) == 1:
                plan = {pks[0]: step}
            else:
                peek = await ctx.adapter.execute(
                    [Op.command(pk.tag, "ZRANGE", pk.dead, 0, step - 1, "WITHSCORES") for pk in pks]
                )
                plan = earliest({pk: pairs(r) for pk, r in zip(pks, peek, strict=True)}, step)
            if not plan:
                break
            replies = await ctx.adapter.execute(
                [
                    Op.script_call(S.TRIM, [pk.succeeded, pk.dead, pk.job_prefix], ["", 0, n])
                    for pk, n in plan.items()
                ]
            )
            gone = sum(r[0] for r in replies)
            deleted += gone
            excess -= step
            if gone == 0:
                break
    return deleted


# -- topology ----------------------------------------------------------------------------------
async def topology(ctx: StoreContext, queue: str) -> QueueTopology:
    metas = await ctx.ensure([queue], fresh=True)
    return QueueTopology(queue, metas[queue].versions or ctx.default_versions())


async def promote_queue_version(
    ctx: StoreContext, queue: str, version: int, partitions: int
) -> QueueTopology:
    if partitions < 1:
        raise TopologyError(f"partitions must be >= 1, got {partitions}")
    ((ok, value),) = await ctx.adapter.execute(
        [
            Op.script_call(
                S.TOPOLOGY_PROMOTE,
                [ctx.keys.topology],
                [queue, int(version), int(partitions), ctx.default_partitions],
            )
        ]
    )
    if not ok:
        raise TopologyError(
            f"queue {queue!r}: new version {version} must be greater than {int(value)}"
        )
    versions = decode_topology(value)
    ctx.remember(queue, versions)
    return QueueTopology(queue, versions)


async def complete_draining_version(ctx: StoreContext, queue: str, version: int) -> QueueTopology:
    metas = await ctx.ensure([queue], fresh=True)
    match = [v for v in metas[queue].versions or () if v.version == version]
    if not match:
        raise TopologyError(f"queue {queue!r} has no version {version}")
    if match[0].state is VersionState.ACTIVE:
        raise TopologyError(f"queue {queue!r}: version {version} is active, not draining")
    pks = [ctx.keys.partition(queue, version, p) for p in range(match[0].partitions)]
    # Close every partition that is empty, atomically per partition, so that a
    # writer with a stale topology cannot slip a job in once we have checked.
    replies = await ctx.adapter.execute(
        [
            Op.script_call(
                S.CLOSE_PARTITION,
                [
                    pk.scheduled,
                    pk.ready,
                    pk.leased,
                    pk.retry,
                    pk.succeeded,
                    pk.dead,
                    pk.tokens,
                    pk.closed,
                ],
                [_CLOSED_TTL_MS],
            )
            for pk in pks
        ]
    )
    left = sum(held for _, held in replies)
    if left:
        reopen = [pk for pk, (closed, _) in zip(pks, replies, strict=True) if closed]
        if reopen:
            await ctx.adapter.execute([Op.command(pk.tag, "DEL", pk.closed) for pk in reopen])
        raise TopologyError(
            f"queue {queue!r}: version {version} still holds {left} job(s); "
            "let workers drain it first"
        )
    ((ok, value),) = await ctx.adapter.execute(
        [
            Op.script_call(
                S.TOPOLOGY_COMPLETE,
                [ctx.keys.topology],
                [queue, int(version), ctx.default_partitions],
            )
        ]
    )
    if not ok:
        ctx.forget(queue)
        raise TopologyError(f"queue {queue!r}: version {version} is {value.decode()}")
    versions = decode_topology(value)
    ctx.remember(queue, versions)
    return QueueTopology(queue, versions)
