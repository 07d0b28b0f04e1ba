"""Inspection, administration and topology changes on Redis (not the hot path:
clarity over round trips, but still never one round trip per job).

Reads are total: a damaged record comes back as a ``Job`` whose ``damage``
says what is wrong (a key that is not a job hash too); a damaged stored
topology is a TopologyError naming it. What the admin scripts set aside is
counted in the store's statistics and logged here, and ``trim`` and
``requeue_dead`` also return it (:class:`~chronos_trio.store.CountResult`).

Each operation here is a sans-IO plan (see ``_core``), run by
``StoreContext.run`` (``store.py`` calls ``ctx.run(plan)``).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from typing import Any

from ...records._jobs import Job, JobState, abort_error
from ...records._log import log_event
from .._roles import (
    NOTHING_SET_ASIDE,
    AbortResult,
    CountResult,
    QueueStats,
    QueueTopology,
    SetAside,
    TopologyError,
    VersionState,
)
from . import _scripts as S
from ._alloc import earliest, pairs
from ._codec import (
    HISTORY_FIELD,
    decode_aside,
    decode_topology,
    encode_topology,
    ident,
    job_from_fields,
    parse_number,
    record_fields,
)
from ._context import StoreContext
from ._core import Call, NeedMeta, Plan, ensure_plan, locations_plan, queue_names_plan
from ._scripts import Op
from .keys import PartitionKeys

#: Work per trim script call (so one call never blocks Redis for long).
_TRIM_CHUNK = 1000
_REQUEUE_CHUNK = 1000
#: The most jobs one purge.lua call deletes (and entries it looks at).
_PURGE_CHUNK = 1000
#: Entries a requeue_dead.lua call may look at beyond the jobs it requeues
#: (aborted jobs and records of a newer format it walks past).
_REQUEUE_LOOK = 4000
#: A completed version's partitions stay closed this long: far longer than any
#: writer's topology cache, so a stale writer is always refused.
_CLOSED_TTL_MS = 24 * 3600 * 1000

log = logging.getLogger("chronos_trio.store.redis")


def _report(ctx: StoreContext, what: str, aside: SetAside) -> SetAside:
    """Count and log what an admin script set aside (the hot path's callers
    report theirs; these callers are operators and the janitor)."""
    ctx.count_aside(aside)
    for job in aside.dead:
        log_event(
            log,
            logging.WARNING,
            f"{what}: dead-lettered",
            job=job.id,
            queue=job.queue,
            error=job.last_error,
        )
    for e in aside.quarantined:
        log_event(
            log,
            logging.WARNING,
            f"{what}: quarantined",
            job=e.job_id,
            queue=e.queue,
            reason=e.reason,
        )
    for e in aside.newer:
        log_event(
            log,
            logging.WARNING,
            f"{what}: left alone",
            job=e.job_id,
            queue=e.queue,
            reason=e.reason,
        )
    return aside


def _not_a_hash(job_id: str, pk: PartitionKeys, error: Exception) -> Job:
    """What get_job/list_jobs show for a job key that is not a hash."""
    return Job(
        job_id, pk.queue, "", b"", 0.0, JobState.DEAD, placement=pk.placement,
        damage=f"its key is not a job hash ({error})",
    )  # fmt: skip


def zset_of(pk: PartitionKeys, state: JobState) -> str:
    """The index of ``state``'s jobs (aborted jobs are kept in the dead index)."""
    return {
        JobState.SCHEDULED: pk.scheduled,
        JobState.READY: pk.ready,
        JobState.LEASED: pk.leased,
        JobState.RETRY_WAIT: pk.retry,
        JobState.SUCCEEDED: pk.succeeded,
        JobState.DEAD: pk.dead,
        JobState.ABORTED: pk.dead,
    }[state]


#: The states with an index of their own, in the scripts' order (aborted jobs
#: share the dead index; ``<tag>:aborted`` marks them there).
INDEXED_STATES: tuple[JobState, ...] = tuple(s for s in JobState if s is not JobState.ABORTED)


