"""Enqueue on SQLite: PostgreSQL's ``chronos_enqueue`` in Python, in the
caller's write transaction (the file's write lock is held from BEGIN, so
reading then writing here is atomic across every process of the file).

The rules, job by job, in order (the MemoryStore's):

* a job whose ID exists (any state) is left alone: ``created`` False, its
  due time and placement;
* ``run_at`` None means ``now + max(0, delay)``; a due job (``run_at <=
  now``) is ready, others scheduled;
* the stored control is :func:`~chronos_trio.records._unique.with_run_slot`
  of the job's (a unique job also takes its key's run slot), its relative
  expiry (``expires_in``) made absolute at ``now``; the ``priority`` column
  is the control's priority;
* a unique job is judged by ``store._unique_rules`` (the MemoryStore's
  rules), against ``unique_locks``: a live lock whose holder is pending is a duplicate (the
  holder reported), except that a debounce replaces a waiting holder's
  payload, headers and due time, and is stored (taking the key) while its
  holder runs; a throttle's lock kept after its job succeeded is a
  duplicate until it lapses; a stale lock (holder gone or finished) is
  taken over;
* a created job lives at its queue's active version (``queue_versions``;
  version 1 partition 0 for a queue never promoted), partition
  ``id_hash(id) % partitions``;
* every queue of the batch is registered in ``queues``;
* a created job marked as waited on (``NewJob.keep_outcome``) gets a
  result waiter that never lapses (``store._settling.KEEP_OUTCOME_WAITER``), so the
  settle that finishes it keeps it readable as for a live waiter (and
  forgets the waiter then, as it forgets every waiter of a finished job;
  an abort, a delete or a purge forgets it too).

A batch without unique jobs and without a repeated ID (the bulk case) is one
``executemany`` of ``INSERT ... ON CONFLICT DO NOTHING``; when it stored
fewer rows than jobs (an ID existed), it is undone (a savepoint) and the
batch goes job by job, which reports each existing job as it stands.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence

from ...records._jobs import EnqueueResult, JobState, NewJob
from ...records._unique import with_run_slot
from .._partitioning import id_hash
from .._rows import headers_text
from .._settling import KEEP_OUTCOME_WAITER
from .._topology_placement import topology_placement
from .._unique_rules import Claim, judge_claim, lock_lapses, lock_live

_INSERT = """
INSERT INTO jobs (id, queue, kind, payload, run_at, state, max_retries, timeout, created_at,
                  headers, then_step, control, priority, version, part, unique_key, unique_spec)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING
