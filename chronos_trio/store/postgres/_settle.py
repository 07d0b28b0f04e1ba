"""Renew, settle and recovery on PostgreSQL, each one transaction per batch.

* :func:`renew`: one statement over arrays (``unnest``), fenced by token and
  an unexpired lease; it keeps a unique lock that lapses at least as long
  as the lease, and reports the leases an abort was asked for.
* :func:`settle`: one statement locks the batch's rows (``FOR UPDATE``) and
  reads them; the transitions of the MemoryStore (one per SettleKind) are
  decided in Python (``store._settle_plan``, shared with the SQLite store),
  fenced by token and an unexpired lease; then one pipeline
  writes them all: the rows (finished jobs nothing keeps deleted), unique
  locks, concurrency slots (their queues woken), rate limits held back, the
  workflow outbox, result waiters (woken), and a wake-up of each queue that
  got a job back to ready or retry_wait (waiters there judge due times).
* :func:`recover`: expired leases per queue, earliest expiry first
  (``FOR UPDATE SKIP LOCKED``), back to ready, dead or aborted.

Result waiters: a finished job nothing keeps is deleted unless a live
waiter is registered (``result_waiters``), when it stays readable
``WAITED_KEEP`` seconds, as on the MemoryStore. The settle decides that in
a statement that runs after its rows are locked, and a waiter registers
under a share lock of the row, so the settle sees every waiter that read
the job before it finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...records._jobs import Job, JobState, LeaseRef
from .._roles import (
    NOTHING_SET_ASIDE,
    RecoverResult,
    RenewResult,
    Settlement,
    SettleResult,
)
from .._settle_plan import Locked, SettlePlan, locked_from_row, plan_recovered, plan_settle
from .._sql_flow_kept import insert_kept
from ._claim import J_COLUMNS
from ._wake import DONE, OUTBOX, READY

_RENEW = """
WITH refs AS (SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) AS r (id, token)),
t AS (SELECT chronos_now() AS now),
renewed AS (
    UPDATE jobs j SET lease_expires_at = t.now + %(duration)s
    FROM refs, t
    WHERE j.id = refs.id AND j.state = 'leased' AND j.lease_token = refs.token
      AND refs.token <> '' AND j.lease_expires_at > t.now
    RETURNING j.id, j.lease_token, j.abort_reason <> '' AS aborted, j.queue, j.unique_key,
              j.lease_expires_at
),
locks AS (
    UPDATE unique_locks l SET expires_at = greatest(l.expires_at, r.lease_expires_at)
    FROM renewed r
    WHERE r.unique_key IS NOT NULL AND l.queue = r.queue AND l.key = r.unique_key
      AND l.holder = r.id AND l.expires_at IS NOT NULL
)
SELECT id, lease_token, aborted FROM renewed
"""

_LOCK = f"""
SELECT (SELECT chronos_now()), {J_COLUMNS}, j.abort_reason, j.unique_key, j.unique_spec,
    j.attempt_history
FROM jobs j WHERE j.id = ANY (%s::text[])
FOR UPDATE
"""

_LOCK_EXPIRED = f"""
SELECT (SELECT chronos_now()), {J_COLUMNS}, j.abort_reason, j.unique_key, j.unique_spec,
    j.attempt_history
