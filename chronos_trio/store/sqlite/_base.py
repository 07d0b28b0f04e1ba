"""What every part of the SQLite store shares: its :class:`Database` (and
through it the store's clock and wake-ups)."""

from __future__ import annotations

import trio

from .._roles import StoreRole
from ._database import Database


class SqlitePart(StoreRole):
    """The base of each part (role mixin) of :class:`SqliteStore`."""

    _db: Database

    async def now(self) -> float:
        await trio.lowlevel.checkpoint()
        return self._db.now()