def queue_names(ctx: StoreContext) -> Plan[list[str]]:
    return (yield from queue_names_plan(ctx))


def partitions_of_queue(ctx: StoreContext, queue: str) -> Plan[list[PartitionKeys]]:
    """Every partition of ``queue``'s versions (topology read fresh)."""
    metas = yield NeedMeta([queue], True)
    return ctx.partitions_of(queue, metas[queue])


def _locations(ctx: StoreContext, job_id: str, queue: str | None) -> Plan[list[PartitionKeys]]:
    """The one partition per live version where ``job_id`` would live."""
    return (yield from locations_plan(ctx, job_id, queue))


# -- inspection --------------------------------------------------------------------------
def stats(ctx: StoreContext, queues: Sequence[str] | None) -> Plan[list[QueueStats]]:
    names = list(queues) if queues is not None else (yield from queue_names(ctx))
    metas = yield NeedMeta(names, True)
    slots = {q: ctx.partitions_of(q, metas[q]) for q in dict.fromkeys(names)}
    # ZCOUNT below +inf: the leased zset's sentinel is not a job
    # soft: an index key of the wrong type counts 0 (logged), not an error
    # Aborted jobs are counted by their marks (count_aborted.lua), and
    # subtracted from the dead index's count, where they are kept.
    ops = [
        op
        for pks in slots.values()
        for pk in pks
        for op in (
            *(
                Op.soft_command(pk.tag, "ZCOUNT", zset_of(pk, state), "-inf", "(+inf")
                for state in INDEXED_STATES
            ),
            Op.script_call(S.COUNT_ABORTED, [pk.dead, pk.aborted], [], soft=True),
        )
    ]
    replies = iter((yield Call(ops)))
    per_queue: dict[str, QueueStats] = {}
    for q, pks in slots.items():
        counts = dict.fromkeys(JobState, 0)
        parts: dict[tuple[int, int], int] = {}
        for pk in pks:
            total = 0
            here = dict.fromkeys(JobState, 0)
            for state in INDEXED_STATES:
                n = next(replies)
                if isinstance(n, Exception):
                    log_event(
                        log,
                        logging.WARNING,
                        "stats: not an index",
                        key=zset_of(pk, state),
                        error=str(n),
                    )
                    n = 0
                here[state] = n
                total += n
            aborted = next(replies)
            if isinstance(aborted, Exception):
                log_event(
                    log,
                    logging.WARNING,
                    "stats: aborted jobs not counted",
                    partition=pk.tag,
                    error=str(aborted),
                )
                aborted = 0
            here[JobState.ABORTED] = min(aborted, here[JobState.DEAD])
            here[JobState.DEAD] -= here[JobState.ABORTED]
            for kept, n in here.items():
                counts[kept] += n
            if total:
                parts[(pk.version, pk.partition)] = total
        per_queue[q] = QueueStats(q, counts, metas[q].paused, parts)
    return [per_queue[q] for q in names]


def get_job(ctx: StoreContext, job_id: str, queue: str | None) -> Plan[Job | None]:
    locs = yield from _locations(ctx, job_id, queue)
    replies = yield Call(
        [
            op
            for pk in locs
            for op in (
                Op.soft_command(pk.tag, "HGETALL", pk.job(job_id)),
                Op.command(pk.tag, "EXISTS", pk.job(job_id)),
            )
        ]
    )
    for n, pk in enumerate(locs):
        stored, exists = replies[2 * n], replies[2 * n + 1]
        if not exists:
            continue
        if isinstance(stored, Exception):
            return _not_a_hash(job_id, pk, stored)
        fields, problem = record_fields(stored)
        fields.append(stored.get(HISTORY_FIELD))  # only get_job shows the attempt history
        if fields[3] not in _KNOWN_STATES:
            # the state cannot be read: show the job in the index it is in
            return job_from_fields(
                job_id, pk.queue, pk.placement, fields,
                indexed_as=(yield from _index_of(ctx, pk, job_id)), payload_problem=problem,
            )  # fmt: skip
        return job_from_fields(job_id, pk.queue, pk.placement, fields, payload_problem=problem)
    return None