FROM jobs j
WHERE j.queue = %(queue)s AND j.state = 'leased' AND j.lease_expires_at <= %(now)s
ORDER BY j.lease_expires_at, j.id
LIMIT %(n)s
FOR UPDATE SKIP LOCKED
"""

_APPLY = """
WITH w AS (
    SELECT * FROM unnest(
        %(ids)s::text[], %(states)s::text[], %(run_ats)s::float8[], %(attempts)s::integer[],
        %(errors)s::text[], %(finished)s::float8[], %(results)s::bytea[],
        %(result_until)s::float8[], %(unclaimed)s::float8[], %(retain)s::float8[],
        %(retained)s::boolean[], %(discarded)s::boolean[], %(continuation)s::boolean[],
        %(drop)s::boolean[], %(history)s::text[])
    AS w (id, state, run_at, attempts, last_error, finished_at, result, result_until,
          unclaimed_since, retain_until, retained, discarded, continuation, drop_unwaited,
          attempt_history)
),
waited AS (
    SELECT DISTINCT r.job_id FROM result_waiters r JOIN w ON r.job_id = w.id
    WHERE r.expires_at > %(now)s
),
updated AS (
    UPDATE jobs j SET state = w.state, run_at = w.run_at, attempts = w.attempts,
        last_error = w.last_error, finished_at = w.finished_at, result = w.result,
        result_until = w.result_until, unclaimed_since = w.unclaimed_since,
        retain_until = w.retain_until, retained = w.retained, discarded = w.discarded,
        continuation = w.continuation,
        attempt_history = coalesce(w.attempt_history, j.attempt_history),
        lease_token = '', lease_owner = '', lease_expires_at = NULL
    FROM w
    WHERE j.id = w.id AND (NOT w.drop_unwaited OR w.id IN (SELECT job_id FROM waited))
    RETURNING j.id, j.state
),
dropped AS (
    DELETE FROM jobs j USING w
    WHERE j.id = w.id AND w.drop_unwaited AND w.id NOT IN (SELECT job_id FROM waited)
),
finished AS (
    SELECT u.id FROM updated u JOIN waited ON waited.job_id = u.id
    WHERE u.state IN ('succeeded', 'dead', 'aborted')
),
unwaited AS (
    DELETE FROM result_waiters r USING finished f WHERE r.job_id = f.id
)
SELECT pg_notify(chronos_channel(), %(done)s || id) FROM finished
"""

_UNIQUE = """
WITH u AS (
    SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[], %(holders)s::text[],
                         %(ttls)s::float8[], %(succeeded)s::boolean[])
    AS u (queue, key, holder, ttl, succeeded)
),
throttled AS (
    UPDATE unique_locks l SET expires_at = %(now)s + u.ttl
    FROM u
    WHERE l.queue = u.queue AND l.key = u.key AND l.holder = u.holder
      AND u.succeeded AND l.mode = 'throttle' AND u.ttl IS NOT NULL
)
DELETE FROM unique_locks l USING u
WHERE l.queue = u.queue AND l.key = u.key AND l.holder = u.holder
  AND NOT (u.succeeded AND l.mode = 'throttle' AND u.ttl IS NOT NULL)
