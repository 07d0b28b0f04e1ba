"""The PostgreSQL store's inspection, administration, retention
and the single-version topology (a part of PostgresStore).

STUB: every method raises NotImplementedError until it is written."""

from __future__ import annotations

from typing import Any

from .._roles import AdminRole, TopologyRole
from ._base import PostgresPart


class AdminPart(PostgresPart, AdminRole, TopologyRole):
    async def queues(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.queues")

    async def stats(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.stats")

    async def get_job(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.get_job")

    async def list_jobs(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.list_jobs")

    async def run_now(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.run_now")

    async def delete_job(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.delete_job")

    async def abort(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.abort")

    async def requeue_dead(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.requeue_dead")

    async def set_paused(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.set_paused")

    async def trim(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.trim")

    async def limit_usage(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.limit_usage")

    async def topology(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.topology")

    async def promote_queue_version(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.promote_queue_version")

    async def complete_draining_version(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.complete_draining_version")
