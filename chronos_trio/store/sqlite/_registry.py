"""The SQLite store's registry part (STUB: to be written; see the brief)."""

from __future__ import annotations

from ._base import SqlitePart


class RegistryPart(SqlitePart):
    pass
