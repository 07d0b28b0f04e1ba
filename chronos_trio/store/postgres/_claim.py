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
does. Paused queues are skipped; shares over queues are the MemoryStore's
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

from ...records._control import expired_error
from ...records._jobs import Job, JobState, LeasedJob
from .._admission import Verdict
from .._partitioning import share_by_weight, share_strictly
from .._roles import NOTHING_SET_ASIDE, LeaseResult, QueueWeight
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

#: At most this many jobs beyond its share a queue looks at in one claim.
LOOK_BEYOND = 256


@attrs.define
class _Batch:
    worker_id: str
    duration: float
    #: This call's token prefix (unique per call of the store).
    base: str
    now: float | None = None
    leased: list[LeasedJob] = attrs.field(factory=list)
    expired: list[Job] = attrs.field(factory=list)
    held_until: float | None = None
    capped: bool = False
    rounds: itertools.count[int] = attrs.field(factory=itertools.count)

    def round_prefix(self) -> str:
        """The token prefix of one claim statement (its rows add their number)."""
        return f"{self.base}{next(self.rounds)}."

    def held_back(self, until: float | None) -> None:
        if until is None:
            self.capped = True
        elif self.held_until is None or until < self.held_until:
            self.held_until = until

    def result(self) -> LeaseResult:
        held_for = None
        if self.held_until is not None and self.now is not None:
            held_for = max(0.0, self.held_until - self.now)
        return LeaseResult(
            tuple(self.leased), NOTHING_SET_ASIDE, tuple(self.expired), held_for, self.capped
        )


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
        batch = _Batch(worker_id, lease_duration, f"{self._prefix}-{next(self._calls):x}-")
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


def _claim_queue(conn: psycopg.Connection[Any], queue: str, share: int, batch: _Batch) -> None:
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
                round_leased.append((_order(job), LeasedJob(job, job.lease_token, expires_at, now)))
            else:
                controlled.append(job)
        got += len(round_leased)
        if controlled:
            controlled.sort(key=_order)
            if admission is None:
                admission = _limits.Admission(queue, now)
            admission.load(conn, (j.control for j in controlled if j.control is not None))
            admitted: list[tuple[str, str]] = []
            numbers = itertools.count(len(rows) + 1)  # after the statement's own
            expired: list[Job] = []
            for job in controlled:
                control = job.control
                if control is None:  # a damaged control: judged as none
                    verdict, until = Verdict.LEASE, None
                else:
                    verdict, until = admission.judge(control)
                if verdict is Verdict.HELD:
                    held.append(job.id)
                    batch.held_back(until)
                elif verdict is Verdict.EXPIRED:
                    assert control is not None and control.expires_at is not None
                    expired.append(
                        attrs.evolve(
                            job,
                            state=JobState.DEAD,
                            finished_at=now,
                            last_error=expired_error(control.expires_at),
                        )
                    )
                else:
                    if control is not None:
                        admission.take(control, job.id)
                    token = f"{prefix}{next(numbers)}"
                    leased_job = attrs.evolve(
                        job,
                        state=JobState.LEASED,
                        attempts=job.attempts + 1,
                        lease_token=token,
                        lease_owner=batch.worker_id,
                        lease_expires_at=expires_at,
                    )
                    admitted.append((job.id, token))
                    round_leased.append(
                        (_order(job), LeasedJob(leased_job, token, expires_at, now))
                    )
                    got += 1
            admission.save(conn)
            if admitted:
                conn.execute(
                    _LEASE_ADMITTED,
                    {
                        "worker": batch.worker_id,
                        "expires": expires_at,
                        "ids": [i for i, _ in admitted],
                        "tokens": [t for _, t in admitted],
                    },
                )
            if expired:
                conn.execute(
                    _EXPIRE,
                    {
                        "ids": [j.id for j in expired],
                        "errors": [j.last_error for j in expired],
                        "now": now,
                        "done": DONE,
                    },
                )
                batch.expired.extend(expired)
        round_leased.sort(key=lambda pair: pair[0])
        batch.leased.extend(leased for _, leased in round_leased)
        looked += len(rows)
        if len(rows) < n:
            return


def _order(job: Job) -> tuple[int, float, str]:
    """Lease order: highest priority first, then due time, then ID."""
    return (-job.priority, job.run_at, job.id)
