"""The SQLite store's admin changes: run now, delete, abort, requeue the
dead, pause and resume. Each runs in one write transaction
(``Database.write``, which holds the file's write lock from its BEGIN, so
a read and the write that follows it are one step); the admin part wakes
this process's waiters after the commit of those that make work or finish
a job (others' within their ``wake_interval``). ``now`` is the store's
clock, read once the lock is held.
"""

from __future__ import annotations

import sqlite3

from ...records._jobs import abort_error
from ...records._workflow import holds_failure_handling
from .._roles import NOTHING_SET_ASIDE, AbortResult, CountResult
from .._settling import FORGET_MARKS
from .._sql_flow_kept import DELETED_COLUMNS, insert_kept, kept_rows
from . import _states

_WAITING = ("scheduled", "ready", "retry_wait")


def _where(queue: str | None) -> tuple[str, tuple[str, ...]]:
    """The ``queue`` condition of a statement on one job (none: any queue)."""
    return ("", ()) if queue is None else (" AND queue = ?", (queue,))


def release_unique(conn: sqlite3.Connection, queue: str, key: str | None, job_id: str) -> None:
    """Give back the unique key ``job_id`` holds (nothing if it holds none)."""
    if key is not None:
        conn.execute(
            "DELETE FROM unique_locks WHERE queue = ? AND key = ? AND holder = ?",
            (queue, key, job_id),
        )


def run_now(conn: sqlite3.Connection, job_id: str, queue: str | None, now: float) -> bool:
    """scheduled / retry_wait / dead -> ready, due now (a dead one with its
    attempts reset and its finish time cleared); a discarded job (kept for
    its waiters only) cannot be run, nor a due one (it is shown ready)."""
    where, params = _where(queue)
    rows = conn.execute(
        "UPDATE jobs SET state = 'ready', run_at = ?, finished_at = NULL,"
        " attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END,"
        " continuation = 0"  # a dead job's failure entry: its next end decides
        " WHERE id = ? AND NOT discarded"
        f" AND (state = 'dead' OR {_states.WAITING} AND run_at > ?)" + where + " RETURNING queue",
        (now, job_id, now, *params),
    ).fetchall()
    return bool(rows)


#: Forgets a job's keep_outcome mark (``store._settling.KEEP_OUTCOME_WAITER``).
_FORGET_MARK = FORGET_MARKS.format("?")

#: What a delete returns: the unique key it gives back, then what keeps the
#: job's place in its flow (``store._sql_flow_kept``).
_DELETED = "RETURNING unique_key, " + DELETED_COLUMNS.format(now="?")


def delete_job(conn: sqlite3.Connection, job_id: str, queue: str | None, now: float) -> bool:
    """Delete a job that is not leased, giving back its unique key and any
    slot it holds; a workflow job keeps its place in its flow
    (``store._sql_flow_kept``), in the same transaction."""
    where, params = _where(queue)
    rows = conn.execute(
        "DELETE FROM jobs WHERE id = ? AND state <> 'leased'" + where + " " + _DELETED,
        (job_id, *params, now),
    ).fetchall()
    if not rows:
        return False
    ((key, _, home, *_),) = rows
    release_unique(conn, home, key, job_id)
    conn.execute("DELETE FROM slots WHERE job_id = ?", (job_id,))
    conn.execute(_FORGET_MARK, (job_id,))
    _keep_flow_places(conn, rows)
    return True


def purge_queue(conn: sqlite3.Connection, queue: str, limit: int, now: float) -> CountResult:
    """Delete up to ``limit`` listed jobs of ``queue`` that are not leased
    (one statement, in the caller's transaction), giving back their unique
    keys and slots, and keeping their places in flows, as
    :func:`delete_job` does."""
    rows = conn.execute(
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE queue = ?"
        " AND state <> 'leased' AND NOT discarded AND (state <> 'succeeded' OR retained)"
        " LIMIT ?) " + _DELETED,
        (queue, max(0, limit), now),
    ).fetchall()
    for key, job_id, *_ in rows:
        release_unique(conn, queue, key, job_id)
    conn.executemany("DELETE FROM slots WHERE job_id = ?", [(row[1],) for row in rows])
    conn.executemany(_FORGET_MARK, [(row[1],) for row in rows])
    _keep_flow_places(conn, rows)
    return CountResult(len(rows), NOTHING_SET_ASIDE)


def _keep_flow_places(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    """The kept outbox entries of deleted ``rows`` (``_DELETED``'s columns)."""
    kept = kept_rows(row[1:] for row in rows)
    if kept:
        conn.executemany(insert_kept("?"), kept)


def abort(
    conn: sqlite3.Connection, job_id: str, queue: str | None, reason: str, now: float
) -> AbortResult:
    """A waiting job is aborted at once (its unique key and any slot given
    back); a leased one is flagged (the first reason stands); a finished
    one is left alone. A waiting workflow job whose continuation holds
    failure handling goes to the outbox (failed) in the same transaction."""
    where, params = _where(queue)
    row = conn.execute(
        "SELECT state, queue, unique_key, then_step FROM jobs WHERE id = ?" + where,
        (job_id, *params),
    ).fetchone()
    if row is None:
        return AbortResult.NOT_FOUND
    state, home, key, then = row
    if state in _WAITING:
        conn.execute(
            "UPDATE jobs SET state = 'aborted', last_error = ?, finished_at = ?,"
            " continuation = ? WHERE id = ?",
            (abort_error(reason), now, holds_failure_handling(then), job_id),
        )
        release_unique(conn, home, key, job_id)
        conn.execute("DELETE FROM slots WHERE job_id = ?", (job_id,))
        conn.execute(_FORGET_MARK, (job_id,))
        return AbortResult.ABORTED
    if state == "leased":
        conn.execute(
            "UPDATE jobs SET abort_reason = ? WHERE id = ? AND abort_reason = ''",
            (abort_error(reason), job_id),
        )
        return AbortResult.FLAGGED
    return AbortResult.FINISHED


def requeue_dead(
    conn: sqlite3.Connection, queue: str, limit: int | None, now: float
) -> CountResult:
    """dead -> ready (due now, attempts from 0), the oldest dead first, at
    most ``limit`` (None or 0: all); aborted and discarded jobs stay."""
    rows = conn.execute(
        "UPDATE jobs SET state = 'ready', run_at = ?, attempts = 0,"
        " finished_at = NULL, unclaimed_since = NULL, continuation = 0"
        " WHERE id IN (SELECT id FROM jobs WHERE queue = ? AND state = 'dead' AND NOT discarded"
        "  ORDER BY coalesce(finished_at, 0), id LIMIT ?)"
        " RETURNING id",
        (now, queue, limit or -1),  # a negative LIMIT is none
    ).fetchall()
    return CountResult(len(rows), NOTHING_SET_ASIDE)


def set_paused(conn: sqlite3.Connection, queue: str, paused: bool) -> None:
    """Pause or resume ``queue``, registering it."""
    conn.execute(
        "INSERT INTO queues (name, paused) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
        (queue, int(paused)),
    )
