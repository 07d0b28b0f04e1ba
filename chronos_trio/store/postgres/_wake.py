"""Waking idle workers: one notification on the store's ready channel.

(A minimal version for the admin part; the worker part's replaces it.)"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg


def ready_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of ``schema``'s wake-ups (channel names are
    database-wide: the schema is in it)."""
    return f"chronos_{schema}_ready"


def wake_queues(conn: psycopg.Connection[Any], schema: str, queues: Iterable[str]) -> None:
    """Wake the idle workers of ``queues`` when the transaction commits."""
    if list(queues):
        conn.execute("SELECT pg_notify(%s, '')", (ready_channel(schema),))


def finished_channel(schema: str) -> str:
    """The channel of ``schema``'s finished jobs (result waiters)."""
    return f"chronos_{schema}_done"


def wake_finished(conn: psycopg.Connection[Any], schema: str, job_ids: Iterable[str]) -> None:
    """Wake the result waiters of ``job_ids`` when the transaction commits."""
    for job_id in job_ids:
        conn.execute("SELECT pg_notify(%s, %s)", (finished_channel(schema), job_id))
