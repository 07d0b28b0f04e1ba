"""The PostgreSQL store's connections, without Trio: a pool of psycopg 3
sync connections, each operation one transaction on the calling thread
(:mod:`._database` runs them in Trio worker threads).

Every connection has ``search_path`` set to the store's schema and a
``statement_timeout``. Errors become :class:`StoreError` (the operation
rolled back, or, for a connection lost at commit, perhaps applied: every
operation is safe to repeat, as the contract says).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql

from ...records._errors import StoreError
from .._observer import StoreObserver
from . import _migrate
from ._url import PostgresOptions

T = TypeVar("T")

#: Seconds a pooled connection stays trusted after an operation succeeded on
#: it: within them the pool hands it out without a check round trip.
FRESH = 2.0

#: What an operation runs in its thread: one transaction on ``conn``.
Work = Callable[[psycopg.Connection[Any]], T]


class Pool:
    """The connection pool of one store (its single owner), used from plain
    threads: no Trio here (a producer outside Trio opens its store on this
    alone; :class:`~._database.Database` adds the Trio side)."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self.schema = options.schema
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None
        self._ready = False
        self._closed = False
        self._observer: StoreObserver | None = None
        #: When each pooled connection last ran an operation (monotonic).
        self._last_used: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    # -- connections -------------------------------------------------------------
    def connect_kwargs(self) -> dict[str, Any]:
        """libpq options of every connection the store opens (its schema and
        statement timeout); prepared statements off behind PgBouncer."""
        timeout_ms = int(self.options.statement_timeout * 1000)
        kwargs: dict[str, Any] = {
            "options": f"-c search_path={self.schema} -c statement_timeout={timeout_ms}",
            # transactions are explicit (Database.run): a single statement
            # runs alone, without BEGIN and COMMIT round trips
            "autocommit": True,
        }
        if self.options.poll_only:
            kwargs["prepare_threshold"] = None
        return kwargs

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A new connection of the store's own (blocking; for LISTEN and tools)."""
        kwargs = {**self.connect_kwargs(), "autocommit": autocommit}
        return psycopg.connect(self.options.conninfo, **kwargs)

    def _open(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
        if self._closed:
            raise StoreError("the PostgreSQL store is closed")
        if self._pool is None:
            pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
                psycopg_pool.ConnectionPool(
                    self.options.conninfo,
                    min_size=1,
                    max_size=self.options.pool_size,
                    kwargs=self.connect_kwargs(),
                    open=False,
                    timeout=min(10.0, self.options.statement_timeout),
                    check=self._check,
                    name=f"chronos_trio:{self.schema}",
                )
            )
            pool.open(wait=False)
            self._pool = pool
        if not self._ready:
            with self._pool.connection() as conn:
                if self.options.migrate == "auto":
                    _migrate.migrate(conn, self.schema)
                else:
                    _migrate.check_current(conn, self.schema)
            self._ready = True
        return self._pool

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's check of a connection it hands out: an empty query
        (one round trip) only for a connection idle over :data:`FRESH`
        seconds, which a server restart or an idle timeout may have cut. A
        busy connection that broke meanwhile fails its operation with a
        StoreError (safe to repeat) and the pool replaces it."""
        used = self._last_used.get(conn)
        if used is None or time.monotonic() - used > FRESH:
            psycopg_pool.ConnectionPool.check_connection(conn)

    # -- running operations ------------------------------------------------------
    def run_blocking(self, work: Work[T], what: str, transaction: bool = True) -> T:
        """:meth:`Database.run <._database.Database.run>` for code off the Trio loop
        (threads, tools, producers).

        A pooled connection handed out unchecked (used within :data:`FRESH`
        seconds) that turns out cut (a server restart, a terminated backend)
        is replaced and the operation run once more on a checked one: safe,
        as every operation is safe to repeat (the contract), and it spares
        callers an error for a connection they never saw fail."""
        failed = True
        try:
            try:
                result = self._attempt(work, transaction)
            except _CutTrusted:
                result = self._attempt(work, transaction)
            failed = False
            return result
        except _CutTrusted as cut:
            raise StoreError(f"PostgreSQL {what}: {describe(cut.error)}") from cut.error
        except psycopg_pool.PoolTimeout as exc:
            raise StoreError(f"PostgreSQL {what}: {self._unreachable(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL {what}: {describe(exc)}") from exc
        finally:
            observer = self._observer
            if observer is not None:
                observer(what, failed)

    def _attempt(self, work: Work[T], transaction: bool) -> T:
        pool = self._open()
        with pool.connection() as conn:
            trusted = conn in self._last_used
            try:
                if transaction:
                    with conn.transaction():
                        result = work(conn)
                else:
                    result = work(conn)
            except psycopg.OperationalError as exc:
                if trusted and conn.broken:
                    self._last_used.pop(conn, None)
                    raise _CutTrusted(exc) from exc
                raise
            self._last_used[conn] = time.monotonic()
        return result

    def _unreachable(self, exc: psycopg_pool.PoolTimeout) -> str:
        """Why no connection came, with the server's last refusal when a
        plain connection attempt shows one (host, port, the reason)."""
        try:
            psycopg.connect(self.options.conninfo, connect_timeout=2).close()
        except psycopg.Error as refused:
            return f"cannot connect: {describe(refused)}"
        return f"no connection in the pool: {exc}"

    def observe(self, observer: StoreObserver | None) -> None:
        self._observer = observer

    def identifier(self, name: str) -> sql.Composed:
        """``schema.name`` as a quoted SQL identifier."""
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def close_blocking(self) -> None:
        """Close the pool (blocking); the store cannot be used afterwards."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class _CutTrusted(Exception):
    """A connection the pool handed out unchecked was found cut."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


def describe(exc: psycopg.Error) -> str:
    """What went wrong, and what a user must do where a user must act."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if sqlstate == "53100":
        return f"{text} (the database's disk is full: free space; nothing was changed)"
    if sqlstate == "25006":
        return f"{text} (the database is read-only: a standby, or default_transaction_read_only)"
    if sqlstate == "57014":
        return f"{text} (statement_timeout: the operation was cancelled and rolled back)"
    return text
