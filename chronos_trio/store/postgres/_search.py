"""Searching jobs on PostgreSQL (``SearchRole``, a part of PostgresStore):
the shared bounded keyset scan of ``store._sql_search`` in one transaction.
``lower`` may fold more than ASCII letters here; the hits are judged again
by ``store._search.matches``, so the answers are the other stores'."""

from __future__ import annotations

from typing import Any

import psycopg

from ...records._jobs import Job
from .. import _sql_search as Q
from .._roles import SearchRole
from .._rows import HISTORY_COLUMN, JOB_COLUMNS, job_with_history, shown
from .._search import SCAN_LIMIT, JobQuery, SearchPage, check_search, decode_cursor
from ._base import PostgresPart, now_of

_DIALECT = Q.Dialect(
    param=lambda name: f"%({name})s",
    contains=lambda haystack, needle: f"strpos({haystack}, %({needle})s) > 0",
    payload_contains=lambda needle: f"position(%({needle})s::bytea in payload) > 0",
    lowered_error="lower(last_error)",
)


def search(
    conn: psycopg.Connection[Any],
    query: JobQuery,
    after: str | None,
    limit: int,
    scan_limit: int,
) -> SearchPage:
    now = now_of(conn)
    text, params = Q.scan_statement(_DIALECT, query, after, scan_limit, now, limit)
    scanned = [(str(i), int(h)) for i, h in conn.execute(text, params).fetchall()]

    def jobs_of(ids: list[str]) -> list[Job]:
        rows = conn.execute(
            f"SELECT {JOB_COLUMNS}, {HISTORY_COLUMN} FROM jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
        return [shown(job_with_history(row), now) for row in rows]

    return Q.page_from_scan(scanned, jobs_of, query, limit, scan_limit)


class SearchPart(PostgresPart, SearchRole):
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
        return await self._db.run(
            lambda conn: search(conn, query, after, limit, scan_limit), what="search_jobs"
        )
