"""The PostgreSQL store's admin reads: known queues, statistics, one job,
pages of jobs and flow-control usage (each one transaction, a few
statements, never one per job).

What is listed and counted is what the MemoryStore lists and counts: every
job of its state, except a discarded job kept only for its waiters and a
success kept only for its result or its waiters (``retained`` false).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ...records._jobs import Job, JobState
from ...records._unique import RUN_SLOT_PREFIX
from .._queue_stats import queue_stats
from .._roles import LimitUsage, QueueStats
from .._rows import HISTORY_COLUMN, JOB_COLUMNS, job_from_row, job_with_history, shown
from ._base import now_of

#: A row's state as reads show it, at the time bound to its one placeholder:
#: a due scheduled or retry_wait job is ready (the claim leases it as one:
#: this store runs no promoter).
SHOWN_STATE = (
    "CASE WHEN state IN ('scheduled', 'retry_wait') AND run_at <= %s THEN 'ready' ELSE state END"
)

#: Rows listed and counted (see the module docstring).
LISTED = "NOT discarded AND (state <> 'succeeded' OR retained)"

#: The page order of each state, then job ID (code point order, as Python's).
_ORDER = {
    JobState.READY: "run_at - priority::float8 * 1e10::float8",  # records._control.ready_score
    JobState.LEASED: "coalesce(lease_expires_at, 0)",
    JobState.SUCCEEDED: "coalesce(finished_at, 0)",
    JobState.DEAD: "coalesce(finished_at, 0)",
    JobState.ABORTED: "coalesce(finished_at, 0)",
    JobState.SCHEDULED: "run_at",
    JobState.RETRY_WAIT: "run_at",
}


def known_queues(conn: psycopg.Connection[Any]) -> list[str]:
    return sorted(name for (name,) in conn.execute("SELECT name FROM queues"))


def stats(conn: psycopg.Connection[Any], queues: Sequence[str] | None) -> list[QueueStats]:
    names = known_queues(conn) if queues is None else list(queues)
    rows = conn.execute(
        f"SELECT queue, {SHOWN_STATE} AS shown, version, part, count(*) FROM jobs"
        f" WHERE queue = ANY(%s) AND {LISTED} GROUP BY queue, shown, version, part",
        (now_of(conn), names),
    ).fetchall()
    paused = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM queues WHERE name = ANY(%s) AND paused", (names,)
        )
    ]
    return queue_stats(names, rows, paused)


def get_job(conn: psycopg.Connection[Any], job_id: str, queue: str | None) -> Job | None:
    query = f"SELECT {JOB_COLUMNS}, {HISTORY_COLUMN} FROM jobs WHERE id = %s"
    params: tuple[str, ...] = (job_id,)
    if queue is not None:
        query += " AND queue = %s"
        params = (job_id, queue)
    row = conn.execute(query, params).fetchone()
    return None if row is None else shown(job_with_history(row), now_of(conn))


def list_jobs(
    conn: psycopg.Connection[Any], queue: str, state: JobState, offset: int, limit: int
) -> list[Job]:
    if limit <= 0:
        return []
    query = sql.SQL(
        "SELECT {cols} FROM jobs WHERE queue = %s AND {state} = %s AND {listed}"
        ' ORDER BY {order}, id COLLATE "C" OFFSET %s LIMIT %s'
    ).format(
        cols=sql.SQL(JOB_COLUMNS),
        state=sql.SQL(SHOWN_STATE),
        listed=sql.SQL(LISTED),
        order=sql.SQL(_ORDER[state]),
    )
    now = now_of(conn)
    rows = conn.execute(query, (queue, now, state.value, max(0, offset), limit))
    return [shown(job_from_row(row), now) for row in rows]


def limit_usage(conn: psycopg.Connection[Any], queue: str) -> list[LimitUsage]:
    """Concurrency keys with slots held by unexpired leases (unique keys' run
    slots left out, as every store does) and rate keys whose theoretical
    arrival time has not passed, sorted by kind then key."""
    now = now_of(conn)
    out = [
        LimitUsage(queue, key, "concurrency", int(n))
        for key, n in conn.execute(
            "SELECT s.key, count(*) FROM slots s JOIN jobs j ON j.id = s.job_id"
            " WHERE s.queue = %s AND j.state = 'leased' AND j.lease_expires_at > %s"
            " AND left(s.key, %s) <> %s GROUP BY s.key",
            (queue, now, len(RUN_SLOT_PREFIX), RUN_SLOT_PREFIX),
        )
    ]
    out += [
        LimitUsage(queue, key, "rate", 0, tat)
        for key, tat in conn.execute(
            "SELECT key, tat FROM rate_buckets WHERE queue = %s AND tat > %s", (queue, now)
        )
    ]
    return sorted(out, key=lambda u: (u.kind, u.key))
