"""The PostgreSQL store's leadership rows with epochs and
schedule triggers (a part of PostgresStore).

STUB: every method raises NotImplementedError until it is written."""

from __future__ import annotations

from typing import Any

from .._roles import LeadershipRole
from ._base import PostgresPart


class LeaderPart(PostgresPart, LeadershipRole):
    async def acquire_leadership(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.acquire_leadership")

    async def renew_leadership(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.renew_leadership")

    async def resign_leadership(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.resign_leadership")

    async def current_leader(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.current_leader")

    async def enqueue_trigger(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.enqueue_trigger")

    async def schedule_last_fired(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.schedule_last_fired")
