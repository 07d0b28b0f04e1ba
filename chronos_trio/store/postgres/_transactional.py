"""Transactional enqueue on the PostgreSQL store from Trio (a part of
PostgresStore): :class:`~._caller.ProducerPart`'s forms, and the Trio one,
which runs the caller's statement in a worker thread."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ...records._jobs import EnqueueResult, NewJob
from .._transactional import TransactionalEnqueue
from ._base import PostgresPart
from ._caller import ProducerPart


class TransactionalPart(PostgresPart, ProducerPart, TransactionalEnqueue):
    """``enqueue_in_transaction`` in all its forms (see ``_caller``)."""

    async def enqueue_in_transaction(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        bound = self._bound(connection, asyncio_ok=False)
        if not jobs:
            return []
        # Not abandoned on cancel: the statement runs on the caller's
        # connection, which must not be used again before it ends.
        return await trio.to_thread.run_sync(self._enqueue_sync, bound, jobs)

    async def start_workflow_in_transaction(
        self,
        connection: object,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """The record's save, then the jobs, both statements on the
        caller's connection in its transaction (see the base method)."""
        bound = self._bound(connection, asyncio_ok=False)
        record = (workflow_id, tree, first_kind, ttl)
        return await trio.to_thread.run_sync(self._enqueue_sync, bound, jobs, record)
