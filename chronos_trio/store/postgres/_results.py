"""Results, waiting and workflows on PostgreSQL: the statements of
``ResultRole`` and ``FlowRole`` and of the idle wait (``wait_ready``).

Each function runs inside one operation's transaction (``Database.run``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...records._jobs import JobOutcome, JobRef, JobState
from ...records._workflow import FAILED_OUTCOME, Arrival
from .._roles import Continuation, GroupStatus
from .._rows import PLACEMENT, job_from_row, shown
from .._settle_plan import outbox_entry
from .._sql_flow_kept import finish_kept, kept_entries
from ._claim import DUE_STATES, J_COLUMNS

_OUTCOME = f"""
SELECT (SELECT chronos_now()), {J_COLUMNS} FROM jobs j
WHERE j.id = %(id)s AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
"""

_PROBE = f"""
WITH t AS (SELECT chronos_now() AS now),
qs AS (SELECT DISTINCT name FROM unnest(%(queues)s::text[]) AS q (name))
SELECT t.now,
    EXISTS (
        SELECT 1 FROM qs, LATERAL (
            SELECT 1 FROM jobs j
            WHERE j.queue = qs.name AND j.state IN {DUE_STATES} AND j.run_at <= t.now
            LIMIT 1) AS due
        WHERE NOT EXISTS (SELECT 1 FROM queues p WHERE p.name = qs.name AND p.paused)),
    (SELECT min(next.run_at) FROM qs, LATERAL (
            SELECT j.run_at FROM jobs j
            WHERE j.queue = qs.name AND j.state IN ('scheduled', 'retry_wait')
              AND j.run_at > t.now
            ORDER BY j.run_at LIMIT 1) AS next)
FROM t
"""

_REGISTER = """
WITH t AS (SELECT chronos_now() AS now),
job AS (
    SELECT j.id, j.state FROM jobs j
    WHERE j.id = %(id)s AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
    FOR SHARE OF j
),
registered AS (
    INSERT INTO result_waiters (job_id, waiter, expires_at)
    SELECT job.id, %(waiter)s, t.now + %(ttl)s FROM job, t
    WHERE job.state IN ('scheduled', 'ready', 'leased', 'retry_wait')
    ON CONFLICT (job_id, waiter) DO UPDATE SET expires_at = EXCLUDED.expires_at
),
lapsed AS (
    DELETE FROM result_waiters r WHERE r.ctid IN (
        SELECT r2.ctid FROM result_waiters r2, t WHERE r2.expires_at < t.now - 60 LIMIT 100)
)
SELECT state FROM job
"""

_UNREGISTER = "DELETE FROM result_waiters WHERE job_id = %s AND waiter = %s"

_CONTINUATIONS = (
    """
(SELECT j.id, j.queue, j.then_step, j.result, j.version, j.part,
    j.state, j.last_error, j.attempts, j.kind, 0
FROM jobs j
WHERE j.continuation AND j.queue = ANY (%(queues)s::text[])
ORDER BY j.finished_at, j.id
LIMIT %(limit)s)
UNION ALL
("""
    + kept_entries("= ANY (%(queues)s::text[])", "%(limit)s")
    + ")"
)

_FINISH_CONTINUATIONS = """
UPDATE jobs SET continuation = false WHERE id = ANY (%s::text[]) AND continuation
"""

_GROUP_ARRIVE = """
SELECT ord, complete, results FROM chronos_group_arrive(
    %s::text[], %s::integer[], %s::integer[], %s::bytea[], %s::float8)
ORDER BY ord
"""


def outcome(conn: psycopg.Connection[Any], ref: JobRef) -> JobOutcome | None:
    row = conn.execute(_OUTCOME, {"id": ref.job_id, "queue": ref.queue}).fetchone()
    if row is None:
        return None
    now = float(row[0])
    return JobOutcome.of(shown(job_from_row(row[1:]), now), now)


def register_waiter(
    conn: psycopg.Connection[Any], ref: JobRef, waiter: str, ttl: float
) -> JobState | None:
    """Register ``waiter`` for the job of ``ref`` while it is pending; the
    job's state (None: no such job). The job's row is share-locked, so a
    settle that finishes it either saw this waiter or ended first."""
    row = conn.execute(
        _REGISTER, {"id": ref.job_id, "queue": ref.queue, "waiter": waiter, "ttl": ttl}
    ).fetchone()
    return None if row is None else JobState(row[0])


def unregister_waiter(conn: psycopg.Connection[Any], job_id: str, waiter: str) -> None:
    conn.execute(_UNREGISTER, (job_id, waiter))


def probe(conn: psycopg.Connection[Any], queues: Sequence[str]) -> tuple[float, bool, float | None]:
    """The store's now; whether a queue of ``queues`` that is not paused
    has a due job; the earliest due time still to come (None: none)."""
    row = conn.execute(_PROBE, {"queues": list(queues)}).fetchone()
    assert row is not None
    now, ready, next_due = row
    return float(now), bool(ready), None if next_due is None else float(next_due)


def continuations(
    conn: psycopg.Connection[Any], queues: Sequence[str], limit: int
) -> list[Continuation]:
    if limit <= 0 or not queues:
        return []
    rows = conn.execute(_CONTINUATIONS, {"queues": list(queues), "limit": limit}).fetchall()
    return [
        outbox_entry(job_id, queue, PLACEMENT, then, result, *failure)
        for job_id, queue, then, result, _version, _part, *failure in rows
    ][:limit]


def finish_continuations(conn: psycopg.Connection[Any], done: Sequence[Continuation]) -> None:
    """Take ``done`` out of the outbox (the jobs stay, retained; the kept
    entries of deleted jobs go)."""
    if done:
        conn.execute(_FINISH_CONTINUATIONS, (sorted({c.job_id for c in done}),))
        kept = finish_kept(done)
        if kept:
            conn.execute("DELETE FROM flow_kept WHERE id = ANY (%s::text[])", (kept,))


def group_arrive(
    conn: psycopg.Connection[Any], arrivals: Sequence[Arrival], ttl: float
) -> list[list[bytes | None] | None]:
    if not arrivals:
        return []
    rows = conn.execute(
        _GROUP_ARRIVE,
        (
            [a.group_id for a in arrivals],
            [a.index for a in arrivals],
            [a.size for a in arrivals],
            [a.result for a in arrivals],
            ttl,
        ),
    ).fetchall()
    out: list[list[bytes | None] | None] = []
    for _ord, complete, results in rows:
        if complete:
            out.append([None if r is None else bytes(r) for r in results])
        else:
            out.append(None)
    return out


_GROUP_STATUS = f"""
SELECT m.idx, substr(m.result, 1, {len(FAILED_OUTCOME)}) FROM flow_group_members m
JOIN flow_groups g ON g.id = m.group_id
WHERE g.id = %s AND g.expires_at > chronos_now()
"""


def group_status(conn: psycopg.Connection[Any], group_ids: Sequence[str]) -> list[GroupStatus]:
    """Per group, its members arrived and the failed ones' indexes (a group
    past its expiry has none): one read per group, in the caller's
    transaction."""
    out: list[GroupStatus] = []
    for group_id in group_ids:
        rows = conn.execute(_GROUP_STATUS, (group_id,)).fetchall()
        failed = sorted(
            idx for idx, head in rows if head is not None and bytes(head) == FAILED_OUTCOME
        )
        out.append(GroupStatus(len(rows), tuple(failed)))
    return out
