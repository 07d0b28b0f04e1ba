"""Per-minute aggregates on PostgreSQL: the :class:`AggregatesPart` of
:class:`~.store.PostgresStore` (see ``store._sql_aggregates`` for the
table). An add is one transaction: the upserts into the minute of the
store's clock (``chronos_now()``) sent in one pipeline (``executemany``),
then the delete of minutes older than ``keep``. A read is one statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import trio

from ...records._aggregates import KindCounts, MinuteCounts, check_add
from .._roles import AggregatesRole
from .._sql_aggregates import first_minute, minute_counts, read, rows_of, trim, upsert
from ._base import PostgresPart

_MINUTE = "(floor(chronos_now() / 60) * 60)::bigint"
_UPSERT = upsert("%s", _MINUTE)
_TRIM = trim("(floor((chronos_now() - %s) / 60) * 60 - 60)::bigint")


def add(conn: psycopg.Connection[Any], counts: Sequence[KindCounts], keep: float) -> None:
    with conn.cursor() as cur:
        cur.executemany(_UPSERT, rows_of(counts))
    conn.execute(_TRIM, (keep,))


class AggregatesPart(PostgresPart, AggregatesRole):
    async def add_aggregates(self, counts: Sequence[KindCounts], *, keep: float) -> None:
        keep = check_add(counts, keep)
        if not counts:
            await trio.lowlevel.checkpoint()
            return
        await self._db.run(lambda conn: add(conn, counts, keep), what="add_aggregates")

    async def aggregates(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        names = list(dict.fromkeys(queues))
        if not names:
            await trio.lowlevel.checkpoint()
            return []
        sql = read("%s", len(names))
        params = (*names, first_minute(since))
        return await self._db.run(
            lambda conn: minute_counts(conn.execute(sql, params).fetchall(), names),
            what="aggregates",
        )
