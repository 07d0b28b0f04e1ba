"""The PostgreSQL store's Trio side: :class:`Database` runs the operations
of :class:`~._pool.Pool` in Trio worker threads, at most ``pool_size`` at
once.

Why threads: psycopg's async API is asyncio-only, and one thread hop per
operation (the whole transaction, all its statements, in the thread) costs
less than the statements themselves; see docs/stores.md for the figures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

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

    async def run(
        self,
        work: Work[T],
        *,
        what: str,
        transaction: bool = True,
        undo: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``work(conn)`` as one transaction on a pooled connection in a
        worker thread; its result. Commits when ``work`` returns, rolls back
        when it raises. Raises StoreError for every database error.

        ``transaction=False`` for work that is a single statement (atomic by
        itself): it runs in autocommit, one round trip, without the BEGIN
        and COMMIT round trips a transaction block costs.

        A cancelled caller does not wait for the thread (a hung link must not
        hold up a worker's shutdown); the transaction still commits or rolls
        back there. ``undo``: for work whose result only the caller can act
        on (a claim: jobs leased to it). Exactly one of two things happens
        to a committed result: the caller gets it (also when the cancel
        came after the thread finished: the caller's next checkpoint raises
        Cancelled), or, the caller gone, ``undo(result)`` runs in the thread
        to give it back."""
        if undo is None:
            return await trio.to_thread.run_sync(
                self.run_blocking,
                work,
                what,
                transaction,
                limiter=self._limiter,
                abandon_on_cancel=True,
            )
        handoff: _Handoff[T] = _Handoff()

        def attempt() -> T:
            result = self.run_blocking(work, what, transaction)
            if handoff.deliver(result):
                return result
            undo(result)
            return result

        try:
            return await trio.to_thread.run_sync(
                attempt, limiter=self._limiter, abandon_on_cancel=True
            )
        except trio.Cancelled:
            if not handoff.abandon():
                return handoff.taken()
            raise

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self.close_blocking)


class _Handoff(Generic[T]):
    """Whether a thread's committed result reaches its Trio caller or is
    given back: decided once, under a lock, by whichever side comes first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._delivered = False
        self._result: T | None = None

    def deliver(self, result: T) -> bool:
        """The thread, with a committed result: True if the caller takes it
        (it has not given up), False if the caller is gone."""
        with self._lock:
            if self._abandoned:
                return False
            self._delivered = True
            self._result = result
            return True

    def abandon(self) -> bool:
        """The caller, cancelled: True if it gives up (the thread will undo
        what it commits), False if the result was delivered already."""
        with self._lock:
            if self._delivered:
                return False
            self._abandoned = True
            return True

    def taken(self) -> T:
        """The delivered result (only after :meth:`abandon` returned False)."""
        return cast(T, self._result)