_KNOWN_STATES = {s.value.encode() for s in JobState}


def _index_of(ctx: StoreContext, pk: PartitionKeys, job_id: str) -> Plan[JobState | None]:
    """The state of the first index of ``pk`` that holds ``job_id`` (None: none)."""
    scores = yield Call(
        [Op.soft_command(pk.tag, "ZSCORE", zset_of(pk, state), job_id) for state in INDEXED_STATES]
    )
    for state, score in zip(INDEXED_STATES, scores, strict=True):
        if isinstance(score, bytes | float | int):
            return state
    return None


def list_jobs(
    ctx: StoreContext, queue: str, state: JobState, offset: int, limit: int
) -> Plan[list[Job]]:
    if limit <= 0:
        return []
    offset = max(0, offset)
    slots = yield from partitions_of_queue(ctx, queue)
    n = offset + limit
    picked: list[tuple[float, bytes, int]]
    if state in (JobState.DEAD, JobState.ABORTED):
        picked = yield from _finished_window(ctx, slots, state, offset, n)
    else:
        merged = yield from _merged(ctx, [zset_of(pk, state) for pk in slots], slots, n)
        # Succeeded jobs are indexed by end of retention but listed by finish time:
        # load every candidate and sort them (other states are indexed in list order).
        picked = merged if state is JobState.SUCCEEDED else merged[offset:n]
    fetched = yield Call(
        [
            Op.soft_command(slots[k].tag, "HGETALL", slots[k].job_prefix.encode() + member)
            for _, member, k in picked
        ]
    )
    jobs = []
    for (_, member, k), stored in zip(picked, fetched, strict=True):
        if isinstance(stored, Exception):
            jobs.append(_not_a_hash(ident(member), slots[k], stored))
            continue
        fields, problem = record_fields(stored)
        # an index entry without a record is listed by the checker, not here
        if any(v is not None for v in fields) or problem:
            pk = slots[k]
            job = job_from_fields(
                ident(member), queue, pk.placement, fields,
                indexed_as=state, payload_problem=problem,
            )  # fmt: skip
            jobs.append(job)
    if state is JobState.SUCCEEDED:
        jobs.sort(key=lambda j: (j.finished_at or 0.0, j.id))
        jobs = jobs[offset:n]
    return jobs


def _merged(
    ctx: StoreContext, zsets: Sequence[str], slots: Sequence[PartitionKeys], n: int
) -> Plan[list[tuple[float, bytes, int]]]:
    """The first ``n`` entries of each of ``zsets`` (one per partition of
    ``slots``), merged by score: (score, member, partition index); an index
    key of the wrong type lists nothing."""
    replies = yield Call(
        [
            Op.soft_command(pk.tag, "ZRANGE", z, 0, n - 1, "WITHSCORES")
            for pk, z in zip(slots, zsets, strict=True)
        ]
    )
    replies = [[] if isinstance(r, Exception) else r for r in replies]
    return list(
        heapq.merge(
            *([(score, member, k) for score, member in pairs(r)] for k, r in enumerate(replies))
        )
    )


