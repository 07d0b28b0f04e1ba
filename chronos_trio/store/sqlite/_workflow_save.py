"""The save of a workflow record on SQLite, for the store's own writer
and for a caller's connection (``enqueue_workflow(..., connection=...)``:
the record is written in the caller's transaction, with the flow's first
jobs). No Trio: the producers' side imports it."""

from __future__ import annotations

import sqlite3

#: Lapsed records a save removes, at most (the rest wait for later saves).
FORGET = 16

_SAVE = """
INSERT INTO workflows (id, tree, first_kind, created, expires_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE
    SET tree = excluded.tree, first_kind = excluded.first_kind, created = excluded.created,
        expires_at = excluded.expires_at, cancelled_at = NULL
    WHERE workflows.expires_at <= ?
RETURNING 1
"""


def save(
    conn: sqlite3.Connection, workflow_id: str, tree: str, kind: str, ttl: float, now: float
) -> bool:
    conn.execute(
        "DELETE FROM workflows WHERE id IN"
        " (SELECT id FROM workflows WHERE expires_at <= ? LIMIT ?)",
        (now, FORGET),
    )
    row = conn.execute(_SAVE, (workflow_id, tree, kind, now, now + ttl, now)).fetchone()
    return row is not None