"""

_FREE_SLOTS = """
WITH freed AS (DELETE FROM slots s WHERE s.job_id = ANY (%(ids)s::text[]) RETURNING s.queue)
SELECT pg_notify(chronos_channel(), %(ready)s || queue) FROM (SELECT DISTINCT queue FROM freed) AS q
"""

_HOLD_BACK = """
INSERT INTO rate_buckets AS b (queue, key, tat)
SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[], %(tats)s::float8[])
ON CONFLICT (queue, key) DO UPDATE SET tat = greatest(b.tat, EXCLUDED.tat)
"""

_NOTIFY = """
SELECT pg_notify(chronos_channel(), p) FROM unnest(%s::text[]) AS p
"""


def _locked(row: Sequence[Any]) -> Locked:
    return locked_from_row(row[1:])


def _write(conn: psycopg.Connection[Any], plan: SettlePlan) -> None:
    """Everything ``plan`` says, in one pipeline (one round trip)."""
    rows = plan.rows
    with conn.pipeline():
        if rows:
            conn.execute(
                _APPLY,
                {
                    "ids": [r.job.id for r in rows],
                    "states": [r.job.state.value for r in rows],
                    "run_ats": [r.job.run_at for r in rows],
                    "attempts": [r.job.attempts for r in rows],
                    "errors": [r.job.last_error for r in rows],
                    "finished": [r.job.finished_at for r in rows],
                    "results": [r.job.result for r in rows],
                    "result_until": [r.job.result_until for r in rows],
                    "unclaimed": [r.job.unclaimed_since for r in rows],
                    "retain": [r.retain_until for r in rows],
                    "retained": [r.retained for r in rows],
                    "discarded": [r.discarded for r in rows],
                    "continuation": [r.continuation for r in rows],
                    "drop": [r.drop_unwaited for r in rows],
                    "history": [r.history for r in rows],
                    "now": plan.now,
                    "done": DONE,
                },
            )
        if plan.unique:
            u = plan.unique
            conn.execute(
                _UNIQUE,
                {
                    "queues": [x.queue for x in u],
                    "keys": [x.key for x in u],
                    "holders": [x.holder for x in u],
                    "ttls": [x.ttl for x in u],
                    "succeeded": [x.succeeded for x in u],
                    "now": plan.now,
                },
            )
        if plan.slots:
            conn.execute(_FREE_SLOTS, {"ids": plan.slots, "ready": READY})
        if plan.hold_back:
            conn.execute(
                _HOLD_BACK,
                {
                    "queues": [q for q, _ in plan.hold_back],
                    "keys": [k for _, k in plan.hold_back],
                    "tats": list(plan.hold_back.values()),
                },
            )
        if plan.kept:
            with conn.cursor() as cur:
                cur.executemany(insert_kept("%s"), plan.kept)
        payloads = sorted(READY + q for q in plan.wake)
        if plan.outbox:
            payloads.append(OUTBOX)
        if payloads:
            conn.execute(_NOTIFY, (payloads,))


# -- renew ----------------------------------------------------------------------------
def renew(
    conn: psycopg.Connection[Any], leases: Sequence[LeaseRef], lease_duration: float
) -> RenewResult:
    pairs = list(dict.fromkeys((ref.job_id, ref.token) for ref in leases))
    rows = conn.execute(
        _RENEW,
        {
            "ids": [i for i, _ in pairs],
            "tokens": [t for _, t in pairs],
            "duration": lease_duration,
        },
    ).fetchall()
    renewed = {(job_id, token): bool(aborted) for job_id, token, aborted in rows}
    results = []
    flagged = []
    for i, ref in enumerate(leases):
        aborted = renewed.get((ref.job_id, ref.token))
        results.append(aborted is not None)
        if aborted:
            flagged.append(i)
    return RenewResult(tuple(results), NOTHING_SET_ASIDE, frozenset(flagged))


# -- settle ---------------------------------------------------------------------------
def settle(
    conn: psycopg.Connection[Any], settlements: Sequence[Settlement]
) -> tuple[SettleResult, bool]:
    """The settle's result, and whether it filled the workflow outbox."""
    ids = sorted({s.lease.job_id for s in settlements})
    rows = conn.execute(_LOCK, (ids,)).fetchall()
    if not rows:
        return SettleResult(
            (False,) * len(settlements), NOTHING_SET_ASIDE, frozenset(), frozenset()
        ), False
    now = float(rows[0][0])
    result, plan = plan_settle(settlements, {row[1]: _locked(row) for row in rows}, now)
    _write(conn, plan)
    return result, plan.outbox


# -- recovery -------------------------------------------------------------------------
def recover(conn: psycopg.Connection[Any], queues: Sequence[str], limit: int) -> RecoverResult:
    """leased --lease expired--> ready (due now), dead (retries exhausted)
    or aborted (an abort was asked), at most ``limit`` jobs."""
    now_row = conn.execute("SELECT chronos_now()").fetchone()
    assert now_row is not None
    now = float(now_row[0])
    plan = SettlePlan(now)
    ready: list[str] = []
    dead: list[Job] = []
    aborted: list[Job] = []
    taken = 0
    for queue in dict.fromkeys(queues):
        if taken >= limit:
            break
        rows = conn.execute(
            _LOCK_EXPIRED, {"queue": queue, "now": now, "n": limit - taken}
        ).fetchall()
        for row in rows:
            job = plan_recovered(plan, _locked(row))
            if job.state is JobState.ABORTED:
                aborted.append(job)
            elif job.state is JobState.DEAD:
                dead.append(job)
            else:
                ready.append(job.id)
            taken += 1
    if taken:
        _write(conn, plan)
    return RecoverResult(tuple(ready), tuple(dead), NOTHING_SET_ASIDE, tuple(aborted))