def _finished_window(
    ctx: StoreContext, slots: Sequence[PartitionKeys], state: JobState, offset: int, n: int
) -> Plan[list[tuple[float, bytes, int]]]:
    """Entries ``offset`` to ``n`` (in finish order) of the jobs in ``state``,
    dead or aborted: both are kept in the dead index. Dead jobs are the dead
    index's entries but the aborted ones, aborted jobs their marks' entries
    whose record is aborted and finished at the mark's time (a stale mark's
    job has left, or finished again). While no partition holds an aborted
    job, dead jobs are listed as any index is; otherwise the state of each
    candidate is read (one command each, in one round trip), and the window
    doubles until it holds ``n`` jobs of ``state`` or the index is read."""
    aborted = state is JobState.ABORTED
    if not aborted:
        marks = yield Call([Op.soft_command(pk.tag, "ZCARD", pk.aborted) for pk in slots])
        if not any(m for m in marks if not isinstance(m, Exception)):
            return (yield from _merged(ctx, [pk.dead for pk in slots], slots, n))[offset:n]
    want = n
    while True:
        zsets = [pk.aborted if aborted else pk.dead for pk in slots]
        merged = yield from _merged(ctx, zsets, slots, want)
        read = yield Call(
            [
                Op.soft_command(
                    slots[k].tag, "HMGET", slots[k].job_prefix.encode() + m, "state", "finished_at"
                )
                for _, m, k in merged
            ]
        )
        keep = []
        for entry, fields in zip(merged, read, strict=True):
            if isinstance(fields, Exception):
                is_aborted = False  # not a job hash: listed with the dead (as damaged)
            else:
                is_aborted = fields[0] == b"aborted"
                if aborted and is_aborted:
                    finished = parse_number(fields[1]) if fields[1] else None
                    is_aborted = finished == entry[0]
            if is_aborted == aborted:
                keep.append(entry)
        per_partition = [sum(1 for _, _, k in merged if k == i) for i in range(len(slots))]
        if len(keep) >= n or all(c < want for c in per_partition):
            return keep[offset:n]
        want *= 2


# -- administration ---------------------------------------------------------------------------
def run_now(ctx: StoreContext, job_id: str, queue: str | None) -> Plan[bool]:
    locs = yield from _locations(ctx, job_id, queue)
    # A job lives in one place; running the script everywhere it could be
    # saves the round trip that would find it first.
    replies = yield Call(
        [
            Op.script_call(
                S.RUN_NOW,
                [pk.scheduled, pk.retry, pk.dead, pk.ready, pk.job_prefix, pk.leased, pk.succeeded],
                [job_id],
            )
            for pk in locs
        ]
    )
    _report_all(ctx, "run_now", locs, replies)
    moved = [pk for pk, r in zip(locs, replies, strict=True) if r[0] == 1]
    if moved:
        yield Call([], after=ctx.wake_ready_ops({moved[0].queue: 1}))
    return bool(moved)


def delete_job(ctx: StoreContext, job_id: str, queue: str | None) -> Plan[bool]:
    locs = yield from _locations(ctx, job_id, queue)
    replies = yield Call(
        [
            Op.script_call(
                S.DELETE,
                [pk.scheduled, pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead, pk.job_prefix],
                [job_id],
            )
            for pk in locs
        ]
    )
    _report_all(ctx, "delete_job", locs, replies)
    deleted = any(r[0] == 1 for r in replies)
    if deleted:
        ctx.outbox_filled.set()  # it may have kept its place in a flow there
    return deleted


#: abort.lua's codes (see its header).
_ABORT_CODES = {
    1: AbortResult.ABORTED,
    2: AbortResult.FLAGGED,
    -1: AbortResult.FINISHED,
    4: AbortResult.FINISHED,  # dead-lettered as damaged
}


def abort(ctx: StoreContext, job_id: str, queue: str | None, reason: str) -> Plan[AbortResult]:
    locs = yield from _locations(ctx, job_id, queue)
    text = abort_error(reason)
    # A job lives in one place; running the script everywhere it could be
    # saves the round trip that would find it first.
    replies = yield Call(
        [
            Op.script_call(
                S.ABORT,
                [pk.scheduled, pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead, pk.job_prefix],
                [job_id, text],
            )
            for pk in locs
        ]
    )
    _report_all(ctx, "abort", locs, replies)
    found = [_ABORT_CODES[r[0]] for r in replies if r[0] in _ABORT_CODES]
    if AbortResult.ABORTED in found:
        ctx.outbox_filled.set()  # its step may have ended failed in its flow there
    return found[0] if found else AbortResult.NOT_FOUND


def _report_all(
    ctx: StoreContext, what: str, slots: Sequence[PartitionKeys], replies: Sequence[Any]
) -> SetAside:
    """Decode, count and log the set-aside part (``reply[-1]``) of each reply."""
    aside = NOTHING_SET_ASIDE
    for pk, reply in zip(slots, replies, strict=True):
        aside += decode_aside(reply[-1], pk.queue, pk.placement)
    return _report(ctx, what, aside)


