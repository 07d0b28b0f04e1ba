"""The SQLite store's admin part (STUB: to be written; see the brief)."""

from __future__ import annotations

from ._base import SqlitePart


class AdminPart(SqlitePart):
    pass
