"""The PostgreSQL store's hot path: enqueue, claims, renew,
settle, recovery, wake-ups, results and workflow continuations (a part of PostgresStore).

STUB: every method raises NotImplementedError until it is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...records._jobs import EnqueueResult, NewJob
from .._roles import FlowRole, ResultRole, WorkerRole
from ._base import PostgresPart
from ._enqueue import enqueue_params, enqueue_query, enqueue_results


class WorkerPart(PostgresPart, WorkerRole, ResultRole, FlowRole):
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            return []
        query = enqueue_query(self._db.schema)
        params = enqueue_params(jobs)

        def work(conn: psycopg.Connection[Any]) -> list[EnqueueResult]:
            rows = conn.execute(query, params).fetchall()
            return enqueue_results(rows, jobs)

        return await self._db.run(work, what="enqueue")

    async def lease(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.lease")

    async def renew(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.renew")

    async def settle(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.settle")

    async def recover_expired(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.recover_expired")

    async def wait_ready(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.wait_ready")

    async def outcome(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.outcome")

    async def wait_outcome(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.wait_outcome")

    async def continuations(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.continuations")

    async def finish_continuations(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.finish_continuations")

    async def wait_continuations(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.wait_continuations")

    async def group_arrive(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.group_arrive")
