"""Searching jobs on Redis (``SearchRole.search_jobs``): a bounded walk of
the state indexes, filtered in Redis by a read-only script.

Redis keeps no index of kinds, texts or workers, and a search adds none
(it would cost every enqueue and settle). What narrows a search are the
indexes every job is already in: the queues asked (their partitions, every
live version) and the state indexes of the states asked (dead and aborted
jobs share the dead index), walked one state at a time across the
partitions (an error search walks dead and retry_wait first).

Each index is read in windows of :data:`WINDOW` entries by
``search_scan.lua`` (one call per window: ``ZRANGE`` by rank, then
``HMGET`` of the fields the filters read for each entry, compared in Lua):
it sends back only the ids that may match, whose records are then read
whole (one pipelined round trip) and judged by ``store._search.matches``.
The script is a coarse filter: it keeps every record it cannot judge, so
the answer is the judgement every store applies. A page costs O(records
read), at most ``scan_limit`` records per call (one round trip per window,
plus one for the window's hits), and no call holds Redis for more than one
window (a few ms): a search never blocks Redis, whatever it holds. When
the bound stops a call, the cursor (queue, index, version, partition,
rank) goes on from there.

Ranks move as jobs move: between two calls a job may be skipped or found
twice (as ``list_jobs``'s offsets do).
"""

from __future__ import annotations

import json

from ...records._jobs import Job, JobState
from .._search import (
    JobQuery,
    SearchPage,
    ascii_lower,
    bad_cursor,
    check_search,
    decode_cursor,
    encode_cursor,
)
from .._search import matches as _matches
from . import _scripts as S
from ._admin import INDEXED_STATES, zset_of
from ._codec import HISTORY_FIELD, ident, job_from_fields, record_fields
from ._context import StoreContext
from ._core import Call, NeedMeta, Plan, queue_names_plan
from ._scripts import Op
from .keys import PartitionKeys

#: Index entries one search_scan.lua call reads (a few ms of Redis's time).
WINDOW = 1000

_KNOWN_STATES = {s.value.encode() for s in JobState}

#: Where a walk is: (queue, the index's number in the query's walk order
#: (``_indexes``), version, partition, rank); the walk goes in this order:
#: one state's index across every partition before the next state's.
_Position = tuple[str, int, int, int, int]


#: The indexes an error search walks first: where jobs with an error mostly are.
_ERRORS_FIRST = (JobState.DEAD, JobState.RETRY_WAIT)


def _indexes(query: JobQuery) -> list[JobState]:
    """The index states to walk, in order: those of the asked states
    (aborted -> dead); an error search walks dead and retry_wait first
    (other states keep an error only after a retry or a requeue)."""
    wanted = {JobState.DEAD if s is JobState.ABORTED else s for s in query.states}
    states = [s for s in INDEXED_STATES if not wanted or s in wanted]
    if query.error:
        first = {s: n for n, s in enumerate(_ERRORS_FIRST)}
        states.sort(key=lambda s: first.get(s, len(first)))  # stable: the rest in order
    return states


def _start(cursor: str | None) -> _Position | None:
    if cursor is None:
        return None
    p = decode_cursor(cursor)
    if (
        not isinstance(p, list)
        or len(p) != 5
        or not isinstance(p[0], str)
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in p[1:])
        or not 0 <= p[1] < len(INDEXED_STATES)
        or p[4] < 0
    ):
        raise bad_cursor(cursor)
    return (p[0], p[1], p[2], p[3], p[4])


def search_jobs(
    ctx: StoreContext, query: JobQuery, cursor: str | None, limit: int, scan_limit: int
) -> Plan[SearchPage]:
    check_search(limit, scan_limit)
    start = _start(cursor)
    names = sorted(query.queues) if query.queues else (yield from queue_names_plan(ctx))
    if start is not None:
        names = [q for q in names if q >= start[0]]
    metas = yield NeedMeta(names, True)
    states = _indexes(query)
    # Every (queue, partition, index) to walk, in order, from the cursor's.
    walk: list[tuple[_Position, PartitionKeys, JobState]] = []
    for q in names:
        for pk in ctx.partitions_of(q, metas[q]):
            for number, state in enumerate(states):
                walk.append(((q, number, pk.version, pk.partition, 0), pk, state))
    walk.sort(key=lambda step: step[0])
    if start is not None:
        begin = start[:4]
        walk = [(pos, pk, st) for pos, pk, st in walk if pos[:4] >= begin]
        if walk and walk[0][0][:4] == begin:
            first = walk[0]
            resume: _Position = (begin[0], begin[1], begin[2], begin[3], start[4])
            walk[0] = (resume, first[1], first[2])
    found: list[Job] = []
    scanned = 0
    argv = _filters(query)
    for (q, number, version, part, rank), pk, state in walk:
        while True:
            room = min(WINDOW, scan_limit - scanned)
            if len(found) >= limit or room <= 0:
                cur = encode_cursor([q, number, version, part, rank])
                return SearchPage(tuple(found), cur, scanned, partial=len(found) < limit)
            (reply,) = yield Call(
                [
                    Op.script_call(
                        S.SEARCH_SCAN, [zset_of(pk, state), pk.job_prefix], [rank, room, *argv]
                    )
                ]
            )
            read = int(reply[0])
            candidates = [(int(reply[i]), reply[i + 1]) for i in range(1, len(reply), 2)]
            stored = []
            if candidates:
                stored = yield Call(
                    [
                        Op.soft_command(pk.tag, "HGETALL", pk.job_prefix.encode() + m)
                        for _, m in candidates
                    ]
                )
            used = read  # entries of this window looked at
            for (offset, member), record in zip(candidates, stored, strict=True):
                job = _judged(pk, state, member, record)
                if job is not None and _matches(job, query):
                    found.append(job)
                    if len(found) >= limit:
                        used = offset + 1  # the rest of the window is read by the next call
                        break
            rank += used
            scanned += used
            if read < room and len(found) < limit:
                break
    return SearchPage(tuple(found), None, scanned)


def _filters(query: JobQuery) -> list[str]:
    """search_scan.lua's ARGV[3:] for ``query`` (see its header)."""
    times = []
    for r in (query.created, query.finished, query.due):
        times += ["" if t is None else repr(float(t)) for t in (r.start, r.end)]
    return [
        ",".join(s.value for s in query.states),
        query.kind,
        ascii_lower(query.error),
        query.payload,
        query.worker,
        json.dumps(query.worker, ensure_ascii=False),
        *times,
    ]


def _judged(pk: PartitionKeys, state: JobState, member: bytes, record: object) -> Job | None:
    """The job of an HGETALL reply (None: no record, or a key that is not a
    hash: the checker reports those)."""
    if not isinstance(record, dict) or not record:
        return None
    fields, problem = record_fields(record)
    fields.append(record.get(HISTORY_FIELD))
    known = fields[3] in _KNOWN_STATES
    return job_from_fields(
        ident(member), pk.queue, pk.placement, fields,
        indexed_as=None if known else state, payload_problem=problem,
    )  # fmt: skip


__all__ = ["WINDOW", "search_jobs"]
