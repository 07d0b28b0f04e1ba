"""Searching jobs on SQLite (``SearchRole``, a part of SqliteStore): the
shared bounded keyset scan of ``store._sql_search`` in one read snapshot.
SQLite's ``lower`` folds ASCII letters only: exactly the search's rule."""

from __future__ import annotations

import sqlite3

import orjson

from ...records._jobs import Job
from .. import _sql_search as Q
from .._roles import SearchRole
from .._rows import HISTORY_COLUMN, JOB_COLUMNS, job_with_history, shown
from .._search import SCAN_LIMIT, JobQuery, SearchPage, check_search, decode_cursor
from ._base import SqlitePart

_DIALECT = Q.Dialect(
    param=lambda name: f":{name}",
    contains=lambda haystack, needle: f"instr({haystack}, :{needle}) > 0",
    payload_contains=lambda needle: f"instr(payload, :{needle}) > 0",
    lowered_error="lower(last_error)",
)


def search(
    conn: sqlite3.Connection,
    query: JobQuery,
    after: str | None,
    limit: int,
    scan_limit: int,
    now: float,
) -> SearchPage:
    text, params = Q.scan_statement(_DIALECT, query, after, scan_limit, now, limit)
    scanned = [(str(i), int(h)) for i, h in conn.execute(text, params)]

    def jobs_of(ids: list[str]) -> list[Job]:
        rows = conn.execute(
            f"SELECT {JOB_COLUMNS}, {HISTORY_COLUMN} FROM jobs"
            " WHERE id IN (SELECT value FROM json_each(?))",
            (orjson.dumps(ids).decode(),),
        )
        return [shown(job_with_history(row), now) for row in rows]

    return Q.page_from_scan(scanned, jobs_of, query, limit, scan_limit)


class SearchPart(SqlitePart, SearchRole):
    async def search_jobs(
        self,
        query: JobQuery,
        *,
        cursor: str | None = None,
        limit: int = 50,
        scan_limit: int = SCAN_LIMIT,
    ) -> SearchPage:
        check_search(limit, scan_limit)
        after = None if cursor is None else Q.cursor_after(decode_cursor(cursor), cursor)
        db = self._db
        return await db.read(
            lambda conn: search(conn, query, after, limit, scan_limit, db.now()),
            what="search_jobs",
        )
