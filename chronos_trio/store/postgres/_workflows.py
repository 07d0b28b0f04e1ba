"""Workflow records on PostgreSQL: the :class:`WorkflowPart` of
:class:`~.store.PostgresStore` (table ``workflows``, migration 5). Each
operation is one statement (a save also forgets a few lapsed records);
times are the server's (``chronos_now()``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import trio

from ...records._flow_control import WorkflowRecord
from ...records._jobs import EnqueueResult, NewJob
from .._roles import WorkflowRole
from ._base import PostgresPart
from ._enqueue import enqueue_params, enqueue_query, enqueue_results
from ._workflow_save import save_query

#: Lapsed records a save removes, at most (the rest wait for later saves).
FORGET = 16

_FORGET = """
DELETE FROM workflows WHERE id IN (
    SELECT id FROM workflows WHERE expires_at <= chronos_now() LIMIT %s FOR UPDATE SKIP LOCKED
)
"""


_SAVE = save_query()

_READ = """
SELECT tree, created, first_kind, cancelled_at FROM workflows
WHERE id = %s AND expires_at > chronos_now()
"""

_CANCEL = """
UPDATE workflows SET cancelled_at = coalesce(cancelled_at, chronos_now())
WHERE id = %s AND expires_at > chronos_now()
RETURNING tree, created, first_kind, cancelled_at
"""

_KEEP = """
UPDATE workflows w SET expires_at = greatest(w.expires_at, chronos_now() + k.ttl)
FROM unnest(%s::text[], %s::float8[]) AS k (id, ttl)
WHERE w.id = k.id AND w.expires_at > chronos_now()
RETURNING w.id, w.expires_at - chronos_now()
"""

_CANCELLED = """
SELECT id FROM workflows
WHERE id = ANY (%s::text[]) AND cancelled_at IS NOT NULL AND expires_at > chronos_now()
"""


def _record(workflow_id: str, row: Any) -> WorkflowRecord | None:
    if row is None:
        return None
    tree, created, kind, cancelled = row
    return WorkflowRecord(
        workflow_id, tree, float(created), kind, None if cancelled is None else float(cancelled)
    )


def save(conn: psycopg.Connection[Any], workflow_id: str, tree: str, kind: str, ttl: float) -> bool:
    conn.execute(_FORGET, (FORGET,))
    return conn.execute(_SAVE, (workflow_id, tree, kind, ttl)).fetchone() is not None


class WorkflowPart(PostgresPart, WorkflowRole):
    async def save_workflow(self, workflow_id: str, tree: str, first_kind: str, ttl: float) -> bool:
        return await self._db.run(
            lambda conn: save(conn, workflow_id, tree, first_kind, ttl), what="save_workflow"
        )

    async def start_workflow(
        self,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """The record's save and the jobs' enqueue in one transaction (one
        thread hop): both commit, or neither."""
        query = enqueue_query(self._db.schema, jobs)
        params = enqueue_params(jobs) if jobs else None

        def work(conn: psycopg.Connection[Any]) -> list[EnqueueResult]:
            save(conn, workflow_id, tree, first_kind, ttl)
            if params is None:
                return []
            return enqueue_results(conn.execute(query, params).fetchall(), jobs)

        return await self._db.run(work, what="start_workflow")

    async def workflow_record(self, workflow_id: str) -> WorkflowRecord | None:
        return await self._db.run(
            lambda conn: _record(workflow_id, conn.execute(_READ, (workflow_id,)).fetchone()),
            what="workflow_record",
        )

    async def cancel_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        return await self._db.run(
            lambda conn: _record(workflow_id, conn.execute(_CANCEL, (workflow_id,)).fetchone()),
            what="cancel_workflow",
        )

    async def cancelled(self, workflow_ids: Sequence[str]) -> set[str]:
        ids = sorted(set(workflow_ids))
        if not ids:
            await trio.lowlevel.checkpoint()
            return set()
        rows = await self._db.run(
            lambda conn: conn.execute(_CANCELLED, (ids,)).fetchall(), what="cancelled"
        )
        return {row[0] for row in rows}

    async def keep_workflows(self, keeps: Mapping[str, float]) -> dict[str, float]:
        ids = sorted(keeps)
        if not ids:
            await trio.lowlevel.checkpoint()
            return {}
        ttls = [float(keeps[wid]) for wid in ids]
        rows = await self._db.run(
            lambda conn: conn.execute(_KEEP, (ids, ttls)).fetchall(), what="keep_workflows"
        )
        return {row[0]: float(row[1]) for row in rows}
