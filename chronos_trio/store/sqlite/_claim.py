"""Claims (``WorkerRole.lease``) on SQLite (STUB: to be written)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._roles import LeaseResult, QueueWeight


class Claimer:
    """Makes each claim's fencing tokens unique among every lease the store
    ever issues."""

    def claim(
        self,
        conn: sqlite3.Connection,
        queues: Sequence[QueueWeight],
        count: int,
        worker_id: str,
        lease_duration: float,
        strict: bool,
        now: float,
    ) -> LeaseResult:
        raise NotImplementedError
