"""Claims (``WorkerRole.lease``) on SQLite: one write transaction per call.

The store runs no promoter: a claim judges due times itself, so a scheduled
or retry_wait job whose ``run_at`` has come is leased as a ready one is.
The transaction holds the file's write lock from BEGIN, so no other claim,
of this process or another, runs meanwhile: a job is never leased twice and
nothing needs to lock rows.

Per queue, in lease order (priority, then due time, then ID: the
``jobs_claim`` index), the next due jobs are read one priority level at a
time, each level a range of the index that its first job not yet due ends
(so a claim never walks the jobs scheduled for later); those without flow
control are leased at once (one statement), the others judged by ``_limits``
(rate and concurrency limits, expiry) in the same transaction. A job held
back stays as it was; the queue's next jobs replace it, looking at no more
than its share + ``LOOK_BEYOND``, as the MemoryStore does (the decisions
are ``store._claim_plan``'s, shared with the PostgreSQL store). A job whose
expiry has passed is dead-lettered (``expired``). Paused queues are skipped;
shares over queues are the MemoryStore's (``share_by_weight`` /
``share_strictly`` over the due jobs counted when the call began).
"""

from __future__ import annotations

import itertools
import json
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from ...records._jobs import Job, LeasedJob
from .._claim_plan import LOOK_BEYOND, ClaimBatch, judge_controlled, lease_order
from .._partitioning import share_by_weight, share_strictly
from .._roles import LeaseResult, QueueWeight
from .._rows import JOB_COLUMNS, job_from_row
from . import _limits, _states

#: States a claim takes a due job from (the ``jobs_claim`` index's filter).
DUE_STATES = _states.DUE

_PAUSED = "SELECT paused FROM queues WHERE name = ?"

# A queue's due jobs are read one priority level at a time, each level a
# range of the jobs_claim index (queue, priority, run_at <= now): a level's
# scheduled jobs not yet due end its range, so a claim never walks them.
_TOP = f"""
SELECT priority FROM jobs WHERE queue = ? AND {DUE_STATES}
ORDER BY priority DESC LIMIT 1
"""

_BELOW = f"""
SELECT priority FROM jobs WHERE queue = ? AND {DUE_STATES} AND priority < ?
ORDER BY priority DESC LIMIT 1
"""

_PICK = f"""
SELECT {JOB_COLUMNS} FROM jobs
WHERE queue = ? AND priority = ? AND {DUE_STATES} AND run_at <= ?
  AND id NOT IN (SELECT value FROM json_each(?))
ORDER BY run_at, id
LIMIT ?
"""

_COUNT = f"""
SELECT count(*) FROM (
    SELECT 1 FROM jobs
    WHERE queue = ? AND priority = ? AND {DUE_STATES} AND run_at <= ? LIMIT ?)
"""

_ANY = f"""
SELECT 1 FROM jobs WHERE queue = ? AND priority = ? AND {DUE_STATES} AND run_at <= ?
LIMIT 1
"""

# One statement for a round's leases: its (id, token) pairs as one JSON text
# (half the time of an executemany of one UPDATE per job, measured).
_LEASE = """
UPDATE jobs SET state = 'leased', attempts = attempts + 1,
    lease_token = u.value ->> 1, lease_owner = ?, lease_expires_at = ?
FROM json_each(?) AS u
WHERE jobs.id = u.value ->> 0
"""

_EXPIRE = "UPDATE jobs SET state = 'dead', finished_at = ?, last_error = ? WHERE id = ?"

_EXPIRE_UNLOCK = """
DELETE FROM unique_locks
WHERE holder = ?1 AND (queue, key) IN (SELECT queue, unique_key FROM jobs WHERE id = ?1)
"""

_EXPIRE_WAITERS = "DELETE FROM result_waiters WHERE job_id = ?"

# JOB_COLUMNS positions the claim reads (control) or rewrites (the others)
_STATE, _ATTEMPTS, _TOKEN, _EXPIRES, _CONTROL = 5, 6, 9, 11, 19


