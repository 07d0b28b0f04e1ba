"""The PostgreSQL store's checker (a part of PostgresStore).

STUB: every method raises NotImplementedError until it is written."""

from __future__ import annotations

from typing import Any

from .._roles import CheckRole
from ._base import PostgresPart


class CheckPart(PostgresPart, CheckRole):
    async def check(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError("PostgresStore.check")
