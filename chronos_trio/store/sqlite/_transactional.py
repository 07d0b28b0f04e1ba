"""Transactional enqueue on the SQLite store from Trio (a part of
SqliteStore): :class:`~._caller.ProducerPart`'s forms, and the Trio one,
which runs the caller's statements in a worker thread."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ...records._jobs import EnqueueResult, NewJob
from .._transactional import TransactionalEnqueue
from ._base import SqlitePart
from ._caller import ProducerPart, ThreadBound, sqlite_connection


class TransactionalPart(SqlitePart, ProducerPart, TransactionalEnqueue):
    """``enqueue_in_transaction`` in all its forms (see ``_caller``)."""

    async def enqueue_in_transaction(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        conn = sqlite_connection(connection)
        if not jobs:
            await trio.lowlevel.checkpoint()
            return []
        try:
            # Not abandoned on cancel: the statements run on the caller's
            # connection, which must not be used again before they end.
            return await trio.to_thread.run_sync(self._enqueue_sync, conn, jobs)
        except ThreadBound:
            return self._enqueue_sync(conn, jobs)

    async def start_workflow_in_transaction(
        self,
        connection: object,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """The record's save, then the jobs, on the caller's connection in
        its transaction (see the base method)."""
        conn = sqlite_connection(connection)
        record = (workflow_id, tree, first_kind, ttl)
        try:
            return await trio.to_thread.run_sync(self._enqueue_sync, conn, jobs, record)
        except ThreadBound:
            return self._enqueue_sync(conn, jobs, record)
