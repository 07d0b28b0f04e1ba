"""The PostgreSQL store's inspection, administration, retention and
versioned queue routing (a part of PostgresStore: AdminRole and
TopologyRole).

Each method is one transaction (``Database.run``) of a few statements,
never one per job; their semantics are the MemoryStore's. The statements
live in ``_inspect`` (reads), ``_operate`` (changes), ``_trim``
(retention) and ``_topology`` (versions).

Records cannot be damaged the ways a Redis hash can (typed, checked
columns; a row is written whole), so no admin operation sets one aside:
every ``aside`` is empty. A row whose ``control`` or ``headers`` text does
not decode is shown with its ``damage`` (see ``_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...records._jobs import Job, JobState
from .._roles import (
    AbortResult,
    AdminRole,
    CountResult,
    LimitUsage,
    QueueStats,
    QueueTopology,
    TopologyRole,
)
from . import _inspect, _operate, _topology, _trim
from ._base import PostgresPart


class AdminPart(PostgresPart, AdminRole, TopologyRole):
    # -- reads ---------------------------------------------------------------------
    async def queues(self) -> list[str]:
        return await self._db.run(_inspect.known_queues, what="queues")

    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        return await self._db.run(lambda conn: _inspect.stats(conn, queues), what="stats")

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        return await self._db.run(
            lambda conn: _inspect.get_job(conn, job_id, queue), what="get_job"
        )

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        return await self._db.run(
            lambda conn: _inspect.list_jobs(conn, queue, state, offset, limit), what="list_jobs"
        )

    async def limit_usage(self, queue: str) -> list[LimitUsage]:
        return await self._db.run(
            lambda conn: _inspect.limit_usage(conn, queue), what="limit_usage"
        )

    # -- changes -------------------------------------------------------------------
    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        schema = self._db.schema
        return await self._db.run(
            lambda conn: _operate.run_now(conn, schema, job_id, queue), what="run_now"
        )

    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        schema = self._db.schema
        return await self._db.run(
            lambda conn: _operate.delete_job(conn, schema, job_id, queue), what="delete_job"
        )

    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        schema = self._db.schema
        return await self._db.run(
            lambda conn: _operate.abort(conn, schema, job_id, queue, reason), what="abort"
        )

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        schema = self._db.schema
        return await self._db.run(
            lambda conn: _operate.requeue_dead(conn, schema, queue, limit), what="requeue_dead"
        )

    async def purge_queue(self, queue: str, *, limit: int) -> CountResult:
        schema = self._db.schema
        return await self._db.run(
            lambda conn: _operate.purge_queue(conn, schema, queue, limit), what="purge_queue"
        )

    async def set_paused(self, queue: str, paused: bool) -> None:
        schema = self._db.schema
        await self._db.run(
            lambda conn: _operate.set_paused(conn, schema, queue, paused), what="set_paused"
        )

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        return await self._db.run(
            lambda conn: _trim.trim(
                conn,
                queues,
                dead_max_age=dead_max_age,
                dead_max_count=dead_max_count,
                keep_succeeded=keep_succeeded,
            ),
            what="trim",
        )

    # -- topology ------------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        return await self._db.run(lambda conn: _topology.topology(conn, queue), what="topology")

    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        """See :meth:`TopologyRole.promote_queue_version`. Other processes
        route new jobs to the new version from their next enqueue (each
        reads the active version in its own transaction)."""
        return await self._db.run(
            lambda conn: _topology.promote(conn, queue, version, partitions),
            what="promote_queue_version",
        )

    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        return await self._db.run(
            lambda conn: _topology.complete_draining(conn, queue, version),
            what="complete_draining_version",
        )