class Claimer:
    """Makes each claim's fencing tokens unique among every lease the store
    ever issues: a random prefix per store, a counter per claim, a round
    per queue, the job's number in its round."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._calls = itertools.count(1)

    def claim(
        self,
        conn: sqlite3.Connection,
        queues: Sequence[QueueWeight],
        count: int,
        worker_id: str,
        lease_duration: float,
        strict: bool,
        now: float,
    ) -> LeaseResult:
        """One lease call at ``now``, in ``conn``'s write transaction (see
        the module docstring). Raises sqlite3.Error for a database error
        (the caller rolls back: nothing was leased)."""
        batch = ClaimBatch(worker_id, lease_duration, f"{self._prefix}-{next(self._calls):x}-", now)
        wanted = [q for q in queues if q.weight > 0]
        if count <= 0 or not wanted:
            return batch.result()
        if len(queues) == 1:
            if _paused(conn, wanted[0].name):
                return batch.result()
            shares = {wanted[0].name: count}
        else:
            available: dict[str, int] = {}
            for name in dict.fromkeys(q.name for q in queues):
                if not _paused(conn, name):
                    available[name] = count_due(conn, name, now, count)
            active = [q for q in queues if q.name in available]
            shares = (share_strictly if strict else share_by_weight)(active, count, available)
        for queue, share in shares.items():
            _claim_queue(conn, queue, share, batch)
        return batch.result()


def _levels(conn: sqlite3.Connection, queue: str) -> Iterator[int]:
    """The priorities of ``queue``'s jobs in due states, highest first (one
    index seek each, read as they are asked for)."""
    row = conn.execute(_TOP, (queue,)).fetchone()
    while row is not None:
        yield int(row[0])
        row = conn.execute(_BELOW, (queue, row[0])).fetchone()


def _due(
    conn: sqlite3.Connection, queue: str, now: float, n: int, skip: str
) -> list[tuple[Any, ...]]:
    """The first ``n`` due jobs of ``queue`` in lease order (JOB_COLUMNS
    rows), but those of ``skip`` (a JSON array of IDs)."""
    rows: list[tuple[Any, ...]] = []
    for priority in _levels(conn, queue):
        rows += conn.execute(_PICK, (queue, priority, now, skip, n - len(rows))).fetchall()
        if len(rows) >= n:
            break
    return rows


def count_due(conn: sqlite3.Connection, queue: str, now: float, cap: int) -> int:
    """How many jobs of ``queue`` are due at ``now`` (ready, or scheduled or
    retry_wait with ``run_at <= now``), counting no further than ``cap``;
    whether the queue is paused is not asked."""
    found = 0
    for priority in _levels(conn, queue):
        found += int(conn.execute(_COUNT, (queue, priority, now, cap - found)).fetchone()[0])
        if found >= cap:
            break
    return found


def has_due(conn: sqlite3.Connection, queue: str, now: float) -> bool:
    """Whether ``queue`` has a job due at ``now`` (paused or not): a few
    index seeks, however many jobs it has scheduled for later."""
    return any(
        conn.execute(_ANY, (queue, priority, now)).fetchone() is not None
        for priority in _levels(conn, queue)
    )


def _paused(conn: sqlite3.Connection, queue: str) -> bool:
    row = conn.execute(_PAUSED, (queue,)).fetchone()
    return row is not None and bool(row[0])


def _claim_queue(conn: sqlite3.Connection, queue: str, share: int, batch: ClaimBatch) -> None:
    """Lease up to ``share`` due jobs of ``queue`` into ``batch``."""
    now = batch.now
    assert now is not None
    expires_at = now + batch.duration
    worker = batch.worker_id
    looked = got = 0
    held: list[str] = []
    admission: _limits.Admission | None = None
    while got < share and looked < share + LOOK_BEYOND:
        n = min(share - got, share + LOOK_BEYOND - looked)
        prefix = batch.round_prefix()
        rows = _due(conn, queue, now, n, json.dumps(held))
        if not rows:
            return
        numbers = itertools.count(1)
        leasing: list[tuple[str, str]] = []
        round_leased: list[tuple[tuple[int, float, str], LeasedJob]] = []
        controlled: dict[str, tuple[Job, tuple[Any, ...]]] = {}
        for row in rows:
            if row[_CONTROL]:  # judged below
                controlled[row[0]] = (job_from_row(row), row)
                continue
            token = f"{prefix}{next(numbers)}"
            leasing.append((row[0], token))
            job = job_from_row(_leased_row(row, token, worker, expires_at))
            round_leased.append(((0, job.run_at, job.id), LeasedJob(job, token, expires_at, now)))
        if controlled:
            if admission is None:
                admission = _limits.Admission(queue, now)
            jobs = [job for job, _ in controlled.values()]
            admission.load(conn, (j.control for j in jobs if j.control is not None))
            judged = judge_controlled(jobs, admission, batch, prefix, numbers)
            admission.save(conn)
            held += judged.held
            for job, token in judged.admitted:
                leasing.append((job.id, token))
                row = controlled[job.id][1]
                leased = job_from_row(_leased_row(row, token, worker, expires_at))
                round_leased.append((lease_order(job), LeasedJob(leased, token, expires_at, now)))
            if judged.expired:
                _expire(conn, judged.expired)
                batch.expired += judged.expired
            round_leased.sort(key=lambda pair: pair[0])
        if leasing:
            conn.execute(_LEASE, (worker, expires_at, json.dumps(leasing)))
            got += len(leasing)
        batch.leased += [leased for _, leased in round_leased]
        looked += len(rows)
        if len(rows) < n:
            return


def _leased_row(
    row: tuple[Any, ...], token: str, worker: str, expires_at: float
) -> tuple[Any, ...]:
    """``row`` (JOB_COLUMNS) as the lease writes it."""
    return (
        *row[:_STATE],
        "leased",
        row[_ATTEMPTS] + 1,
        *row[_ATTEMPTS + 1 : _TOKEN],
        token,
        worker,
        expires_at,
        *row[_EXPIRES + 1 :],
    )


def _expire(conn: sqlite3.Connection, mine: list[Job]) -> None:
    """Dead-letter the jobs the claim found expired (as ``mine`` has them:
    their unique keys given back, their result waiters' registrations
    dropped)."""
    conn.executemany(_EXPIRE, [(job.finished_at, job.last_error, job.id) for job in mine])
    conn.executemany(_EXPIRE_UNLOCK, [(job.id,) for job in mine])
    conn.executemany(_EXPIRE_WAITERS, [(job.id,) for job in mine])
