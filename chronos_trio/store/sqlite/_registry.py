"""The SQLite store's worker registry (a part of SqliteStore:
RegistryRole), on the ``workers`` table, as on PostgreSQL.

Each entry is the registry's stored text (``records._workers``), with its
last beat and expiry on the store's clock. A beat is one write
transaction: it drops a few lapsed entries of other workers (at most
:data:`PURGE_PER_BEAT`, so stale entries never pile up and a beat's work
stays bounded) and upserts its own; it makes no work, so it wakes no
waiter. A listing reads the unexpired entries only (one snapshot), so a
lapsed one is never listed, removed or not; one that cannot be decoded is
skipped with the same warning as on every store.
"""

from __future__ import annotations

import sqlite3

from ...records._workers import WorkerInfo, encode_worker, readable_workers
from .._roles import RegistryRole
from ._base import SqlitePart

#: Most lapsed entries of other workers one beat removes.
PURGE_PER_BEAT = 16


def _beat(conn: sqlite3.Connection, worker_id: str, data: bytes, ttl: float, now: float) -> None:
    conn.execute(
        "DELETE FROM workers WHERE id IN"
        " (SELECT id FROM workers WHERE expires_at <= ? AND id <> ? LIMIT ?)",
        (now, worker_id, PURGE_PER_BEAT),
    )
    conn.execute(
        "INSERT INTO workers (id, data, last_beat, expires_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET data = excluded.data,"
        " last_beat = excluded.last_beat, expires_at = excluded.expires_at",
        (worker_id, data, now, now + ttl),
    )


def _live(conn: sqlite3.Connection, now: float) -> list[tuple[str, bytes, float]]:
    return [
        (worker_id, bytes(data), float(last_beat))
        for worker_id, data, last_beat in conn.execute(
            "SELECT id, data, last_beat FROM workers WHERE expires_at > ?", (now,)
        )
    ]


class RegistryPart(SqlitePart, RegistryRole):
    async def beat_worker(self, worker: WorkerInfo, ttl: float) -> None:
        """See :meth:`RegistryRole.beat_worker`. Raises ValueError for a ttl
        that is not > 0, StoreError when the file cannot be written."""
        if not ttl > 0:
            raise ValueError(f"a worker's registry ttl must be > 0 seconds, got {ttl!r}")
        data = encode_worker(worker, ttl)
        db = self._db
        await db.write(
            lambda conn: _beat(conn, worker.worker_id, data, ttl, db.now()),
            what="beat_worker",
            wake=False,
        )

    async def unregister_worker(self, worker_id: str) -> None:
        await self._db.write(
            lambda conn: conn.execute("DELETE FROM workers WHERE id = ?", (worker_id,)),
            what="unregister_worker",
            wake=False,
        )

    async def workers(self) -> list[WorkerInfo]:
        db = self._db
        return readable_workers(await db.read(lambda conn: _live(conn, db.now()), what="workers"))
