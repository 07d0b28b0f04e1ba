"""Results, waiting and workflows on SQLite: the statements of ``ResultRole``
and ``FlowRole`` and of the idle wait (``wait_ready``).

Each function runs inside one operation's transaction (``Database.write``
or ``Database.read``) with the store's ``now`` passed in; each raises
sqlite3.Error, which the Database turns into StoreError.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...records._jobs import JobOutcome, JobRef, JobState
from ...records._workflow import FAILED_OUTCOME, Arrival
from .._roles import Continuation, GroupStatus
from .._rows import JOB_COLUMNS, job_from_row, shown
from .._settle_plan import outbox_entry
from .._sql_flow_kept import finish_kept, kept_entries
from .._topology_placement import topology_placement
from . import _states
from ._claim import has_due

#: A lapsed result waiter is forgotten this long after it lapsed (s).
_LAPSED_GRACE = 60.0

#: Lapsed waiters and workflow groups forgotten per call, at most.
_FORGET = 100

_OUTCOME = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND (? IS NULL OR queue = ?)"

_STATE = "SELECT state FROM jobs WHERE id = ? AND (? IS NULL OR queue = ?)"

_PAUSED = "SELECT name FROM queues WHERE paused AND name IN (SELECT value FROM json_each(?))"

# The next due time to come of the queues: each queue's earliest scheduled
# or retry_wait job after now (one seek of the jobs_due index each).
_NEXT_DUE = f"""
SELECT min((SELECT j.run_at FROM jobs j
            WHERE j.queue = q.value AND {_states.WAITING}
              AND j.run_at > ?
            ORDER BY j.run_at LIMIT 1))
FROM json_each(?) AS q
"""

_REGISTER = """
INSERT INTO result_waiters (job_id, waiter, expires_at) VALUES (?, ?, ?)
ON CONFLICT (job_id, waiter) DO UPDATE SET expires_at = excluded.expires_at
"""

_FORGET_LAPSED = """
DELETE FROM result_waiters WHERE rowid IN (
    SELECT rowid FROM result_waiters WHERE expires_at < ? LIMIT ?)
"""

_UNREGISTER = "DELETE FROM result_waiters WHERE job_id = ? AND waiter = ?"

_CONTINUATIONS = (
    """
SELECT * FROM (
    SELECT j.id, j.queue, j.then_step, j.result, j.version, j.part,
        j.state, j.last_error, j.attempts, j.kind, 0
    FROM jobs j
    WHERE j.continuation = 1 AND j.queue IN (SELECT value FROM json_each(?1))
    ORDER BY j.finished_at, j.id
    LIMIT ?2
)
UNION ALL
SELECT * FROM ("""
    + kept_entries("IN (SELECT value FROM json_each(?1))", "?2")
    + ")"
)

_FINISH_CONTINUATIONS = """
UPDATE jobs SET continuation = 0
WHERE id IN (SELECT value FROM json_each(?)) AND continuation = 1
"""

_PENDING = frozenset({JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT})


def probe(conn: sqlite3.Connection, queues: Sequence[str], now: float) -> tuple[bool, float | None]:
    """Whether a queue of ``queues`` that is not paused has a due job (ready,
    or scheduled or retry_wait with its time come: the claim leases it as
    ready), and the next due time of a scheduled or retry_wait job of them
    (None). A few index seeks per queue, however many jobs wait for later."""
    names = list(dict.fromkeys(queues))
    if not names:
        return False, None
    listed = json.dumps(names)
    paused = {row[0] for row in conn.execute(_PAUSED, (listed,))}
    ready = any(has_due(conn, name, now) for name in names if name not in paused)
    (next_due,) = conn.execute(_NEXT_DUE, (now, listed)).fetchone()
    return ready, None if next_due is None else float(next_due)


def outcome(conn: sqlite3.Connection, ref: JobRef, now: float) -> JobOutcome | None:
    """The job's outcome as a producer sees it at ``now`` (a due scheduled
    or retry_wait job shows as ready); None: no such job, or not of
    ``ref.queue``."""
    row = conn.execute(_OUTCOME, (ref.job_id, ref.queue, ref.queue)).fetchone()
    if row is None:
        return None
    return JobOutcome.of(shown(job_from_row(row), now), now)


def state_of(conn: sqlite3.Connection, ref: JobRef) -> JobState | None:
    """The job's stored state (None: no such job, or not of ``ref.queue``)."""
    row = conn.execute(_STATE, (ref.job_id, ref.queue, ref.queue)).fetchone()
    return None if row is None else JobState(row[0])


