"""Wake-ups by NOTIFY: what every part of the PostgreSQL store (and
transactional enqueue) sends when jobs may have become ready or finished.

Each schema has ONE channel (``"schema".chronos_channel()``, migration
0002: channel names are database-wide, so it includes the schema); the
payload says what happened:

* ``'r' || queue``: a job of ``queue`` may be ready (enqueued, released,
  recovered, run now, requeued, resumed; or due earlier than waiters knew;
  or a concurrency slot came back);
* ``'d' || job_id``: a job with result waiters finished or went;
* ``'c'``: the workflow outbox was filled.

Notifications are sent by PostgreSQL at commit (dropped by a rollback), and
repeats of one (channel, payload) in a transaction are folded into one, so
each function here sends at most one per queue or job per transaction,
never one per row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

#: Payload prefixes (see the module docstring).
READY = "r"
DONE = "d"
OUTBOX = "c"


def _notify_all(
    conn: psycopg.Connection[Any], schema: str, prefix: str, names: Iterable[str]
) -> None:
    distinct = sorted(set(names))
    if not distinct:
        return
    conn.execute(
        sql.SQL(
            "SELECT pg_notify({}.chronos_channel(), %s || n) FROM unnest(%s::text[]) AS n"
        ).format(sql.Identifier(schema)),
        (prefix, distinct),
    )


def wake_queues(conn: psycopg.Connection[Any], schema: str, queues: Iterable[str]) -> None:
    """Wake the store's idle workers of ``queues`` (sent at commit): call it
    in the transaction that made jobs of them ready (run now, requeue,
    resume). One statement, one notification per distinct queue."""
    _notify_all(conn, schema, READY, queues)


def wake_waiters(conn: psycopg.Connection[Any], schema: str, job_ids: Iterable[str]) -> None:
    """Wake the result waiters of ``job_ids`` (sent at commit): call it in
    the transaction that finished or deleted them (an abort of a waiting
    job, a delete). Waiters also look again by themselves every
    ``idle_poll`` seconds, so a missing call delays them, never loses them."""
    _notify_all(conn, schema, DONE, job_ids)


def channel_of(conn: psycopg.Connection[Any], schema: str) -> str:
    """The schema's channel name (to LISTEN on)."""
    row = conn.execute(
        sql.SQL("SELECT {}.chronos_channel()").format(sql.Identifier(schema))
    ).fetchone()
    assert row is not None
    return str(row[0])
