"""Renewal and recovery of leases on SQLite, each one write transaction
(the file's write lock held from BEGIN: what is read is what is written).

* :func:`renew`: one statement over the batch (its (id, token) pairs as
  one JSON text), fenced by token and an unexpired lease; a renewed job's
  unique lock that lapses is kept at least as long as the new lease; the
  leases an abort was asked for are reported.
* :func:`recover`: expired leases per queue, earliest expiry first, back to
  ready (due now), dead (retries used up) or aborted (an abort was asked),
  judged by ``store._settle_plan.plan_recovered`` (PostgreSQL's rules) and
  written by ``_settle.write_plan``: the concurrency slots of every
  recovered job and the unique keys of those that finished are given back,
  result waiters of those that finished are let go.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...records._jobs import Job, JobState, LeaseRef
from .._roles import NOTHING_SET_ASIDE, RecoverResult, RenewResult
from .._rows import JOB_COLUMNS
from .._settle_plan import SettlePlan, locked_from_row, plan_recovered
from ._settle import write_plan

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

#: A queue's expired leases, earliest expiry first, each with whether a live
#: result waiter reads it (``jobs_leased``: queue, lease_expires_at).
_EXPIRED = f"""
SELECT {JOB_COLUMNS}, abort_reason, unique_key, unique_spec, attempt_history,
    EXISTS (SELECT 1 FROM result_waiters r WHERE r.job_id = jobs.id AND r.expires_at > ?2)
FROM jobs
WHERE queue = ?1 AND state = 'leased' AND lease_expires_at <= ?2
ORDER BY lease_expires_at, id
LIMIT ?3
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
    plan = SettlePlan(now)
    waited: set[str] = set()
    ready: list[str] = []
    dead: list[Job] = []
    aborted: list[Job] = []
    taken = 0
    for queue in dict.fromkeys(queues):
        if taken >= limit:
            break
        for row in conn.execute(_EXPIRED, (queue, now, limit - taken)).fetchall():
            job = plan_recovered(plan, locked_from_row(row[:-1]))
            if row[-1]:
                waited.add(job.id)
            if job.state is JobState.ABORTED:
                aborted.append(job)
            elif job.state is JobState.DEAD:
                dead.append(job)
            else:
                ready.append(job.id)
            taken += 1
    if taken:
        write_plan(conn, plan, waited)
    return RecoverResult(tuple(ready), tuple(dead), NOTHING_SET_ASIDE, tuple(aborted))
