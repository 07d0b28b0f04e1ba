"""Notes (progress and log lines) on SQLite: the :class:`NotesPart` of
:class:`~.store.SqliteStore` (see ``store._sql_notes`` for the columns).

A batch of writes is one write transaction (the file's write lock held
from BEGIN): one SELECT reads its rows' fence and notes, the writes are
decided in Python (``_sql_notes.plan_notes``: fenced by token and an
unexpired lease, in order), then one ``executemany`` writes the rows that
changed. A read is one statement on a reader.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import trio

from ...records._jobs import JobRef
from ...records._notes import JobNotes, NoteWrite
from .._results import NotesResult
from .._roles import NotesRole
from .._sql_notes import LOCK_COLUMNS, Noted, plan_notes, read_notes, read_query, to_write
from ._base import SqlitePart

_READ = f"SELECT {LOCK_COLUMNS} FROM jobs WHERE id IN (SELECT value FROM json_each(?))"

_WRITE = "UPDATE jobs SET notes_progress = ?, notes_lines = ?, notes_dropped = ? WHERE id = ?"


def write(conn: sqlite3.Connection, writes: Sequence[NoteWrite], now: float) -> NotesResult:
    ids = json.dumps(sorted({w.lease.job_id for w in writes}))
    noted = dict(Noted.of(row) for row in conn.execute(_READ, (ids,)))
    result = plan_notes(writes, noted, now)
    changed = [(*row.stored(), job_id) for job_id, row in noted.items() if row.changed]
    if changed:
        conn.executemany(_WRITE, changed)
    return result


def read(conn: sqlite3.Connection, ref: JobRef) -> JobNotes | None:
    return read_notes(ref, conn.execute(*read_query(ref, "?")).fetchone())


class NotesPart(SqlitePart, NotesRole):
    async def write_notes(self, writes: Sequence[NoteWrite]) -> NotesResult:
        if not to_write(writes):
            await trio.lowlevel.checkpoint()
            return NotesResult((), (), 0)
        db = self._db
        return await db.write(
            lambda conn: write(conn, writes, db.now()), what="write_notes", wake=False
        )

    async def job_notes(self, ref: JobRef) -> JobNotes | None:
        return await self._db.read(lambda conn: read(conn, ref), what="job_notes")
