"""What the PostgreSQL store checker reads to judge, without changing
anything: the job rows of a queue, and the flow-control slots and unique
locks whose holder does not stand as they say (see ``_check``). The
judgement itself is shared with the SQLite store (``store._sql_judge``).

A row's version is its ``xmin`` (any write since makes a new one): a
repair acts only on the version judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...records._jobs import PENDING_STATES
from .._rows import JOB_COLUMNS, job_from_row
from .._sql_judge import Judged, Row, held_by

_PENDING = [state.value for state in PENDING_STATES]

#: The walk's select list: the row version, the job, and the flags.
ROW_COLUMNS = f"xmin::text, {JOB_COLUMNS}, discarded, continuation, abort_reason"


def read_rows(conn: psycopg.Connection[Any], queue: str, after: str, batch: int) -> list[Row]:
    """The next ``batch`` rows of ``queue`` after job ID ``after`` (by ID)."""
    out = []
    for raw in conn.execute(
        f'SELECT {ROW_COLUMNS} FROM jobs WHERE queue = %s AND id COLLATE "C" > %s'
        ' ORDER BY id COLLATE "C" LIMIT %s',
        (queue, after, batch),
    ):
        discarded, continuation, abort_reason = raw[-3:]
        out.append(Row(raw[0], job_from_row(raw[1:-3]), discarded, continuation, abort_reason))
    return out


def stray_slots(conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[Judged]:
    """Concurrency slots held by a job that is not leased, or is gone."""
    out = []
    for queue, key, job_id, state, version, part in conn.execute(
        "SELECT s.queue, s.key, s.job_id, j.state, j.version, j.part"
        " FROM slots s LEFT JOIN jobs j ON j.id = s.job_id"
        " WHERE s.queue = ANY(%s) AND (j.id IS NULL OR j.state <> 'leased')",
        (list(queues),),
    ):
        out.append(held_by(queue, key, job_id, state, version, part, f"concurrency slot {key!r}"))
    return out


def stray_locks(conn: psycopg.Connection[Any], queues: Sequence[str], now: float) -> list[Judged]:
    """Unique locks in force (not lapsed, and not a throttle's hold after
    its job succeeded) whose holder is gone or no longer pending."""
    out = []
    for queue, key, holder, state, version, part in conn.execute(
        "SELECT u.queue, u.key, u.holder, j.state, j.version, j.part"
        " FROM unique_locks u LEFT JOIN jobs j ON j.id = u.holder"
        " WHERE u.queue = ANY(%s) AND (u.expires_at IS NULL OR u.expires_at > %s)"
        " AND NOT (u.mode = 'throttle' AND u.expires_at IS NOT NULL)"
        " AND (j.id IS NULL OR j.state <> ALL(%s))",
        (list(queues), now, _PENDING),
    ):
        out.append(held_by(queue, key, holder, state, version, part, f"unique lock {key!r}"))
    return out