def requeue_dead(ctx: StoreContext, queue: str, limit: int | None) -> Plan[CountResult]:
    slots = yield from partitions_of_queue(ctx, queue)
    if not slots:
        return CountResult(0, NOTHING_SET_ASIDE)
    total = 0
    aside = NOTHING_SET_ASIDE
    #: Per partition, the oldest dead entries left in place so far (aborted
    #: jobs, newer records): later calls pass over them.
    kept = dict.fromkeys(slots, 0)

    def requeue(run: Sequence[tuple[PartitionKeys, int]]) -> Plan[list[Any]]:
        nonlocal total, aside
        replies: list[Any] = yield Call(
            [
                Op.script_call(
                    S.REQUEUE_DEAD,
                    [pk.dead, pk.ready, pk.job_prefix, pk.damaged],
                    [n, n + _REQUEUE_LOOK, kept[pk]],
                )
                for pk, n in run
            ]
        )
        for (pk, _), reply in zip(run, replies, strict=True):
            kept[pk] += reply[2]
        total += sum(r[0] for r in replies)
        aside += _report_all(ctx, "requeue_dead", [pk for pk, _ in run], replies)
        return replies

    if not limit:  # None or 0: all of them, in bounded chunks
        active = slots
        while active:
            replies = yield from requeue([(pk, _REQUEUE_CHUNK) for pk in active])
            # again while the script stopped at its bounds (see requeue_dead.lua)
            active = [pk for pk, r in zip(active, replies, strict=True) if r[1] == 1]
    else:
        # The oldest dead first across partitions, by a peek at each one's
        # oldest entries but its aborted jobs (marked: they are not
        # requeued, and each script walks past them). A share that still
        # falls short (records of a newer format are left too) is taken
        # from the partitions in turn.
        marks = yield Call(
            [Op.soft_command(pk.tag, "ZRANGE", pk.aborted, 0, -1, "WITHSCORES") for pk in slots]
        )
        marked = [set() if isinstance(m, Exception) else set(pairs(m)) for m in marks]
        peek = yield Call(
            [
                Op.command(pk.tag, "ZRANGE", pk.dead, 0, limit + len(skip) - 1, "WITHSCORES")
                for pk, skip in zip(slots, marked, strict=True)
            ]
        )
        candidates = {
            pk: [entry for entry in pairs(r) if entry not in skip]
            for pk, r, skip in zip(slots, peek, marked, strict=True)
        }
        plan = earliest(candidates, limit)
        replies = yield from requeue(list(plan.items()))
        more = [pk for pk, r in zip(plan, replies, strict=True) if r[1] == 1]
        more += [pk for pk in slots if pk not in plan]
        while total < limit and more:
            pk = more.pop(0)
            (reply,) = yield from requeue([(pk, limit - total)])
            if reply[1] == 1:
                more.append(pk)
    if total:
        yield Call([], after=ctx.wake_ready_ops({queue: total}))
    return CountResult(total, aside)


