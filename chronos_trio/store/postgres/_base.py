"""What every part of the PostgreSQL store shares: its :class:`Database`
and its clock (the server's)."""

from __future__ import annotations

from typing import Any

import psycopg

from .._roles import StoreRole
from ._database import Database

#: The server's clock in epoch seconds (the store's clock).
NOW_SQL = "chronos_now()"


def now_of(conn: psycopg.Connection[Any]) -> float:
    """The store's clock, read on ``conn`` (inside an operation's transaction)."""
    row = conn.execute("SELECT chronos_now()").fetchone()
    assert row is not None
    return float(row[0])


def notify(conn: psycopg.Connection[Any], channel: str, payload: str = "") -> None:
    """Queue one notification, sent by PostgreSQL at commit (and dropped by a
    rollback); repeats of one (channel, payload) in a transaction are
    folded into one by the server."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


class PostgresPart(StoreRole):
    """The base of each part (role mixin) of :class:`PostgresStore`."""

    _db: Database

    async def now(self) -> float:
        return await self._db.run(now_of, what="now")
