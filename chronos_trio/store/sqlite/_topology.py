"""Versioned queue routing on SQLite (:class:`TopologyRole`), as on
PostgreSQL: each queue's versions are rows of ``queue_versions``
(version, partition count, state); a queue without rows has the default
topology (version 1, one partition, active). Promoting stores every
existing version as draining and the new one active; completing a draining
version deletes its row. A partition is a label here (the job ID's CRC32
modulo the version's partition count, as on every store), kept in the
job's ``version`` and ``part`` columns: a claim takes a queue's jobs in
one order whatever their version, so a draining version is consumed with
no extra work.

A topology change is one write transaction, which holds the file's write
lock from its BEGIN: two changes of one queue, in any processes, run one
after the other, and an enqueue (also a write) sees the active version as
of its own transaction, so no job is ever placed in a version that was
removed. The rules are ``store._versions``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from .._roles import QueueTopology, QueueVersion, VersionState
from .._versions import DEFAULT_VERSION, check_completion, check_drained, check_promotion
from ._inspect import IN_TEXTS, texts


def active_routes(conn: sqlite3.Connection, queues: Iterable[str]) -> dict[str, QueueVersion]:
    """The active version of each of ``queues`` (the default for a queue
    never promoted), in one statement: where an enqueue routes new jobs."""
    names = list(dict.fromkeys(queues))
    found = dict.fromkeys(names, DEFAULT_VERSION)
    if names:
        for queue, version, partitions in conn.execute(
            "SELECT queue, version, partitions FROM queue_versions"
            f" WHERE queue {IN_TEXTS} AND state = 'active'",
            (texts(names),),
        ):
            found[queue] = QueueVersion(version, partitions, VersionState.ACTIVE)
    return found


def read_versions(conn: sqlite3.Connection, queue: str) -> list[QueueVersion]:
    """``queue``'s versions, oldest first (the default when none is stored)."""
    rows = conn.execute(
        "SELECT version, partitions, state FROM queue_versions WHERE queue = ? ORDER BY version",
        (queue,),
    ).fetchall()
    if not rows:
        return [DEFAULT_VERSION]
    return [QueueVersion(v, p, VersionState(s)) for v, p, s in rows]


def partition_counts(conn: sqlite3.Connection, queues: list[str]) -> dict[str, int]:
    """How many partitions each known queue of ``queues`` has over all its
    versions (unknown queues are left out)."""
    listed = texts(queues)
    out = {
        name: 1
        for (name,) in conn.execute(f"SELECT name FROM queues WHERE name {IN_TEXTS}", (listed,))
    }
    for queue, total in conn.execute(
        f"SELECT queue, sum(partitions) FROM queue_versions WHERE queue {IN_TEXTS} GROUP BY queue",
        (listed,),
    ):
        out[queue] = int(total)
    return out


def is_known(conn: sqlite3.Connection, queue: str) -> bool:
    """Whether ``queue`` is registered (known)."""
    return conn.execute("SELECT 1 FROM queues WHERE name = ?", (queue,)).fetchone() is not None


def register(conn: sqlite3.Connection, queue: str) -> None:
    """Make ``queue`` known (nothing if it is)."""
    conn.execute("INSERT INTO queues (name) VALUES (?) ON CONFLICT DO NOTHING", (queue,))


def topology(conn: sqlite3.Connection, queue: str) -> QueueTopology:
    """``queue``'s topology as stored (registering it takes a write: see
    :func:`register`)."""
    return QueueTopology(queue, tuple(read_versions(conn, queue)))


def promote(conn: sqlite3.Connection, queue: str, version: int, partitions: int) -> QueueTopology:
    """See :meth:`TopologyRole.promote_queue_version` (in one write
    transaction). Raises TopologyError, changing nothing."""
    register(conn, queue)
    versions = read_versions(conn, queue)
    check_promotion(queue, versions, version, partitions)
    conn.executemany(
        "INSERT INTO queue_versions (queue, version, partitions, state)"
        " VALUES (?, ?, ?, 'draining')"
        " ON CONFLICT (queue, version) DO UPDATE SET state = 'draining'",
        [(queue, v.version, v.partitions) for v in versions],
    )
    conn.execute(
        "INSERT INTO queue_versions (queue, version, partitions, state) VALUES (?, ?, ?, 'active')",
        (queue, version, partitions),
    )
    return topology(conn, queue)


def complete_draining(conn: sqlite3.Connection, queue: str, version: int) -> QueueTopology:
    """See :meth:`TopologyRole.complete_draining_version` (in one write
    transaction). Raises TopologyError, changing nothing."""
    register(conn, queue)
    check_completion(queue, read_versions(conn, queue), version)
    (left,) = conn.execute(
        "SELECT count(*) FROM jobs WHERE queue = ? AND version = ?", (queue, version)
    ).fetchone()
    check_drained(queue, version, int(left))
    conn.execute("DELETE FROM queue_versions WHERE queue = ? AND version = ?", (queue, version))
    return topology(conn, queue)
