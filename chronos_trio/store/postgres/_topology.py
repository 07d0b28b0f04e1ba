"""Versioned queue routing on PostgreSQL (table ``queue_versions``).

A queue without rows there has the default topology: version 1, one
partition, active. Promoting a version writes the rows (the old active one
draining, the new one active); completing a draining version deletes its
row. A partition is a label here (the job ID's CRC32 modulo the version's
partition count, as on every store), kept in the job's ``version`` and
``part`` columns: a claim takes a queue's jobs in one order whatever their
version, so a draining version is consumed with no extra work.

Topology changes lock the queue's ``queues`` row (``FOR UPDATE``), so two
of them on one queue run one after the other. ``chronos_enqueue`` stores a
created job at its queue's active version and its ID's partition (a read
of ``queue_versions`` only when a queue of the batch was ever promoted),
without that lock: a promotion that commits meanwhile leaves its jobs in
the old version, which is still consumed, as the contract allows. (A
completion racing such an enqueue can leave its job naming the removed
version: the job is still leased, as every job of its queue is.) A
transactional enqueue on a caller's connection is placed the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from .._roles import QueueTopology, QueueVersion, VersionState
from .._versions import DEFAULT_VERSION, check_completion, check_drained, check_promotion


def active_routes(conn: psycopg.Connection[Any], queues: Iterable[str]) -> dict[str, QueueVersion]:
    """The active version of each of ``queues`` (the default for a queue
    never promoted), in one statement: where an enqueue routes new jobs."""
    names = list(dict.fromkeys(queues))
    found = {name: DEFAULT_VERSION for name in names}
    if names:
        for queue, version, partitions in conn.execute(
            "SELECT queue, version, partitions FROM queue_versions"
            " WHERE queue = ANY(%s) AND state = 'active'",
            (names,),
        ):
            found[queue] = QueueVersion(version, partitions, VersionState.ACTIVE)
    return found


def read_versions(conn: psycopg.Connection[Any], queue: str) -> list[QueueVersion]:
    """``queue``'s versions, oldest first (the default when none is stored)."""
    rows = conn.execute(
        "SELECT version, partitions, state FROM queue_versions WHERE queue = %s ORDER BY version",
        (queue,),
    ).fetchall()
    if not rows:
        return [DEFAULT_VERSION]
    return [QueueVersion(v, p, VersionState(s)) for v, p, s in rows]


def partition_counts(conn: psycopg.Connection[Any], queues: list[str]) -> dict[str, int]:
    """How many partitions each known queue of ``queues`` has over all its
    versions (unknown queues are left out)."""
    out = {
        name: 1
        for (name,) in conn.execute("SELECT name FROM queues WHERE name = ANY(%s)", (queues,))
    }
    for queue, total in conn.execute(
        "SELECT queue, sum(partitions) FROM queue_versions WHERE queue = ANY(%s) GROUP BY queue",
        (queues,),
    ):
        out[queue] = int(total)
    return out


def register(conn: psycopg.Connection[Any], queue: str) -> None:
    conn.execute("INSERT INTO queues (name) VALUES (%s) ON CONFLICT DO NOTHING", (queue,))


def _lock(conn: psycopg.Connection[Any], queue: str) -> None:
    """Register ``queue`` and hold its row until the transaction ends."""
    register(conn, queue)
    conn.execute("SELECT 1 FROM queues WHERE name = %s FOR UPDATE", (queue,))


def topology(conn: psycopg.Connection[Any], queue: str) -> QueueTopology:
    register(conn, queue)
    return QueueTopology(queue, tuple(read_versions(conn, queue)))


def promote(
    conn: psycopg.Connection[Any], queue: str, version: int, partitions: int
) -> QueueTopology:
    """See :meth:`TopologyRole.promote_queue_version` (one transaction)."""
    _lock(conn, queue)
    versions = read_versions(conn, queue)
    check_promotion(queue, versions, version, partitions)
    conn.execute(
        "INSERT INTO queue_versions (queue, version, partitions, state)"
        " SELECT %s, v, p, 'draining' FROM unnest(%s::int[], %s::int[]) AS t(v, p)"
        " ON CONFLICT (queue, version) DO UPDATE SET state = 'draining'",
        (
            queue,
            [v.version for v in versions],
            [v.partitions for v in versions],
        ),
    )
    conn.execute(
        "INSERT INTO queue_versions (queue, version, partitions, state)"
        " VALUES (%s, %s, %s, 'active')",
        (queue, version, partitions),
    )
    return QueueTopology(queue, tuple(read_versions(conn, queue)))


def complete_draining(conn: psycopg.Connection[Any], queue: str, version: int) -> QueueTopology:
    """See :meth:`TopologyRole.complete_draining_version` (one transaction)."""
    _lock(conn, queue)
    check_completion(queue, read_versions(conn, queue), version)
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE queue = %s AND version = %s", (queue, version)
    ).fetchone()
    check_drained(queue, version, int(row[0]) if row else 0)
    conn.execute("DELETE FROM queue_versions WHERE queue = %s AND version = %s", (queue, version))
    return QueueTopology(queue, tuple(read_versions(conn, queue)))
