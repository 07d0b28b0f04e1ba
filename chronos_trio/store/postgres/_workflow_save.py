"""The save of a workflow record on PostgreSQL as one statement, for the
store's own connections and for a caller's (``enqueue_workflow(...,
connection=...)``: the record is written in the caller's transaction, with
the flow's first jobs). No Trio: the producers' side imports it."""

from __future__ import annotations

from psycopg import sql


def save_query(schema: str = "") -> str:
    """The save of one record (parameters: ID, tree, first kind, ttl; a row
    when saved now), its names qualified by ``schema`` when given (a
    caller's connection, whose ``search_path`` is its own)."""
    at = f"{sql.Identifier(schema).as_string(None)}." if schema else ""
    return f"""
INSERT INTO {at}workflows AS w (id, tree, first_kind, created, expires_at)
VALUES (%s, %s, %s, {at}chronos_now(), {at}chronos_now() + %s)
ON CONFLICT (id) DO UPDATE
    SET tree = EXCLUDED.tree, first_kind = EXCLUDED.first_kind, created = EXCLUDED.created,
        expires_at = EXCLUDED.expires_at, cancelled_at = NULL
    WHERE w.expires_at <= {at}chronos_now()
RETURNING 1
"""
