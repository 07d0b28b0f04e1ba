"""The SQLite store's admin reads: known queues, statistics, one job, pages
of jobs and flow-control usage. Each runs in one read snapshot
(``Database.read``) as a few statements, never one per job; ``now`` is
the store's clock, read in that snapshot's thread.

What is listed and counted is what the MemoryStore lists and counts: every
job of its state, except a discarded job kept only for its waiters and a
success kept only for its result or its waiters (``retained`` 0). A due
scheduled or retry_wait job is shown ready (``store._rows.shown``: the claim
leases it as one, this store runs no promoter).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import orjson

from ...records._jobs import Job, JobState
from ...records._unique import RUN_SLOT_PREFIX
from .._queue_stats import queue_stats
from .._roles import LimitUsage, QueueStats
from .._rows import HISTORY_COLUMN, JOB_COLUMNS, job_from_row, job_with_history, shown
from . import _states

#: A row's state as reads show it at the time bound to ``:now``: a due
#: scheduled or retry_wait job is ready.
SHOWN_STATE = f"CASE WHEN {_states.WAITING} AND run_at <= :now THEN 'ready' ELSE state END"

#: Rows listed and counted (see the module docstring).
LISTED = "NOT discarded AND (state <> 'succeeded' OR retained)"

#: ``IN`` a list of texts given as one JSON array parameter (see :func:`texts`).
IN_TEXTS = "IN (SELECT value FROM json_each(?))"

#: The page order of each state, then job ID (SQLite's BINARY collation
#: compares UTF-8 bytes: code point order, as Python's).
_ORDER = {
    JobState.READY: "run_at - priority * 1e10",  # records._control.ready_score
    JobState.LEASED: "coalesce(lease_expires_at, 0)",
    JobState.SUCCEEDED: "coalesce(finished_at, 0)",
    JobState.DEAD: "coalesce(finished_at, 0)",
    JobState.ABORTED: "coalesce(finished_at, 0)",
    JobState.SCHEDULED: "run_at",
    JobState.RETRY_WAIT: "run_at",
}


def texts(values: Iterable[str]) -> str:
    """The one parameter of :data:`IN_TEXTS`: ``values`` as a JSON array."""
    return orjson.dumps(list(values)).decode()


def known_queues(conn: sqlite3.Connection) -> list[str]:
    """Every known queue's name, sorted."""
    return sorted(name for (name,) in conn.execute("SELECT name FROM queues"))


def stats(conn: sqlite3.Connection, queues: Sequence[str] | None, now: float) -> list[QueueStats]:
    names = known_queues(conn) if queues is None else list(queues)
    names_json = texts(names)
    rows = conn.execute(
        f"SELECT queue, {SHOWN_STATE} AS shown, version, part, count(*) FROM jobs"
        f" WHERE queue IN (SELECT value FROM json_each(:names)) AND {LISTED}"
        " GROUP BY queue, shown, version, part",
        {"now": now, "names": names_json},
    ).fetchall()
    paused = [
        name
        for (name,) in conn.execute(
            f"SELECT name FROM queues WHERE name {IN_TEXTS} AND paused", (names_json,)
        )
    ]
    return queue_stats(names, rows, paused)


def get_job(conn: sqlite3.Connection, job_id: str, queue: str | None, now: float) -> Job | None:
    query = f"SELECT {JOB_COLUMNS}, {HISTORY_COLUMN} FROM jobs WHERE id = ?"
    params: tuple[str, ...] = (job_id,)
    if queue is not None:
        query += " AND queue = ?"
        params = (job_id, queue)
    row = conn.execute(query, params).fetchone()
    return None if row is None else shown(job_with_history(row), now)


def list_jobs(
    conn: sqlite3.Connection, queue: str, state: JobState, offset: int, limit: int, now: float
) -> list[Job]:
    if limit <= 0:
        return []
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE queue = :queue AND {SHOWN_STATE} = :state"
        f" AND {LISTED} ORDER BY {_ORDER[state]}, id LIMIT :limit OFFSET :offset",
        {
            "queue": queue,
            "now": now,
            "state": state.value,
            "limit": limit,
            "offset": max(0, offset),
        },
    ).fetchall()
    return [shown(job_from_row(row), now) for row in rows]


def limit_usage(conn: sqlite3.Connection, queue: str, now: float) -> list[LimitUsage]:
    """Concurrency keys with slots held by unexpired leases (unique keys' run
    slots left out, as every store does) and rate keys whose theoretical
    arrival time has not passed, sorted by kind then key."""
    out = [
        LimitUsage(queue, key, "concurrency", int(n))
        for key, n in conn.execute(
            "SELECT s.key, count(*) FROM slots s JOIN jobs j ON j.id = s.job_id"
            " WHERE s.queue = ? AND j.state = 'leased' AND j.lease_expires_at > ?"
            " AND substr(s.key, 1, ?) <> ? GROUP BY s.key",
            (queue, now, len(RUN_SLOT_PREFIX), RUN_SLOT_PREFIX),
        )
    ]
    out += [
        LimitUsage(queue, key, "rate", 0, float(tat))
        for key, tat in conn.execute(
            "SELECT key, tat FROM rate_buckets WHERE queue = ? AND tat > ?", (queue, now)
        )
    ]
    return sorted(out, key=lambda u: (u.kind, u.key))
