"""What the SQLite store checker reads to judge, without changing
anything: the job rows of a queue, and the flow-control slots and unique
locks whose holder does not stand as they say (see ``_check``). The
judgement itself is shared with the PostgreSQL store (``store._sql_judge``).

SQLite keeps no row version, so a row's version is a digest of every
column the walk reads (the job, its flags): a repair re-reads the row in
its own write transaction (the file's write lock held from its BEGIN) and
acts only when the digest is the one judged.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...records._jobs import PENDING_STATES
from .._rows import JOB_COLUMNS, job_from_row
from .._sql_judge import Judged, Row, held_by
from ._inspect import IN_TEXTS, texts

#: The walk's select list: the job, then its flags.
ROW_COLUMNS = f"{JOB_COLUMNS}, discarded, continuation, abort_reason"

#: The pending states, as an SQL list (fixed names: no parameter needed).
PENDING_SQL = ", ".join(f"'{state.value}'" for state in sorted(PENDING_STATES))


def _row(raw: Sequence[Any]) -> Row:
    digest = hashlib.blake2b(repr(tuple(raw)).encode(), digest_size=16).hexdigest()
    discarded, continuation, abort_reason = raw[-3:]
    return Row(digest, job_from_row(raw[:-3]), bool(discarded), bool(continuation), abort_reason)


def read_rows(conn: sqlite3.Connection, queue: str, after: str, batch: int) -> list[Row]:
    """The next ``batch`` rows of ``queue`` after job ID ``after`` (by ID,
    in code point order: SQLite's BINARY collation of UTF-8 text)."""
    rows = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM jobs WHERE queue = ? AND id > ? ORDER BY id LIMIT ?",
        (queue, after, batch),
    ).fetchall()
    return [_row(raw) for raw in rows]


def read_row(conn: sqlite3.Connection, job_id: str) -> Row | None:
    """The row of ``job_id`` as the walk reads it (None: no such job)."""
    raw = conn.execute(f"SELECT {ROW_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return None if raw is None else _row(raw)


def stray_slots(conn: sqlite3.Connection, queues: Sequence[str]) -> list[Judged]:
    """Concurrency slots held by a job that is not leased, or is gone."""
    rows = conn.execute(
        "SELECT s.queue, s.key, s.job_id, j.state, j.version, j.part"
        " FROM slots s LEFT JOIN jobs j ON j.id = s.job_id"
        f" WHERE s.queue {IN_TEXTS}"
        " AND (j.id IS NULL OR j.state <> 'leased')",
        (texts(queues),),
    ).fetchall()
    return [
        held_by(queue, key, job_id, state, version, part, f"concurrency slot {key!r}")
        for queue, key, job_id, state, version, part in rows
    ]


def stray_locks(conn: sqlite3.Connection, queues: Sequence[str], now: float) -> list[Judged]:
    """Unique locks in force (not lapsed, and not a throttle's hold after
    its job succeeded) whose holder is gone or no longer pending."""
    rows = conn.execute(
        "SELECT u.queue, u.key, u.holder, j.state, j.version, j.part"
        " FROM unique_locks u LEFT JOIN jobs j ON j.id = u.holder"
        f" WHERE u.queue {IN_TEXTS}"
        " AND (u.expires_at IS NULL OR u.expires_at > ?)"
        " AND NOT (u.mode = 'throttle' AND u.expires_at IS NOT NULL)"
        f" AND (j.id IS NULL OR j.state NOT IN ({PENDING_SQL}))",
        (texts(queues), now),
    ).fetchall()
    return [
        held_by(queue, key, holder, state, version, part, f"unique lock {key!r}")
        for queue, key, holder, state, version, part in rows
    ]


def held_rows(conn: sqlite3.Connection, queues: Sequence[str]) -> int:
    """How many slot and unique lock rows ``queues`` have."""
    names = texts(queues)
    row = conn.execute(
        f"SELECT (SELECT count(*) FROM slots WHERE queue {IN_TEXTS})"
        f" + (SELECT count(*) FROM unique_locks WHERE queue {IN_TEXTS})",
        (names, names),
    ).fetchone()
    return int(row[0]) if row else 0
