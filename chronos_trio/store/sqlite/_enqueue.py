"""Enqueue on SQLite (STUB: to be written; see the brief)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...records._jobs import EnqueueResult, NewJob


def enqueue(conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float) -> list[EnqueueResult]:
    """Store ``jobs`` in ``conn``'s write transaction (see PostgreSQL's
    chronos_enqueue for the rules); one EnqueueResult per job, in order."""
    raise NotImplementedError
