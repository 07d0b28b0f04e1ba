"""The PostgreSQL store's worker registry (a part of PostgresStore).

STUB: every method raises NotImplementedError until it is written."""

from __future__ import annotations

from typing import Any

from .._roles import RegistryRole
from ._base import PostgresPart


class RegistryPart(PostgresPart, RegistryRole):
    async def beat_worker(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.beat_worker")

    async def unregister_worker(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.unregister_worker")

    async def workers(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.workers")
