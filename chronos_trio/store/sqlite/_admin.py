"""The SQLite store's inspection, administration, retention and versioned
queue routing (a part of SqliteStore: AdminRole and TopologyRole), with
the PostgreSQL store's answers.

Reads are one snapshot each (``Database.read``), changes one write
transaction each (``Database.write``: the file's write lock is held from
its BEGIN, so what a change reads and what it writes are one step, across
processes). Changes that can make work or finish a job (run now, requeue
the dead, resume, abort, delete) wake this process's waiters at commit;
other processes see them within their ``wake_interval``. The statements
live in ``_inspect`` (reads), ``_operate`` (changes), ``_trim``
(retention) and ``_topology`` (versions); the store's clock is read inside
each transaction.

Rows are typed and written whole (STRICT tables), so no admin operation
sets a record aside: every ``aside`` is empty. A row whose ``control`` or
``headers`` text does not decode is shown with its ``damage`` (see
``store._rows``). A due scheduled or retry_wait job is shown ready (this
store runs no promoter). Every method raises StoreError when the file
cannot be read or written (a change is then rolled back whole).
"""

from __future__ import annotations

import sqlite3
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
from ._base import SqlitePart


class AdminPart(SqlitePart, AdminRole, TopologyRole):
    # -- reads ---------------------------------------------------------------------
    async def queues(self) -> list[str]:
        return await self._db.read(_inspect.known_queues, what="queues")

    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        db = self._db
        return await db.read(lambda conn: _inspect.stats(conn, queues, db.now()), what="stats")

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        db = self._db
        return await db.read(
            lambda conn: _inspect.get_job(conn, job_id, queue, db.now()), what="get_job"
        )

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        db = self._db
        return await db.read(
            lambda conn: _inspect.list_jobs(conn, queue, state, offset, limit, db.now()),
            what="list_jobs",
        )

    async def limit_usage(self, queue: str) -> list[LimitUsage]:
        db = self._db
        return await db.read(
            lambda conn: _inspect.limit_usage(conn, queue, db.now()), what="limit_usage"
        )

    # -- changes -------------------------------------------------------------------
    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        db = self._db
        return await db.write(
            lambda conn: _operate.run_now(conn, job_id, queue, db.now()), what="run_now"
        )

    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        """See :meth:`AdminRole.delete_job`; the job's result waiters look
        again at commit (they find it gone)."""
        db = self._db
        return await db.write(
            lambda conn: _operate.delete_job(conn, job_id, queue, db.now()), what="delete_job"
        )

    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        db = self._db
        return await db.write(
            lambda conn: _operate.abort(conn, job_id, queue, reason, db.now()), what="abort"
        )

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        db = self._db
        return await db.write(
            lambda conn: _operate.requeue_dead(conn, queue, limit, db.now()),
            what="requeue_dead",
        )

    async def purge_queue(self, queue: str, *, limit: int) -> CountResult:
        """See :meth:`AdminRole.purge_queue`: one write transaction; the
        jobs' result waiters look again at commit (they find them gone)."""
        db = self._db
        return await db.write(
            lambda conn: _operate.purge_queue(conn, queue, limit, db.now()), what="purge_queue"
        )

    async def set_paused(self, queue: str, paused: bool) -> None:
        """See :meth:`AdminRole.set_paused`: this store's claims obey from the
        commit, every process's (they read the ``queues`` row in each claim's
        transaction). A resume wakes idle workers (this process's at once,
        others' within ``wake_interval``)."""
        await self._db.write(
            lambda conn: _operate.set_paused(conn, queue, paused),
            what="set_paused",
            wake=not paused,
        )

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        db = self._db
        return await db.write(
            lambda conn: _trim.trim(
                conn,
                queues,
                db.now(),
                dead_max_age=dead_max_age,
                dead_max_count=dead_max_count,
                keep_succeeded=keep_succeeded,
            ),
            what="trim",
            wake=False,
        )

    # -- topology ------------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        """See :meth:`TopologyRole.topology`: a read, and a write only the
        first time (to register an unknown queue)."""
        db = self._db
        known, found = await db.read(
            lambda conn: (_topology.is_known(conn, queue), _topology.topology(conn, queue)),
            what="topology",
        )
        if known:
            return found

        def register(conn: sqlite3.Connection) -> QueueTopology:
            _topology.register(conn, queue)
            return _topology.topology(conn, queue)

        return await db.write(register, what="topology", wake=False)

    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        """See :meth:`TopologyRole.promote_queue_version`. Every process routes
        new jobs to the new version from its next enqueue (each reads the
        active version in its own write transaction)."""
        return await self._db.write(
            lambda conn: _topology.promote(conn, queue, version, partitions),
            what="promote_queue_version",
            wake=False,
        )

    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        return await self._db.write(
            lambda conn: _topology.complete_draining(conn, queue, version),
            what="complete_draining_version",
            wake=False,
        )
