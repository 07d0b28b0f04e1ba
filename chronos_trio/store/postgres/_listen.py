"""The store's LISTEN connection: one per store, opened lazily by the first
waiter, never from the pool (``Database.connect(autocommit=True)``), and
read from Trio itself (``wait_readable`` on its socket, libpq's
``consume_input`` and ``notifies``): no thread stays behind it.

Waiters register the payloads they wait for (see ``_wake``) *before* they
look at the table, so a notification sent after their look is never lost.
Whichever registered waiter finds nobody reading becomes the reader: it
reads the socket and wakes every waiter of each payload that arrives, until
its own wake-up comes; then (or when it is cancelled) it hands the reading
on to the others. So every waiter sees every wake-up, and a cancelled
waiter takes nothing from the others.

A lost connection wakes every waiter (a spurious wake-up: they look again)
and is opened again by the next wait, no sooner than
:data:`RETRY_AFTER` seconds after a failure; meanwhile waiters poll.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

import psycopg
import trio
from psycopg import sql

from ._database import Database
from ._wake import channel_of

log = logging.getLogger("chronos_trio.store.postgres")

#: Seconds after a failed LISTEN connection before the next try.
RETRY_AFTER = 2.0


class Waiter:
    """One registered wait: its payloads, and whether one arrived."""

    __slots__ = ("event", "keys", "woke")

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = tuple(dict.fromkeys(keys))
        self.woke = False
        self.event = trio.Event()

    def wake(self) -> None:
        self.woke = True
        self.event.set()


class Listener:
    """The LISTEN connection of one store and its registered waiters."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._conn: psycopg.Connection[Any] | None = None
        self._channel: str | None = None
        self._waiters: dict[str, set[Waiter]] = {}
        self._reader: Waiter | None = None
        #: The reader's wait for the socket: cancelled when the reader is woken
        #: in-process (dispatch), which no socket read would show it.
        self._read_scope: trio.CancelScope | None = None
        self._failed_at: float | None = None
        self._opening: trio.Event | None = None
        self._closed = False

    # -- registration -------------------------------------------------------------------
    def register(self, keys: Iterable[str]) -> Waiter:
        waiter = Waiter(keys)
        for key in waiter.keys:
            self._waiters.setdefault(key, set()).add(waiter)
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        for key in waiter.keys:
            group = self._waiters.get(key)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[key]

    def dispatch(self, payload: str) -> None:
        """Wake this process's waiters of ``payload`` (as its notification would)."""
        self._dispatch(payload)

    def _dispatch(self, payload: str) -> None:
        for waiter in self._waiters.get(payload, ()):
            waiter.wake()
        self._interrupt_reader()

    def _interrupt_reader(self) -> None:
        """A woken reader waiting for the socket stops waiting (else it would
        sleep on until a notification or its timeout: a lost wake-up)."""
        reader, scope = self._reader, self._read_scope
        if reader is not None and reader.woke and scope is not None:
            scope.cancel()

    def _wake_all(self) -> None:
        for group in self._waiters.values():
            for waiter in group:
                waiter.wake()
        self._interrupt_reader()

    # -- the connection -----------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def connect(self) -> bool:
        """Make sure the LISTEN connection is open; whether it is. Never
        raises but Cancelled: a failure is logged and retried later."""
        if self._conn is not None:
            return True
        if self._opening is not None:  # another waiter opens it: wait for that
            await self._opening.wait()
            return self._conn is not None
        if self._closed:
            return False
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_AFTER:
            return False
        opening = self._opening = trio.Event()
        try:
            conn = await trio.to_thread.run_sync(self._open, abandon_on_cancel=False)
        except (psycopg.Error, OSError, RuntimeError) as exc:
            self._failed_at = time.monotonic()
            log.warning("PostgreSQL LISTEN connection failed (polling meanwhile): %s", exc)
            return False
        except Exception as exc:  # StoreError from the pool, and the like
            self._failed_at = time.monotonic()
            log.warning("PostgreSQL LISTEN connection failed (polling meanwhile): %s", exc)
            return False
        finally:
            self._opening = None
            opening.set()
        if self._closed:
            conn.close()
            return False
        self._conn = conn
        self._failed_at = None
        # what was sent before LISTEN took effect is not lost: every waiter
        # looks at the table after this returns (a waiter that waited while
        # it was closed looks again within its bounded nap)
        return True

    def _open(self) -> psycopg.Connection[Any]:
        if self._channel is None:
            self._channel = self._db.run_blocking(
                lambda c: channel_of(c, self._db.schema), "listen"
            )
        conn = self._db.connect(autocommit=True)
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    def _lost(self, exc: BaseException) -> None:
        conn, self._conn = self._conn, None
        self._failed_at = time.monotonic()
        log.warning("PostgreSQL LISTEN connection lost (polling meanwhile): %s", exc)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        self._wake_all()

    # -- waiting ------------------------------------------------------------------------
    async def wait(self, waiter: Waiter, timeout: float) -> bool:
        """Wait until one of ``waiter``'s payloads arrives (True) or
        ``timeout`` passes (False). Reads the connection while nobody else
        does."""
        with trio.move_on_after(timeout):
            while not waiter.woke:
                if self._conn is None:
                    await trio.sleep_forever()  # polled by the caller's timeout
                if self._reader is None:
                    self._reader = waiter
                    try:
                        await self._read(waiter)
                    finally:
                        self._reader = None
                        self._hand_over()
                else:
                    await waiter.event.wait()
                    waiter.event = trio.Event()
        return waiter.woke

    def _hand_over(self) -> None:
        """The reader left: wake the others' events (not their wake-ups) so
        one of them takes the reading."""
        for group in self._waiters.values():
            for other in group:
                other.event.set()

    async def _read(self, me: Waiter) -> None:
        while not me.woke:
            conn = self._conn
            if conn is None:
                return
            pgconn = conn.pgconn
            try:
                while (notify := pgconn.notifies()) is not None:
                    self._dispatch(notify.extra.decode())
                if me.woke:
                    return
                with trio.CancelScope() as scope:
                    self._read_scope = scope
                    try:
                        await trio.lowlevel.wait_readable(pgconn.socket)
                    finally:
                        self._read_scope = None
                if scope.cancelled_caught:
                    continue  # woken in-process: the loop sees me.woke
                pgconn.consume_input()
                if pgconn.status != psycopg.pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the LISTEN connection is closed")
            except (psycopg.Error, OSError, trio.ClosedResourceError) as exc:
                self._lost(exc)
                return

    async def aclose(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                trio.lowlevel.notify_closing(conn.pgconn.socket)
        self._wake_all()
        if conn is not None:
            with contextlib.suppress(Exception):
                await trio.to_thread.run_sync(conn.close)
