"""The SQLite store's Trio side: :class:`Database` runs the operations of
:class:`~._connections.Connections` in Trio worker threads (one writer at a
time, at most ``readers`` readers) and owns the store's wake-ups
(:mod:`._changes`)."""

from __future__ import annotations

import sqlite3
from typing import TypeVar

import trio

from ...records._errors import StoreError
from ._changes import Changes
from ._connections import Clock, Connections, Work
from ._url import SqliteOptions

T = TypeVar("T")


class Database(Connections):
    """The connections of one store, from Trio, and its wake-ups."""

    def __init__(self, options: SqliteOptions, *, clock: Clock | None = None) -> None:
        super().__init__(options, clock=clock)
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(options.readers)
        self._watch_limiter = trio.CapacityLimiter(1)
        self._busy_reads = 0
        self.changes = Changes(self._data_version, options.wake_interval)

    async def write(self, work: Work[T], *, what: str, wake: bool = True) -> T:
        """Run ``work(conn)`` on the writer connection as one ``BEGIN
        IMMEDIATE`` transaction in a worker thread; its result. Commits when
        ``work`` returns, rolls back when it raises. Raises StoreError for
        every database error (rolled back: nothing of it is stored).

        ``wake``: after the commit, wake this process's waiters (they look
        again). Pass False for a write that makes no work for anyone (a
        renewal, a claim, a heartbeat, a waiter's registration): waiters
        that wrote on every wake-up would wake each other for ever."""
        result = await trio.to_thread.run_sync(
            self.write_blocking, work, what, limiter=self._write_limiter
        )
        if wake:
            self.changes.signal()
        return result

    async def read(self, work: Work[T], *, what: str) -> T:
        """Run ``work(conn)`` on a reader connection in one deferred (read)
        transaction in a worker thread: one consistent snapshot. Raises
        StoreError for every database error."""
        return await trio.to_thread.run_sync(
            self.read_blocking, work, what, limiter=self._read_limiter
        )

    async def _data_version(self) -> int:
        """``PRAGMA data_version`` on the watcher connection (it never writes,
        so every commit of any other connection, this store's writer
        included, changes it).

        Read on the Trio thread itself: it is a look at the WAL index in
        shared memory (about 7 µs here, against a thread hop's many times
        that, 50 times a second while anyone waits). The watcher never
        waits for a lock (its busy timeout is 0): a busy file (a WAL
        recovery under way) reads as a change, so waiters look again."""
        if self._watcher is None:
            await trio.to_thread.run_sync(self._open_watcher, limiter=self._watch_limiter)
        assert self._watcher is not None
        try:
            row = self._watcher.execute("PRAGMA data_version").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc).lower():
                self._busy_reads += 1
                return -self._busy_reads  # never a real version: a change
            raise StoreError(f"SQLite wait: {self.describe(exc)}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite wait: {self.describe(exc)}") from exc
        return int(row[0])

    def _open_watcher(self) -> None:
        if not self._ready:
            with self._write_lock_blocking():
                self._writer_conn()
        watcher = self.connect()
        watcher.execute("PRAGMA busy_timeout = 0")
        self._watcher = watcher

    async def aclose(self) -> None:
        self._closed = True
        await trio.to_thread.run_sync(self.close_blocking, limiter=self._write_limiter)
