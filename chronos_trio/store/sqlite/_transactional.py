"""The SQLite store's transactional part (STUB: to be written; see the brief)."""

from __future__ import annotations

from ._base import SqlitePart


class TransactionalPart(SqlitePart):
    pass
