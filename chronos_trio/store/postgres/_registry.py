"""The PostgreSQL store's worker registry (a part of PostgresStore:
RegistryRole), on the ``workers`` table.

Each entry is the registry's stored text (``records._workers``), with its
last beat and expiry on the server's clock. A beat is one transaction: it
drops a few lapsed entries of other workers (at most :data:`PURGE_PER_BEAT`,
so stale entries never pile up and a beat's work stays bounded) and
upserts its own. A listing reads the unexpired entries only, so a lapsed
one is never listed, removed or not; one that cannot be decoded is skipped
with the same warning as on every store.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...records._workers import WorkerInfo, encode_worker, readable_workers
from .._roles import RegistryRole
from ._base import PostgresPart, now_of

#: Most lapsed entries of other workers one beat removes.
PURGE_PER_BEAT = 16


def _beat(conn: psycopg.Connection[Any], worker_id: str, data: bytes, ttl: float) -> None:
    now = now_of(conn)
    conn.execute(
        "DELETE FROM workers WHERE id IN (SELECT id FROM workers WHERE expires_at <= %s"
        " LIMIT %s FOR UPDATE SKIP LOCKED)",
        (now, PURGE_PER_BEAT),
    )
    conn.execute(
        "INSERT INTO workers (id, data, last_beat, expires_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data,"
        " last_beat = EXCLUDED.last_beat, expires_at = EXCLUDED.expires_at",
        (worker_id, data, now, now + ttl),
    )


def _live(conn: psycopg.Connection[Any]) -> list[tuple[str, bytes, float]]:
    return [
        (worker_id, bytes(data), last_beat)
        for worker_id, data, last_beat in conn.execute(
            "SELECT id, data, last_beat FROM workers WHERE expires_at > chronos_now()"
        )
    ]


class RegistryPart(PostgresPart, RegistryRole):
    async def beat_worker(self, worker: WorkerInfo, ttl: float) -> None:
        if not ttl > 0:
            raise ValueError(f"a worker's registry ttl must be > 0 seconds, got {ttl!r}")
        data = encode_worker(worker, ttl)
        await self._db.run(
            lambda conn: _beat(conn, worker.worker_id, data, ttl), what="beat_worker"
        )

    async def unregister_worker(self, worker_id: str) -> None:
        await self._db.run(
            lambda conn: conn.execute("DELETE FROM workers WHERE id = %s", (worker_id,)),
            what="unregister_worker",
        )

    async def workers(self) -> list[WorkerInfo]:
        return readable_workers(await self._db.run(_live, what="workers"))
