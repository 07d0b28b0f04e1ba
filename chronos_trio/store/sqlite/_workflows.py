"""Workflow records on SQLite: the :class:`WorkflowPart` of
:class:`~.store.SqliteStore` (table ``workflows``, schema version 5).
Writes are one ``BEGIN IMMEDIATE`` transaction each (a save also forgets a
few lapsed records), reads one statement on a reader; times are the
store's clock."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from ...records._flow_control import WorkflowRecord
from ...records._jobs import EnqueueResult, NewJob
from .._roles import WorkflowRole
from . import _enqueue
from ._base import SqlitePart
from ._workflow_save import save

_COLUMNS = "tree, created, first_kind, cancelled_at"


def _record(workflow_id: str, row: Any) -> WorkflowRecord | None:
    if row is None:
        return None
    tree, created, kind, cancelled = row
    return WorkflowRecord(
        workflow_id, tree, float(created), kind, None if cancelled is None else float(cancelled)
    )


def read(conn: sqlite3.Connection, workflow_id: str, now: float) -> WorkflowRecord | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM workflows WHERE id = ? AND expires_at > ?", (workflow_id, now)
    ).fetchone()
    return _record(workflow_id, row)


def cancel(conn: sqlite3.Connection, workflow_id: str, now: float) -> WorkflowRecord | None:
    row = conn.execute(
        "UPDATE workflows SET cancelled_at = coalesce(cancelled_at, ?)"
        f" WHERE id = ? AND expires_at > ? RETURNING {_COLUMNS}",
        (now, workflow_id, now),
    ).fetchone()
    return _record(workflow_id, row)


def keep(conn: sqlite3.Connection, keeps: Mapping[str, float], now: float) -> dict[str, float]:
    """Each live record of ``keeps`` kept at least its seconds from ``now``;
    how long each found lasts then."""
    rows = conn.execute(
        "UPDATE workflows SET expires_at = max(expires_at, ? + k.value)"
        " FROM json_each(?) AS k WHERE workflows.id = k.key AND expires_at > ?"
        " RETURNING id, expires_at",
        (now, json.dumps(dict(keeps)), now),
    ).fetchall()
    return {row[0]: float(row[1]) - now for row in rows}


def cancelled(conn: sqlite3.Connection, workflow_ids: Sequence[str], now: float) -> set[str]:
    rows = conn.execute(
        "SELECT id FROM workflows WHERE id IN (SELECT value FROM json_each(?))"
        " AND cancelled_at IS NOT NULL AND expires_at > ?",
        (json.dumps(sorted(set(workflow_ids))), now),
    ).fetchall()
    return {row[0] for row in rows}


class WorkflowPart(SqlitePart, WorkflowRole):
    async def save_workflow(self, workflow_id: str, tree: str, first_kind: str, ttl: float) -> bool:
        db = self._db
        return await db.write(
            lambda conn: save(conn, workflow_id, tree, first_kind, ttl, db.now()),
            what="save_workflow",
            wake=False,
        )

    async def start_workflow(
        self,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """The record's save and the jobs' enqueue in one write transaction."""
        db = self._db

        def work(conn: sqlite3.Connection) -> list[EnqueueResult]:
            save(conn, workflow_id, tree, first_kind, ttl, db.now())
            return _enqueue.enqueue(conn, jobs, db.now()) if jobs else []

        return await db.write(work, what="start_workflow")

    async def workflow_record(self, workflow_id: str) -> WorkflowRecord | None:
        db = self._db
        return await db.read(lambda conn: read(conn, workflow_id, db.now()), what="workflow_record")

    async def cancel_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        db = self._db
        return await db.write(
            lambda conn: cancel(conn, workflow_id, db.now()), what="cancel_workflow", wake=False
        )

    async def cancelled(self, workflow_ids: Sequence[str]) -> set[str]:
        if not workflow_ids:
            await trio.lowlevel.checkpoint()
            return set()
        db = self._db
        return await db.read(lambda conn: cancelled(conn, workflow_ids, db.now()), what="cancelled")

    async def keep_workflows(self, keeps: Mapping[str, float]) -> dict[str, float]:
        if not keeps:
            await trio.lowlevel.checkpoint()
            return {}
        db = self._db
        return await db.write(
            lambda conn: keep(conn, keeps, db.now()), what="keep_workflows", wake=False
        )