def purge_queue(ctx: StoreContext, queue: str, limit: int) -> Plan[CountResult]:
    """Up to ``limit`` jobs of ``queue`` deleted (purge.lua), the share of
    each partition run in one batch, then what a partition left unused
    taken from those that have more, until ``limit`` or none has more."""
    slots = yield from partitions_of_queue(ctx, queue)
    total = 0
    aside = NOTHING_SET_ASIDE
    if limit <= 0 or not slots:
        return CountResult(0, aside)
    #: Per partition, the entries of each index earlier calls left in place.
    kept = {pk: [0] * 5 for pk in slots}
    active = list(slots)
    while active and total < limit:
        left = limit - total  # shared out exactly: never more than limit in all
        n = len(active)
        run = [(pk, left // n + (k < left % n)) for k, pk in enumerate(active)]
        run = [(pk, share) for pk, share in run if share > 0]
        waiting = active[len(run) :]  # no share this round: their turn comes
        replies = yield Call(
            [
                Op.script_call(
                    S.PURGE,
                    [
                        *(pk.scheduled, pk.ready, pk.retry, pk.succeeded, pk.dead),
                        *(pk.job_prefix, pk.damaged, pk.aborted),
                    ],
                    [min(share, _PURGE_CHUNK), *kept[pk]],
                )
                for pk, share in run
            ]
        )
        aside += _report_all(ctx, "purge_queue", [pk for pk, _ in run], replies)
        for (pk, _), reply in zip(run, replies, strict=True):
            kept[pk] = [k + int(c) for k, c in zip(kept[pk], reply[2:7], strict=True)]
        total += sum(int(r[0]) for r in replies)
        ran = [pk for pk, _ in run]
        active = [pk for pk, r in zip(ran, replies, strict=True) if r[1] == 1] + waiting
    if total:
        ctx.outbox_filled.set()  # they may have kept their places in flows there
    return CountResult(total, aside)


def set_paused(ctx: StoreContext, queue: str, paused: bool) -> Plan[None]:
    keys = ctx.keys
    default = encode_topology(ctx.default_versions())
    yield Call(
        [
            Op.command(keys.paused, "SADD" if paused else "SREM", keys.paused, queue),
            # pausing registers the queue, as an enqueue would
            Op.command(keys.topology, "HSETNX", keys.topology, queue, default),
        ],
        # a resume: every idle waiter of the queue looks (one entry reaches them all)
        after=[] if paused else ctx.wake_ready_ops({queue: 1}),
    )
    ctx.forget(queue)


def trim(
    ctx: StoreContext,
    queues: Sequence[str],
    dead_max_age: float | None,
    dead_max_count: int | None,
    keep_succeeded: int | None = None,
) -> Plan[CountResult]:
    names = list(dict.fromkeys(queues))
    metas = yield NeedMeta(names, True)
    slots = {q: ctx.partitions_of(q, metas[q]) for q in names}
    age = "" if dead_max_age is None else repr(float(dead_max_age))
    deleted = 0
    aside = NOTHING_SET_ASIDE
    dead_left: dict[PartitionKeys, int] = {}
    done_left: dict[PartitionKeys, int] = {}
    active = [pk for pks in slots.values() for pk in pks]
    while active:
        replies = yield Call(
            [
                Op.script_call(
                    S.TRIM,
                    [pk.succeeded, pk.dead, pk.job_prefix, pk.damaged],
                    [age, _TRIM_CHUNK, 0, 0],
                )
                for pk in active
            ]
        )
        for pk, (n, _more, left, done, _) in zip(active, replies, strict=True):
            deleted += n
            dead_left[pk] = left
            done_left[pk] = done
        aside += _report_all(ctx, "trim", active, replies)
        active = [pk for pk, r in zip(active, replies, strict=True) if r[1] == 1]
    for keep, left, dead in ((dead_max_count, dead_left, True), (keep_succeeded, done_left, False)):
        if keep is None:
            continue
        for pks in slots.values():
            excess = sum(left.get(pk, 0) for pk in pks) - max(0, keep)
            n, more = yield from _trim_first(ctx, pks, excess, dead)
            deleted += n
            aside += more
    return CountResult(deleted, aside)


def _trim_first(
    ctx: StoreContext, pks: Sequence[PartitionKeys], excess: int, dead: bool
) -> Plan[tuple[int, SetAside]]:
    """Delete the first ``excess`` entries of one queue's dead index (the
    oldest dead; ``dead`` True) or succeeded index (the retained successes
    whose retention ends first) over its partitions ``pks``, in one order
    by score. Returns how many were deleted and what was set aside."""
    deleted = 0
    aside = NOTHING_SET_ASIDE
    while excess > 0:
        step = min(excess, _TRIM_CHUNK)
        if len(pks) == 1:
            plan = {pks[0]: step}
        else:
            zsets = [(pk, pk.dead if dead else pk.succeeded) for pk in pks]
            peek = yield Call(
                [Op.command(pk.tag, "ZRANGE", z, 0, step - 1, "WITHSCORES") for pk, z in zsets]
            )
            plan = earliest({pk: pairs(r) for pk, r in zip(pks, peek, strict=True)}, step)
        if not plan:
            break
        run = list(plan.items())
        replies = yield Call(
            [
                Op.script_call(
                    S.TRIM,
                    [pk.succeeded, pk.dead, pk.job_prefix, pk.damaged],
                    ["", 0, n, 0] if dead else ["", 0, 0, n],
                )
                for pk, n in run
            ]
        )
        gone = sum(r[0] for r in replies)
        deleted += gone
        aside += _report_all(ctx, "trim", [pk for pk, _ in run], replies)
        excess -= step
        if gone == 0:
            break
    return deleted, aside


# -- topology ----------------------------------------------------------------------------------
def _damaged_topology(ctx: StoreContext, queue: str, damage: str) -> TopologyError:
    return TopologyError(
        f"queue {queue!r}: {damage}; its jobs are not routed until field {queue!r} of "
        f"{ctx.keys.topology} is repaired"
    )


def topology(ctx: StoreContext, queue: str) -> Plan[QueueTopology]:
    metas = yield from ensure_plan(ctx, [queue], fresh=True)
    if metas[queue].damage:
        raise _damaged_topology(ctx, queue, metas[queue].damage)
    return QueueTopology(queue, metas[queue].versions or ctx.default_versions())


def promote_queue_version(
    ctx: StoreContext, queue: str, version: int, partitions: int
) -> Plan[QueueTopology]:
    if partitions < 1:
        raise TopologyError(f"partitions must be >= 1, got {partitions}")
    ((ok, value, *stored),) = yield Call(
        [
            Op.script_call(
                S.TOPOLOGY_PROMOTE,
                [ctx.keys.topology],
                [queue, int(version), int(partitions), ctx.default_partitions],
            )
        ]
    )
    if stored:
        raise _damaged_topology(ctx, queue, f"damaged topology encoding {ident(stored[0])!r}")
    if not ok:
        raise TopologyError(
            f"queue {queue!r}: new version {version} must be greater than {int(value)}"
        )
    versions = decode_topology(value)
    ctx.remember(queue, versions)
    return QueueTopology(queue, versions)


def complete_draining_version(ctx: StoreContext, queue: str, version: int) -> Plan[QueueTopology]:
    metas = yield from ensure_plan(ctx, [queue], fresh=True)
    if metas[queue].damage:
        raise _damaged_topology(ctx, queue, metas[queue].damage)
    match = [v for v in metas[queue].versions or () if v.version == version]
    if not match:
        raise TopologyError(f"queue {queue!r} has no version {version}")
    if match[0].state is VersionState.ACTIVE:
        raise TopologyError(f"queue {queue!r}: version {version} is active, not draining")
    pks = [ctx.keys.partition(queue, version, p) for p in range(match[0].partitions)]
    # Close every partition that is empty, atomically per partition, so that a
    # writer with a stale topology cannot slip a job in once we have checked.
    replies = yield Call(
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
            yield Call([Op.command(pk.tag, "DEL", pk.closed) for pk in reopen])
        raise TopologyError(
            f"queue {queue!r}: version {version} still holds {left} job(s); "
            "let workers drain it first"
        )
    ((ok, value, *stored),) = yield Call(
        [
            Op.script_call(
                S.TOPOLOGY_COMPLETE,
                [ctx.keys.topology],
                [queue, int(version), ctx.default_partitions],
            )
        ]
    )
    if stored:
        raise _damaged_topology(ctx, queue, f"damaged topology encoding {ident(stored[0])!r}")
    if not ok:
        ctx.forget(queue)
        raise TopologyError(f"queue {queue!r}: version {version} is {value.decode()}")
    versions = decode_topology(value)
    ctx.remember(queue, versions)
    return QueueTopology(queue, versions)
