"""Claims (``WorkerRole.lease``) on PostgreSQL: one transaction per call.

A store without a promoter judges due times in its claim: a scheduled or
retry_wait job whose ``run_at`` has come is leased as a ready one is (and
reads show it as ready: :data:`SHOWN_STATE`). Per queue, in lease order
(priority, then due time, then ID: the ``jobs_claim`` index), one statement
locks the next due jobs (``FOR UPDATE SKIP LOCKED``, so concurrent claims
never take one job twice and never wait for each other), leases at once
those without flow control, and returns the others locked, for the
admission of ``_limits`` (rate and concurrency limits, expiry) in the same
transaction. A job held back stays as it was; the queue's next jobs
replace it, looking at no more than its share + 256, as the MemoryStore
does (the decisions are ``store._claim_plan``'s, shared with the SQLite
store). Paused queues are skipped; shares over queues are the MemoryStore's
(``share_by_weight`` / ``share_strictly`` over the due jobs counted when
the call began).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from typing import Any

import attrs
import psycopg

from ...records._jobs import Job, JobState, LeasedJob
from .._claim_plan import LOOK_BEYOND, ClaimBatch, judge_controlled, lease_order
from .._partitioning import share_by_weight, share_strictly
from .._roles import LeaseResult, QueueWeight
from .._rows import JOB_COLUMNS, job_from_row
from . import _limits
from ._wake import DONE

#: A job's state as reads show it at ``{now}`` on a store without a
#: promoter: a scheduled or retry_wait job that is due is ready.
SHOWN_STATE = (
    "CASE WHEN state IN ('scheduled', 'retry_wait') AND run_at <= {now} THEN 'ready' ELSE state END"
)

#: JOB_COLUMNS qualified with the alias ``j``.
J_COLUMNS = ", ".join("j." + c.strip() for c in JOB_COLUMNS.split(","))

#: States a claim takes a due job from.
DUE_STATES = "('ready', 'scheduled', 'retry_wait')"

_CLAIM = f"""
WITH t AS (SELECT coalesce(%(now)s::float8, chronos_now()) AS now),
picked AS MATERIALIZED (
    SELECT {J_COLUMNS} FROM jobs j, t
    WHERE j.queue = %(queue)s AND j.state IN {DUE_STATES} AND j.run_at <= t.now
      AND NOT (j.id = ANY (%(skip)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(n)s
    FOR UPDATE OF j SKIP LOCKED
),
numbered AS (SELECT p.id, p.control, row_number() OVER () AS n FROM picked p),
leased AS (
    UPDATE jobs j SET state = 'leased', attempts = j.attempts + 1,
        lease_token = %(prefix)s || numbered.n, lease_owner = %(worker)s,
        lease_expires_at = t.now + %(duration)s
    FROM numbered, t
    WHERE j.id = numbered.id AND numbered.control = ''
    RETURNING true AS leased, t.now AS now, {J_COLUMNS}
)
SELECT * FROM leased
UNION ALL
SELECT false, t.now, p.* FROM picked p, t WHERE p.control <> ''
"""

_COUNT = f"""
SELECT t.now, q.name, (
    SELECT count(*) FROM (
        SELECT 1 FROM jobs j
        WHERE j.queue = q.name AND j.state IN {DUE_STATES} AND j.run_at <= t.now
        LIMIT %(cap)s) AS due)
FROM unnest(%(queues)s::text[]) AS q (name), (SELECT chronos_now() AS now) AS t
WHERE NOT EXISTS (SELECT 1 FROM queues p WHERE p.name = q.name AND p.paused)
"""

_LEASE_ADMITTED = """
UPDATE jobs j SET state = 'leased', attempts = j.attempts + 1,
    lease_token = u.token, lease_owner = %(worker)s, lease_expires_at = %(expires)s
FROM unnest(%(ids)s::text[], %(tokens)s::text[]) AS u (id, token)
WHERE j.id = u.id
"""

_EXPIRE = """
WITH u AS (SELECT * FROM unnest(%(ids)s::text[], %(errors)s::text[]) AS u (id, error)),
dead AS (
    UPDATE jobs j SET state = 'dead', finished_at = %(now)s, last_error = u.error
    FROM u WHERE j.id = u.id
    RETURNING j.id, j.queue, j.unique_key
),
unlocked AS (
    DELETE FROM unique_locks l USING dead
    WHERE l.queue = dead.queue AND l.key = dead.unique_key AND l.holder = dead.id
),
waited AS (
    DELETE FROM result_waiters w USING dead WHERE w.job_id = dead.id RETURNING w.job_id
)
SELECT pg_notify(chronos_channel(), %(done)s || job_id)
FROM (SELECT DISTINCT job_id FROM waited) AS x
"""


class Claimer:
    """Makes each claim's fencing tokens unique among every lease the store
    ever issues: a random prefix per store, a counter per claim, the row's
    number in the claim."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._calls = itertools.count(1)

    def claim(
        self,
        conn: psycopg.Connection[Any],
        queues: Sequence[QueueWeight],
        count: int,
        worker_id: str,
        lease_duration: float,
        strict: bool,
    ) -> LeaseResult:
        """One lease call, in ``conn``'s transaction (see the module docstring)."""
        batch = ClaimBatch(worker_id, lease_duration, f"{self._prefix}-{next(self._calls):x}-")
        wanted = [q for q in queues if q.weight > 0]
        if count <= 0 or not wanted:
            return batch.result()
        if len(queues) == 1:
            shares = {wanted[0].name: count}
        else:
            rows = conn.execute(
                _COUNT, {"queues": [q.name for q in queues], "cap": count}
            ).fetchall()
            if not rows:
                return batch.result()
            batch.now = float(rows[0][0])
            available = {name: int(n) for _now, name, n in rows}
            active = [q for q in queues if q.name in available]
            shares = (share_strictly if strict else share_by_weight)(active, count, available)
        for queue, share in shares.items():
            _claim_queue(conn, queue, share, batch)
        return batch.result()


def _claim_queue(conn: psycopg.Connection[Any], queue: str, share: int, batch: ClaimBatch) -> None:
    """Lease up to ``share`` due jobs of ``queue`` into ``batch``."""
    looked = got = 0
    held: list[str] = []
    admission: _limits.Admission | None = None
    while got < share and looked < share + LOOK_BEYOND:
        n = min(share - got, share + LOOK_BEYOND - looked)
        prefix = batch.round_prefix()
        rows = conn.execute(
            _CLAIM,
            {
                "now": batch.now,
                "queue": queue,
                "skip": held,
                "n": n,
                "prefix": prefix,
                "worker": batch.worker_id,
                "duration": batch.duration,
            },
        ).fetchall()
        if not rows:
            return
        if batch.now is None:
            batch.now = float(rows[0][1])
        now = batch.now
        expires_at = now + batch.duration
        round_leased: list[tuple[tuple[int, float, str], LeasedJob]] = []
        controlled: list[Job] = []
        for row in rows:
            job = job_from_row(row[2:])
            if row[0]:
                round_leased.append(
                    (lease_order(job), LeasedJob(job, job.lease_token, expires_at, now))
                )
            else:
                controlled.append(job)
        got += len(round_leased)
        if controlled:
            if admission is None:
                admission = _limits.Admission(queue, now)
            admission.load(conn, (j.control for j in controlled if j.control is not None))
            numbers = itertools.count(len(rows) + 1)  # after the statement's own
            judged = judge_controlled(controlled, admission, batch, prefix, numbers)
            admission.save(conn)
            held += judged.held
            for job, token in judged.admitted:
                leased_job = attrs.evolve(
                    job,
                    state=JobState.LEASED,
                    attempts=job.attempts + 1,
                    lease_token=token,
                    lease_owner=batch.worker_id,
                    lease_expires_at=expires_at,
                )
                round_leased.append(
                    (lease_order(job), LeasedJob(leased_job, token, expires_at, now))
                )
            got += len(judged.admitted)
            if judged.admitted:
                conn.execute(
                    _LEASE_ADMITTED,
                    {
                        "worker": batch.worker_id,
                        "expires": expires_at,
                        "ids": [job.id for job, _ in judged.admitted],
                        "tokens": [token for _, token in judged.admitted],
                    },
                )
            if judged.expired:
                conn.execute(
                    _EXPIRE,
                    {
                        "ids": [j.id for j in judged.expired],
                        "errors": [j.last_error for j in judged.expired],
                        "now": now,
                        "done": DONE,
                    },
                )
                batch.expired.extend(judged.expired)
        round_leased.sort(key=lambda pair: pair[0])
        batch.leased.extend(leased for _, leased in round_leased)
        looked += len(rows)
        if len(rows) < n:
            return
