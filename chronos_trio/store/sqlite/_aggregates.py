"""Per-minute aggregates on SQLite: the :class:`AggregatesPart` of
:class:`~.store.SqliteStore` (see ``store._sql_aggregates`` for the table).
An add is one write transaction (an ``executemany`` of upserts into the
minute of the store's clock, then the delete of minutes older than
``keep``); a read is one statement on a reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import trio

from ...records._aggregates import KindCounts, MinuteCounts, check_add, minute_of
from .._roles import AggregatesRole
from .._sql_aggregates import first_minute, minute_counts, oldest, read, rows_of, trim, upsert
from ._base import SqlitePart

_UPSERT = upsert("?", "?")
_TRIM = trim("?")


def add(conn: sqlite3.Connection, counts: Sequence[KindCounts], keep: float, now: float) -> None:
    minute = minute_of(now)
    conn.executemany(_UPSERT, [(q, k, minute, *r) for q, k, *r in rows_of(counts)])
    conn.execute(_TRIM, (oldest(now, keep),))


class AggregatesPart(SqlitePart, AggregatesRole):
    async def add_aggregates(self, counts: Sequence[KindCounts], *, keep: float) -> None:
        keep = check_add(counts, keep)
        if not counts:
            await trio.lowlevel.checkpoint()
            return
        db = self._db
        await db.write(
            lambda conn: add(conn, counts, keep, db.now()), what="add_aggregates", wake=False
        )

    async def aggregates(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        names = list(dict.fromkeys(queues))
        if not names:
            await trio.lowlevel.checkpoint()
            return []
        sql = read("?", len(names))
        params = (*names, first_minute(since))
        return await self._db.read(
            lambda conn: minute_counts(conn.execute(sql, params).fetchall(), names),
            what="aggregates",
        )
