"""The PostgreSQL store's Trio side: :class:`Database` runs the operations
of :class:`~._pool.Pool` in Trio worker threads, at most ``pool_size`` at
once.

Why threads: psycopg's async API is asyncio-only, and one thread hop per
operation (the whole transaction, all its statements, in the thread) costs
less than the statements themselves; see docs/stores.md for the figures.
"""

from __future__ import annotations

from typing import TypeVar

import trio

from ._pool import Pool, Work, describe
from ._url import PostgresOptions

T = TypeVar("T")

__all__ = ["Database", "Work", "describe"]


class Database(Pool):
    """The pool of one store, from Trio."""

    def __init__(self, options: PostgresOptions) -> None:
        super().__init__(options)
        self._limiter = trio.CapacityLimiter(options.pool_size)

    async def run(self, work: Work[T], *, what: str, transaction: bool = True) -> T:
        """Run ``work(conn)`` as one transaction on a pooled connection in a
        worker thread; its result. Commits when ``work`` returns, rolls back
        when it raises. Raises StoreError for every database error.

        ``transaction=False`` for work that is a single statement (atomic by
        itself): it runs in autocommit, one round trip, without the BEGIN
        and COMMIT round trips a transaction block costs."""
        return await trio.to_thread.run_sync(
            self.run_blocking,
            work,
            what,
            transaction,
            limiter=self._limiter,
            abandon_on_cancel=True,
        )

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self.close_blocking)