def register_waiter(
    conn: sqlite3.Connection, ref: JobRef, waiter: str, ttl: float, now: float
) -> JobState | None:
    """Register ``waiter`` for ``ref`` (while the job is pending) until
    ``now + ttl``; the job's state (None: no such job). Registration is a
    write, ordered with settles by the file's write lock: a settle after it
    sees the waiter (the finished job stays readable), one before it
    finished the job already (its state says so). Forgets a few waiters
    that lapsed over a minute ago."""
    state = state_of(conn, ref)
    if state in _PENDING:
        conn.execute(_REGISTER, (ref.job_id, waiter, now + ttl))
    conn.execute(_FORGET_LAPSED, (now - _LAPSED_GRACE, _FORGET))
    return state


def unregister_waiter(conn: sqlite3.Connection, job_id: str, waiter: str) -> None:
    conn.execute(_UNREGISTER, (job_id, waiter))


def continuations(
    conn: sqlite3.Connection, queues: Sequence[str], limit: int
) -> list[Continuation]:
    """Up to ``limit`` outbox entries of ``queues``, earliest finished first."""
    if limit <= 0 or not queues:
        return []
    rows = conn.execute(_CONTINUATIONS, (json.dumps(list(queues)), limit)).fetchall()
    return [
        outbox_entry(job_id, queue, topology_placement(version, part), then, result, *failure)
        for job_id, queue, then, result, version, part, *failure in rows
    ][:limit]


def finish_continuations(conn: sqlite3.Connection, done: Sequence[Continuation]) -> None:
    """Take ``done`` out of the outbox (the jobs stay, retained; the kept
    entries of deleted jobs go)."""
    if done:
        conn.execute(_FINISH_CONTINUATIONS, (json.dumps(sorted({c.job_id for c in done})),))
        kept = finish_kept(done)
        if kept:
            conn.execute(
                "DELETE FROM flow_kept WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(kept),),
            )


def group_arrive(
    conn: sqlite3.Connection, arrivals: Sequence[Arrival], ttl: float, now: float
) -> list[list[bytes | None] | None]:
    """Record group arrivals, in order: per arrival the members' results in
    member order once all have arrived, else None. A group past its expiry
    starts afresh; every arrival keeps it ``ttl`` more seconds; a member's
    second arrival changes nothing. Forgets a few lapsed groups."""
    out: list[list[bytes | None] | None] = []
    for a in arrivals:
        row = conn.execute(
            "SELECT size, expires_at FROM flow_groups WHERE id = ?", (a.group_id,)
        ).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO flow_groups (id, size, expires_at) VALUES (?, ?, ?)",
                (a.group_id, a.size, now + ttl),
            )
            size = a.size
        elif row[1] <= now:
            conn.execute("DELETE FROM flow_group_members WHERE group_id = ?", (a.group_id,))
            conn.execute(
                "UPDATE flow_groups SET size = ?, expires_at = ? WHERE id = ?",
                (a.size, now + ttl, a.group_id),
            )
            size = a.size
        else:
            conn.execute(
                "UPDATE flow_groups SET expires_at = ? WHERE id = ?", (now + ttl, a.group_id)
            )
            size = int(row[0])
        conn.execute(
            "INSERT INTO flow_group_members (group_id, idx, result) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (a.group_id, a.index, a.result),
        )
        members = dict(
            conn.execute(
                "SELECT idx, result FROM flow_group_members WHERE group_id = ?", (a.group_id,)
            ).fetchall()
        )
        if len(members) >= size:
            out.append([_blob(members.get(k)) for k in range(size)])
        else:
            out.append(None)
    conn.execute(
        "DELETE FROM flow_groups WHERE id IN"
        " (SELECT id FROM flow_groups WHERE expires_at <= ? LIMIT ?)",
        (now, _FORGET),
    )
    return out


def _blob(value: bytes | None) -> bytes | None:
    return None if value is None else bytes(value)


_GROUP_STATUS = f"""
SELECT m.idx, substr(m.result, 1, {len(FAILED_OUTCOME)}) FROM flow_group_members m
JOIN flow_groups g ON g.id = m.group_id
WHERE g.id = ? AND g.expires_at > ?
"""


def group_status(
    conn: sqlite3.Connection, group_ids: Sequence[str], now: float
) -> list[GroupStatus]:
    """Per group, its members arrived and the failed ones' indexes (a group
    past its expiry has none): one read per group, in the caller's
    transaction."""
    out: list[GroupStatus] = []
    for group_id in group_ids:
        rows = conn.execute(_GROUP_STATUS, (group_id, now)).fetchall()
        failed = sorted(
            idx for idx, head in rows if head is not None and bytes(head) == FAILED_OUTCOME
        )
        out.append(GroupStatus(len(rows), tuple(failed)))
    return out
