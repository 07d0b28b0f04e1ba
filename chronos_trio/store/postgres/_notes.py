"""Notes (progress and log lines) on PostgreSQL: the :class:`NotesPart` of
:class:`~.store.PostgresStore` (see ``store._sql_notes`` for the columns).

A batch of writes is one transaction: one statement locks its rows
(``FOR UPDATE``) and reads their fence and notes, the writes are decided in
Python (``_sql_notes.plan_notes``: fenced by token and an unexpired lease,
in order), then one statement over arrays (``unnest``) writes every row
that changed. A read is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import trio

from ...records._jobs import JobRef
from ...records._notes import JobNotes, NoteWrite
from .._results import NotesResult
from .._roles import NotesRole
from .._sql_notes import LOCK_COLUMNS, Noted, plan_notes, read_notes, read_query, to_write
from ._base import PostgresPart

_LOCK = f"""
SELECT (SELECT chronos_now()), {LOCK_COLUMNS}
FROM jobs WHERE id = ANY (%s::text[])
FOR UPDATE
"""

_WRITE = """
UPDATE jobs j SET notes_progress = w.progress, notes_lines = w.lines, notes_dropped = w.dropped
FROM unnest(%(ids)s::text[], %(progress)s::text[], %(lines)s::text[], %(dropped)s::integer[])
    AS w (id, progress, lines, dropped)
WHERE j.id = w.id
"""


def write(conn: psycopg.Connection[Any], writes: Sequence[NoteWrite]) -> NotesResult:
    ids = sorted({w.lease.job_id for w in writes})
    rows = conn.execute(_LOCK, (ids,)).fetchall()
    now = float(rows[0][0]) if rows else 0.0
    noted = dict(Noted.of(row[1:]) for row in rows)
    result = plan_notes(writes, noted, now)
    changed = [(job_id, row.stored()) for job_id, row in noted.items() if row.changed]
    if changed:
        conn.execute(
            _WRITE,
            {
                "ids": [job_id for job_id, _ in changed],
                "progress": [s[0] for _, s in changed],
                "lines": [s[1] for _, s in changed],
                "dropped": [s[2] for _, s in changed],
            },
        )
    return result


def read(conn: psycopg.Connection[Any], ref: JobRef) -> JobNotes | None:
    return read_notes(ref, conn.execute(*read_query(ref, "%s")).fetchone())


class NotesPart(PostgresPart, NotesRole):
    async def write_notes(self, writes: Sequence[NoteWrite]) -> NotesResult:
        if not to_write(writes):
            await trio.lowlevel.checkpoint()
            return NotesResult((), (), 0)
        return await self._db.run(lambda conn: write(conn, writes), what="write_notes")

    async def job_notes(self, ref: JobRef) -> JobNotes | None:
        return await self._db.run(lambda conn: read(conn, ref), what="job_notes")