"""

_REGISTER = "INSERT INTO queues (name) VALUES (?) ON CONFLICT DO NOTHING"

_MARK_WAITED = """
INSERT INTO result_waiters (job_id, waiter, expires_at) VALUES (?, ?, ?)
ON CONFLICT (job_id, waiter) DO NOTHING
"""

_ROUTES = """
SELECT queue, version, partitions FROM queue_versions
WHERE state = 'active' AND queue IN (SELECT value FROM json_each(?))
"""

_FIND = "SELECT run_at, version, part FROM jobs WHERE id = ?"

_LOCK = "SELECT holder, mode, expires_at FROM unique_locks WHERE queue = ? AND key = ?"

_HOLDER = "SELECT id, state, run_at, version, part FROM jobs WHERE id = ?"

_REPLACE = "UPDATE jobs SET payload = ?, headers = ?, run_at = ?, state = ? WHERE id = ?"

_TAKE_KEY = """
INSERT INTO unique_locks (queue, key, holder, mode, expires_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (queue, key) DO UPDATE
    SET holder = excluded.holder, mode = excluded.mode, expires_at = excluded.expires_at
"""

#: One job's row for :data:`_INSERT`.
_Row = tuple[
    str,
    str,
    str,
    bytes,
    float,
    str,
    int,
    float,
    float,
    str,
    "str | None",
    str,
    int,
    int,
    int,
    "str | None",
    "str | None",
]


def enqueue(conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float) -> list[EnqueueResult]:
    """Store ``jobs`` in ``conn``'s write transaction (the rules are the
    module docstring's); one EnqueueResult per job, in order. Nothing is
    committed here: the caller commits or rolls back the whole batch.

    Raises ValueError for a unique job whose key is not resolved (before
    anything is written), sqlite3.Error for a database error (the caller
    rolls the transaction back)."""
    if not jobs:
        return []
    results = _enqueue(conn, jobs, now)
    marked = [
        (r.job_id, KEEP_OUTCOME_WAITER, math.inf)
        for new, r in zip(jobs, results, strict=True)
        if new.keep_outcome and r.created
    ]
    if marked:
        conn.executemany(_MARK_WAITED, marked)
    return results


def _enqueue(conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float) -> list[EnqueueResult]:
    """:func:`enqueue` but for the marks of jobs marked as waited on."""
    queues = list(dict.fromkeys(new.queue for new in jobs))
    routes = _routes(conn, queues)
    rows = [_row(new, now, routes) for new in jobs]
    conn.executemany(_REGISTER, [(q,) for q in queues])
    # the savepoint nests in the transaction the statement above is in
    if all(new.unique is None for new in jobs) and len({new.id for new in jobs}) == len(jobs):
        conn.execute("SAVEPOINT chronos_enqueue")
        stored = conn.executemany(_INSERT, rows).rowcount
        if stored == len(rows):
            conn.execute("RELEASE chronos_enqueue")
            return [
                EnqueueResult(row[0], True, row[4], topology_placement(row[13], row[14]))
                for row in rows
            ]
        conn.execute("ROLLBACK TO chronos_enqueue")
        conn.execute("RELEASE chronos_enqueue")
    return [_one(conn, new, row, now) for new, row in zip(jobs, rows, strict=True)]


def _routes(conn: sqlite3.Connection, queues: list[str]) -> dict[str, tuple[int, int]]:
    """The active (version, partitions) of each of ``queues`` promoted."""
    return {
        queue: (int(version), int(partitions))
        for queue, version, partitions in conn.execute(_ROUTES, (json.dumps(queues),))
    }


def _row(new: NewJob, now: float, routes: dict[str, tuple[int, int]]) -> _Row:
    """``new``'s row as a created job (state, control, placement decided)."""
    run_at = new.run_at if new.run_at is not None else now + max(0.0, new.delay)
    unique = new.unique
    control = new.control if unique is None else with_run_slot(new.control, unique)
    if control is None:
        control_text, priority = "", 0
    else:
        control_text, priority = control.stored(now).encode(), control.priority
    route = routes.get(new.queue)
    if route is None:
        version, part = 1, 0
    else:
        version, part = route[0], id_hash(new.id) % route[1]
    key = spec = None
    if unique is not None:
        if unique.key is None:
            raise ValueError(f"job {new.id!r}: a stored unique job's key must be resolved")
        key = unique.key
        spec = json.dumps({"mode": unique.mode, "ttl": unique.ttl})
    return (
        new.id,
        new.queue,
        new.kind,
        new.payload,
        run_at,
        "ready" if run_at <= now else "scheduled",
        new.max_retries,
        new.timeout,
        now,
        headers_text(new.headers) if new.headers else "",
        new.then,
        control_text,
        priority,
        version,
        part,
        key,
        spec,
    )


def _one(conn: sqlite3.Connection, new: NewJob, row: _Row, now: float) -> EnqueueResult:
    """Enqueue one job (the rules of the module docstring)."""
    found = conn.execute(_FIND, (new.id,)).fetchone()
    if found is not None:
        return EnqueueResult(new.id, False, float(found[0]), topology_placement(found[1], found[2]))
    unique = new.unique
    run_at = row[4]
    if unique is not None:
        assert unique.key is not None  # checked by _row
        lock = conn.execute(_LOCK, (new.queue, unique.key)).fetchone()
        if lock is not None and lock_live(lock[2], now):
            holder_id, lock_mode, lock_expires = lock
            holder = conn.execute(_HOLDER, (holder_id,)).fetchone()
            state = None if holder is None else JobState(holder[1])
            claim = judge_claim(unique.mode, lock_mode, lock_expires, state)
            if claim is Claim.REPLACE:
                conn.execute(_REPLACE, (row[3], row[9], run_at, row[5], holder[0]))
                return EnqueueResult(
                    holder[0], False, run_at, topology_placement(holder[3], holder[4])
                )
            if claim is Claim.DUPLICATE:
                if holder is None:
                    return EnqueueResult(holder_id, False, 0.0, topology_placement(1, 0))
                return EnqueueResult(
                    holder_id, False, float(holder[2]), topology_placement(holder[3], holder[4])
                )
    conn.execute(_INSERT, row)
    if unique is not None:
        lapses = lock_lapses(unique, now)
        conn.execute(_TAKE_KEY, (new.queue, unique.key, new.id, unique.mode, lapses))
    return EnqueueResult(new.id, True, run_at, topology_placement(row[13], row[14]))
