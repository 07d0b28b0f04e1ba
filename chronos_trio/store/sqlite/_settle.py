"""Settle on SQLite: one write transaction per batch, a handful of statements.

:func:`settle` reads the batch's rows with one SELECT (the file's write
lock is held from BEGIN, so they cannot change before the writes), decides
the transitions in Python (``store._settle_plan``, the PostgreSQL store's
rules: one per SettleKind, fenced by token and an unexpired lease, an abort
asked overriding a kind that would run the job again), then writes them:
the rows (executemany), finished jobs nothing keeps deleted, unique keys
given back (a throttle's success keeps its key its ttl more), concurrency
slots freed, rate limits held back, result waiters of finished jobs
forgotten. Waiters are woken by ``Database.write`` after the commit.

Result waiters: a finished job nothing keeps is deleted unless a live waiter
is registered (``result_waiters``), when it stays readable ``WAITED_KEEP``
seconds. Registration is a write too, so it is ordered with the settle: a
waiter registered before the settle is seen by it.

:func:`write_plan` writes any :class:`SettlePlan` (a recovery's too).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...records._jobs import FINISHED_STATES
from .._roles import NOTHING_SET_ASIDE, Settlement, SettleResult
from .._rows import JOB_COLUMNS
from .._settle_plan import SettlePlan, locked_from_row, plan_settle
from .._sql_flow_kept import insert_kept

#: The batch's rows, each with whether a live result waiter reads it.
_READ = f"""
SELECT {JOB_COLUMNS}, abort_reason, unique_key, unique_spec, attempt_history,
    EXISTS (SELECT 1 FROM result_waiters r WHERE r.job_id = jobs.id AND r.expires_at > ?)
FROM jobs WHERE id IN (SELECT value FROM json_each(?))
"""

_UPDATE = """
UPDATE jobs SET state = ?, run_at = ?, attempts = ?, last_error = ?, finished_at = ?,
    result = ?, result_until = ?, unclaimed_since = ?, retain_until = ?, retained = ?,
    discarded = ?, continuation = ?, attempt_history = coalesce(?, attempt_history),
    lease_token = '', lease_owner = '', lease_expires_at = NULL
WHERE id = ?
"""

_DELETE = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))"

_UNWAIT = "DELETE FROM result_waiters WHERE job_id IN (SELECT value FROM json_each(?))"

_UNIQUE_KEEP = """
UPDATE unique_locks SET expires_at = ?
WHERE queue = ? AND key = ? AND holder = ? AND mode = 'throttle'
"""

_UNIQUE_FREE = """
DELETE FROM unique_locks
WHERE queue = ? AND key = ? AND holder = ? AND NOT (? AND mode = 'throttle')
"""

_FREE_SLOTS = "DELETE FROM slots WHERE job_id IN (SELECT value FROM json_each(?))"

_HOLD_BACK = """
INSERT INTO rate_buckets (queue, key, tat) VALUES (?, ?, ?)
ON CONFLICT (queue, key) DO UPDATE SET tat = max(tat, excluded.tat)
"""


def settle(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> tuple[SettleResult, bool]:
    """The settle's result, and whether it filled the workflow outbox. Runs
    in the caller's write transaction; raises sqlite3.Error (the caller
    rolls back: nothing of the batch is stored)."""
    ids = json.dumps(sorted({s.lease.job_id for s in settlements}))
    locked = {}
    waited = set()
    for row in conn.execute(_READ, (now, ids)):
        entry = locked_from_row(row[:-1])
        locked[entry.job.id] = entry
        if row[-1]:
            waited.add(entry.job.id)
    if not locked:
        return SettleResult(
            (False,) * len(settlements), NOTHING_SET_ASIDE, frozenset(), frozenset()
        ), False
    result, plan = plan_settle(settlements, locked, now)
    write_plan(conn, plan, waited)
    return result, plan.outbox


def write_plan(conn: sqlite3.Connection, plan: SettlePlan, waited: set[str]) -> None:
    """Write ``plan`` in the caller's transaction. ``waited``: the IDs of
    its jobs a live result waiter reads (a row the plan drops unless waited
    is kept then, and a finished job's waiters are forgotten)."""
    updates = []
    dropped = []
    unwaited = []
    for r in plan.rows:
        job = r.job
        if r.drop_unwaited and job.id not in waited:
            dropped.append(job.id)
            continue
        if job.id in waited and job.state in FINISHED_STATES:
            unwaited.append(job.id)
        updates.append(
            (
                job.state.value,
                job.run_at,
                job.attempts,
                job.last_error,
                job.finished_at,
                job.result,
                job.result_until,
                job.unclaimed_since,
                r.retain_until,
                r.retained,
                r.discarded,
                r.continuation,
                r.history,
                job.id,
            )
        )
    if updates:
        conn.executemany(_UPDATE, updates)
    if dropped:
        conn.execute(_DELETE, (json.dumps(dropped),))
    if unwaited:
        conn.execute(_UNWAIT, (json.dumps(unwaited),))
    if plan.unique:
        kept = [
            (plan.now + u.ttl, u.queue, u.key, u.holder)
            for u in plan.unique
            if u.keeps_throttle and u.ttl is not None
        ]
        if kept:
            conn.executemany(_UNIQUE_KEEP, kept)
        conn.executemany(
            _UNIQUE_FREE, [(u.queue, u.key, u.holder, u.keeps_throttle) for u in plan.unique]
        )
    if plan.slots:
        conn.execute(_FREE_SLOTS, (json.dumps(plan.slots),))
    if plan.hold_back:
        conn.executemany(_HOLD_BACK, [(q, k, tat) for (q, k), tat in plan.hold_back.items()])
    if plan.kept:
        conn.executemany(insert_kept("?"), plan.kept)
