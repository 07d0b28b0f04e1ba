"""The SQLite store's check part (STUB: to be written; see the brief)."""

from __future__ import annotations

from ._base import SqlitePart


class CheckPart(SqlitePart):
    pass
