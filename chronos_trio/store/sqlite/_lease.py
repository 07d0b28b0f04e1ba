"""Renewal and recovery of leases on SQLite, each one write transaction
(the file's write lock held from BEGIN: what is read is what is written).

* :func:`renew`: one statement over the batch (its (id, token) pairs as
  one JSON text), fenced by token and an unexpired lease; a renewed job's
  unique lock that lapses is kept at least as long as the new lease; the
  leases an abort was asked for are reported.
* :func:`recover`: expired leases per queue, earliest expiry first, back to
  ready (due now), dead (retries used up) or aborted (an abort was asked),
  as PostgreSQL's recovery does: the concurrency slots of every recovered
  job and the unique keys of those that finished are given back, result
  waiters of those that finished are let go.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from ...records._jobs import Job, JobState, LeaseRef
from .._roles import NOTHING_SET_ASIDE, RecoverResult, RenewResult
from .._rows import JOB_COLUMNS, job_from_row

_RENEW = """
UPDATE jobs SET lease_expires_at = ?1
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?3)) AS r
WHERE jobs.id = r.id AND jobs.state = 'leased' AND jobs.lease_token = r.token
  AND r.token <> '' AND jobs.lease_expires_at > ?2
RETURNING jobs.id, jobs.lease_token, jobs.abort_reason <> '', jobs.queue, jobs.unique_key
"""

_KEEP_LOCK = """
UPDATE unique_locks SET expires_at = max(expires_at, ?)
WHERE queue = ? AND key = ? AND holder = ? AND expires_at IS NOT NULL
"""

_EXPIRED = f"""
SELECT {JOB_COLUMNS}, abort_reason, unique_key FROM jobs
WHERE queue = ? AND state = 'leased' AND lease_expires_at <= ?
ORDER BY lease_expires_at, id
LIMIT ?
"""

_APPLY = """
UPDATE jobs SET state = ?, run_at = ?, finished_at = ?, last_error = ?, unclaimed_since = ?,
    lease_token = '', lease_owner = '', lease_expires_at = NULL
WHERE id = ?
"""

_UNLOCK = "DELETE FROM unique_locks WHERE queue = ? AND key = ? AND holder = ?"

_FREE_SLOTS = "DELETE FROM slots WHERE job_id = ?"

_LET_WAITERS_GO = """
DELETE FROM result_waiters
WHERE job_id = ?1 AND EXISTS (
    SELECT 1 FROM result_waiters w WHERE w.job_id = ?1 AND w.expires_at > ?2)
"""


def renew(
    conn: sqlite3.Connection, leases: Sequence[LeaseRef], lease_duration: float, now: float
) -> RenewResult:
    """Extend each lease of ``leases`` still held (its token, unexpired at
    ``now``) to ``now + lease_duration``, in ``conn``'s write transaction.
    One bool per lease, in order; ``aborted``: the renewed ones whose job an
    abort was asked for. Raises sqlite3.Error for a database error."""
    pairs = list(dict.fromkeys((ref.job_id, ref.token) for ref in leases))
    expires_at = now + lease_duration
    rows = conn.execute(_RENEW, (expires_at, now, json.dumps(pairs))).fetchall()
    renewed: dict[tuple[str, str], bool] = {}
    locks = []
    for job_id, token, aborted, queue, unique_key in rows:
        renewed[(job_id, token)] = bool(aborted)
        if unique_key is not None:
            locks.append((expires_at, queue, unique_key, job_id))
    if locks:
        conn.executemany(_KEEP_LOCK, locks)
    results = []
    flagged = []
    for i, ref in enumerate(leases):
        aborted = renewed.get((ref.job_id, ref.token))
        results.append(aborted is not None)
        if aborted:
            flagged.append(i)
    return RenewResult(tuple(results), NOTHING_SET_ASIDE, frozenset(flagged))


def recover(
    conn: sqlite3.Connection, queues: Sequence[str], limit: int, now: float
) -> RecoverResult:
    """leased --lease expired--> ready (due now), dead (retries exhausted)
    or aborted (an abort was asked), at most ``limit`` jobs of ``queues``,
    in ``conn``'s write transaction at ``now``. Raises sqlite3.Error for a
    database error."""
    ready: list[str] = []
    dead: list[Job] = []
    aborted: list[Job] = []
    applied: list[tuple[Any, ...]] = []
    unlocked: list[tuple[str, str, str]] = []
    finished: list[str] = []
    for queue in dict.fromkeys(queues):
        if len(applied) >= limit:
            break
        rows = conn.execute(_EXPIRED, (queue, now, limit - len(applied))).fetchall()
        for row in rows:
            abort, unique_key = row[-2:]
            job = attrs.evolve(
                job_from_row(row[:-2]), lease_token="", lease_owner="", lease_expires_at=None
            )
            if abort:
                job = attrs.evolve(job, state=JobState.ABORTED, finished_at=now, last_error=abort)
                aborted.append(job)
            elif job.attempts > job.max_retries:
                reason = (
                    f"lease expired on attempt {job.attempts} of "
                    f"{job.max_retries + 1} (worker lost); retries exhausted"
                )
                job = attrs.evolve(job, state=JobState.DEAD, finished_at=now, last_error=reason)
                dead.append(job)
            else:
                job = attrs.evolve(job, state=JobState.READY, run_at=now, unclaimed_since=None)
                ready.append(job.id)
            if job.state is not JobState.READY:
                finished.append(job.id)
                if unique_key is not None:
                    unlocked.append((job.queue, unique_key, job.id))
            applied.append(
                (
                    job.state.value,
                    job.run_at,
                    job.finished_at,
                    job.last_error,
                    job.unclaimed_since,
                    job.id,
                )
            )
    if applied:
        conn.executemany(_APPLY, applied)
        conn.executemany(_FREE_SLOTS, [(row[-1],) for row in applied])
        if unlocked:
            conn.executemany(_UNLOCK, unlocked)
        if finished:
            conn.executemany(_LET_WAITERS_GO, [(job_id, now) for job_id in finished])
    return RecoverResult(tuple(ready), tuple(dead), NOTHING_SET_ASIDE, tuple(aborted))
