"""The SQLite store's leader part (STUB: to be written; see the brief)."""

from __future__ import annotations

from ._base import SqlitePart


class LeaderPart(SqlitePart):
    pass
