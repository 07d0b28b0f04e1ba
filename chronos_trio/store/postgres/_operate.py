"""The PostgreSQL store's admin changes: run now, delete, abort, requeue the
dead, pause and resume. Each is one transaction (run by the admin part
through ``Database.run``); those that make jobs ready wake idle workers, and
an abort that finishes a job wakes its result waiters, at commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...records._jobs import abort_error
from ...records._workflow import holds_failure_handling
from .._roles import NOTHING_SET_ASIDE, AbortResult, CountResult
from .._settling import FORGET_MARKS
from .._sql_flow_kept import DELETED_COLUMNS, insert_kept, kept_rows
from ._wake import wake_queues, wake_waiters

_WAITING = ("scheduled", "ready", "retry_wait")


def _where(queue: str | None) -> tuple[str, tuple[str, ...]]:
    """The ``queue`` condition of a statement on one job (none: any queue)."""
    return ("", ()) if queue is None else (" AND queue = %s", (queue,))


def release_unique(conn: psycopg.Connection[Any], queue: str, key: str | None, job_id: str) -> None:
    """Give back the unique key ``job_id`` holds (nothing if it holds none)."""
    if key is not None:
        conn.execute(
            "DELETE FROM unique_locks WHERE queue = %s AND key = %s AND holder = %s",
            (queue, key, job_id),
        )


def run_now(conn: psycopg.Connection[Any], schema: str, job_id: str, queue: str | None) -> bool:
    """scheduled / retry_wait / dead -> ready, due now (a dead one with its
    attempts reset and its finish time cleared); a discarded job (kept for
    its waiters only) cannot be run, nor a due one (it is shown ready)."""
    where, params = _where(queue)
    row = conn.execute(
        "UPDATE jobs SET state = 'ready', run_at = chronos_now(), finished_at = NULL,"
        " attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END,"
        " continuation = false"  # a dead job's failure entry: its next end decides
        " WHERE id = %s AND NOT discarded"
        " AND (state = 'dead' OR state IN ('scheduled', 'retry_wait') AND run_at > chronos_now())"
        + where
        + " RETURNING queue",
        (job_id, *params),
    ).fetchone()
    if row is None:
        return False
    wake_queues(conn, schema, [row[0]])
    return True


#: What a delete returns: the unique key it gives back, then what keeps the
#: job's place in its flow (``store._sql_flow_kept``).
_DELETED = "RETURNING unique_key, " + DELETED_COLUMNS.format(now="chronos_now()")


def delete_job(conn: psycopg.Connection[Any], schema: str, job_id: str, queue: str | None) -> bool:
    """Delete a job that is not leased, giving back its unique key (its
    result waiters are woken: it went); a workflow job keeps its place in
    its flow (``store._sql_flow_kept``), in the same transaction."""
    where, params = _where(queue)
    row = conn.execute(
        "DELETE FROM jobs WHERE id = %s AND state <> 'leased'" + where + " " + _DELETED,
        (job_id, *params),
    ).fetchone()
    if row is None:
        return False
    release_unique(conn, row[2], row[0], job_id)
    conn.execute("DELETE FROM slots WHERE job_id = %s", (job_id,))
    conn.execute(FORGET_MARKS.format("%s"), (job_id,))
    wake_waiters(conn, schema, [job_id])
    _keep_flow_places(conn, [row])
    return True


def purge_queue(conn: psycopg.Connection[Any], schema: str, queue: str, limit: int) -> CountResult:
    """Delete up to ``limit`` listed jobs of ``queue`` that are not leased
    (rows a worker is claiming right now are skipped, not waited for),
    giving back their unique keys and slots and waking their result
    waiters, as :func:`delete_job` does."""
    rows = conn.execute(
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE queue = %s"
        " AND state <> 'leased' AND NOT discarded AND (state <> 'succeeded' OR retained)"
        " LIMIT %s FOR UPDATE SKIP LOCKED) AND state <> 'leased' " + _DELETED,
        (queue, max(0, limit)),
    ).fetchall()
    for key, job_id, *_ in rows:
        release_unique(conn, queue, key, job_id)
    ids = [row[1] for row in rows]
    if ids:
        conn.execute("DELETE FROM slots WHERE job_id = ANY(%s)", (ids,))
        conn.execute(FORGET_MARKS.format("ANY(%s)"), (ids,))
        wake_waiters(conn, schema, ids)
        _keep_flow_places(conn, rows)
    return CountResult(len(rows), NOTHING_SET_ASIDE)


def _keep_flow_places(conn: psycopg.Connection[Any], rows: Sequence[Sequence[Any]]) -> None:
    """The kept outbox entries of deleted ``rows`` (``_DELETED``'s columns),
    in the deleting transaction (``store._sql_flow_kept``)."""
    kept = kept_rows(row[1:] for row in rows)
    if kept:
        with conn.cursor() as cur:
            cur.executemany(insert_kept("%s"), kept)


def abort(
    conn: psycopg.Connection[Any], schema: str, job_id: str, queue: str | None, reason: str
) -> AbortResult:
    """A waiting job is aborted at once (its unique key and any slot given
    back, its waiters woken); a leased one is flagged (the first reason
    stands); a finished one is left alone. A waiting workflow job whose
    continuation holds failure handling goes to the outbox (failed) in the
    same transaction."""
    where, params = _where(queue)
    row = conn.execute(
        "SELECT state, queue, unique_key, then_step FROM jobs WHERE id = %s"
        + where
        + " FOR UPDATE",
        (job_id, *params),
    ).fetchone()
    if row is None:
        return AbortResult.NOT_FOUND
    state, home, key, then = row
    if state in _WAITING:
        conn.execute(
            "UPDATE jobs SET state = 'aborted', last_error = %s, finished_at = chronos_now(),"
            " continuation = %s WHERE id = %s",
            (abort_error(reason), holds_failure_handling(then), job_id),
        )
        release_unique(conn, home, key, job_id)
        conn.execute("DELETE FROM slots WHERE job_id = %s", (job_id,))
        conn.execute(FORGET_MARKS.format("%s"), (job_id,))
        wake_waiters(conn, schema, [job_id])
        return AbortResult.ABORTED
    if state == "leased":
        conn.execute(
            "UPDATE jobs SET abort_reason = %s WHERE id = %s AND abort_reason = ''",
            (abort_error(reason), job_id),
        )
        return AbortResult.FLAGGED
    return AbortResult.FINISHED


def requeue_dead(
    conn: psycopg.Connection[Any], schema: str, queue: str, limit: int | None
) -> CountResult:
    """dead -> ready (due now, attempts from 0), the oldest dead first, at
    most ``limit`` (None or 0: all); aborted and discarded jobs stay."""
    rows = conn.execute(
        "UPDATE jobs SET state = 'ready', run_at = chronos_now(), attempts = 0,"
        " finished_at = NULL, unclaimed_since = NULL, continuation = false"
        " WHERE id IN (SELECT id FROM jobs WHERE queue = %s AND state = 'dead' AND NOT discarded"
        '  ORDER BY coalesce(finished_at, 0), id COLLATE "C" LIMIT %s FOR UPDATE)'
        " RETURNING id",
        (queue, limit or None),
    ).fetchall()
    if rows:
        wake_queues(conn, schema, [queue])
    return CountResult(len(rows), NOTHING_SET_ASIDE)


def set_paused(conn: psycopg.Connection[Any], schema: str, queue: str, paused: bool) -> None:
    """Pause or resume ``queue`` (registering it); a resume wakes idle workers."""
    conn.execute(
        "INSERT INTO queues (name, paused) VALUES (%s, %s)"
        " ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused",
        (queue, paused),
    )
    if not paused:
        wake_queues(conn, schema, [queue])
