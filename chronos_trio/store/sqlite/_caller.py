"""Transactional enqueue on the SQLite store, without Trio: jobs
written by the caller's own ``sqlite3.Connection`` to the store's file, in
the caller's transaction, so they exist iff it commits.

The rows go in with the store's own enqueue statements (``_enqueue``), run
on the caller's connection. What decides depends on the connection's
transaction when the call starts (``Connection.in_transaction``):

* **a transaction is open** (the caller ran ``BEGIN``, or Python's default
  "legacy" mode opened one before an ``INSERT``/``UPDATE``/``DELETE``): the
  jobs are written inside it (within a savepoint, so a failed enqueue
  leaves the caller's transaction as it was), and stored when the caller
  commits; a rollback or a crash before it leaves no job. A transaction
  that has only read so far upgrades to a write here and may fail at once
  with "database is locked" while another process writes (SQLite does not
  wait for a deferred transaction that holds a snapshot): open write
  transactions with ``BEGIN IMMEDIATE``.
* **no transaction, Python's default (legacy) mode** (``isolation_level``
  a string, ``autocommit`` left at its legacy default): as Python does
  before a write statement, a transaction is opened (``BEGIN IMMEDIATE``)
  and left open: the jobs are stored by the caller's ``commit()`` (or a
  ``with connection:`` block), together with what else it writes, and
  dropped by ``rollback()``. Until then the file's write lock is held:
  commit soon.
* **no transaction, autocommit** (``isolation_level=None``, or Python
  3.12's ``autocommit=True``): the batch is written in one ``BEGIN
  IMMEDIATE`` ... ``COMMIT`` of its own: stored when the call returns.

Workers see the jobs once they are committed: a worker of another process
within its store's ``wake_interval`` (the file's data version changes), an
idle one at its ``idle_poll`` at the latest.

The connection must be to the store's file (another file, or a database in
memory, is refused with ``ValueError``: nothing is written); its row and
text factories are set aside for the call. A connection made with
``check_same_thread`` (sqlite3's default) can be used only by the thread
that made it: from Trio or asyncio, the call then runs on the calling
thread (blocking the event loop while it lasts), else in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence

from ...records._errors import StoreError
from ...records._jobs import EnqueueResult, JobOutcome, JobRef, NewJob
from ...records._notes import JobNotes
from .._sql_notes import read_notes, read_query
from .._transactional import ProducerEnqueue
from . import _enqueue, _results
from ._connections import SCHEMA_VERSION, Connections
from ._url import parse_url
from ._workflow_save import save

_SAVEPOINT = "chronos_trio_enqueue"


#: A workflow record to save with a flow's first jobs: its ID, encoded
#: tree, first step's kind and ttl (s).
RecordSave = tuple[str, str, str, float]


class ThreadBound(Exception):
    """The caller's connection can be used only by the thread that made it
    (raised before any statement ran)."""


class ProducerPart(ProducerEnqueue):
    """The blocking and asyncio forms of ``enqueue_in_transaction`` on a
    ``sqlite3.Connection`` (see the module docstring and
    :class:`~chronos_trio.store._transactional.ProducerEnqueue` for what
    they guarantee and raise), and the committed enqueue and outcome reads
    of the producers, on the store's own connections. No Trio: the
    producers outside Trio use it alone (:class:`SqliteProducerStore`),
    the SqliteStore beside its Trio form (``_transactional``)."""

    #: The store's connections (a SqliteStore's are its Database).
    _files: Connections

    def close_blocking(self) -> None:
        """Close the store's own connections (a producer's ``close``)."""
        self._files.close_blocking()

    # -- the caller's connection ---------------------------------------------------
    def enqueue_in_transaction_blocking(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        conn = sqlite_connection(connection)
        if not jobs:
            return []
        return self._enqueue_sync(conn, jobs)

    async def enqueue_in_transaction_asyncio(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        """A ``sqlite3.Connection`` (there is no asyncio one to recognise:
        aiosqlite's is refused), used in a thread of ``asyncio.to_thread``
        (or on the loop's thread when it is bound to it)."""
        conn = sqlite_connection(connection)
        if not jobs:
            return []
        try:
            return await asyncio.to_thread(self._enqueue_sync, conn, jobs)
        except ThreadBound:
            return self._enqueue_sync(conn, jobs)

    # -- the store's own connections (producers given no connection) -----------------
    def enqueue_committed_blocking(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """On the store's writer connection, one ``BEGIN IMMEDIATE``
        transaction committed before it returns."""
        if not jobs:
            return []
        db = self._files
        return db.write_blocking(lambda conn: _enqueue.enqueue(conn, jobs, db.now()), "enqueue")

    async def enqueue_committed_asyncio(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            return []
        return await asyncio.to_thread(self.enqueue_committed_blocking, jobs)

    def outcome_blocking(self, ref: JobRef) -> JobOutcome | None:
        db = self._files
        return db.read_blocking(lambda conn: _results.outcome(conn, ref, db.now()), "outcome")

    def notes_blocking(self, ref: JobRef) -> JobNotes | None:
        # the shared statement, not ._notes (a Trio module: producers run without Trio)
        return self._files.read_blocking(
            lambda conn: read_notes(ref, conn.execute(*read_query(ref, "?")).fetchone()),
            "job_notes",
        )

    # -- the steps -----------------------------------------------------------------
    def _enqueue_sync(
        self, conn: sqlite3.Connection, jobs: Sequence[NewJob], record: RecordSave | None = None
    ) -> list[EnqueueResult]:
        """Check the connection (file, schema), then write ``jobs`` (and
        first, given ``record``, a workflow's record: ID, tree, first kind,
        ttl; a live record of that ID stands) as the module docstring says.
        Raises ThreadBound before anything when ``conn`` belongs to another
        thread."""
        with _plain_rows(conn):
            try:
                self._check_file(conn)
                self._check_schema(conn)
            except sqlite3.ProgrammingError as exc:
                if "same thread" in str(exc):
                    raise ThreadBound from exc
                raise ValueError(f"the sqlite3 connection cannot be used: {exc}") from exc
            except sqlite3.Error as exc:
                raise self._failed(exc, "nothing was stored") from exc
            return self._write(conn, jobs, record)

    def _check_file(self, conn: sqlite3.Connection) -> None:
        """ValueError unless ``conn``'s main database is the store's file."""
        rows = conn.execute("PRAGMA database_list").fetchall()
        found = next((str(file or "") for _, name, file in rows if name == "main"), "")
        if not found or not _same_file(found, self._files.path):
            where = repr(found) if found else "a database in memory"
            raise ValueError(
                f"the sqlite3 connection is to {where}, not the store's file "
                f"{self._files.path!r}: jobs go in the store's file; nothing was stored"
            )

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """StoreError unless the file holds the store's current schema; a
        file without one gets it first (on the store's own connection) when
        the caller has no transaction open."""
        version = _user_version(conn)
        if version < SCHEMA_VERSION and not conn.in_transaction:
            # creates the schema, or migrates an older one
            self._files.write_blocking(lambda c: None, "open")
            version = _user_version(conn)
        if version == SCHEMA_VERSION:
            return
        if version == 0:
            raise StoreError(
                f"the SQLite file {self._files.path!r} has no chronos_trio schema yet, and the "
                "connection has a transaction open: open the store once first (any operation, "
                "e.g. a worker's start or `python -m chronos_trio check URL`), or enqueue "
                "before the transaction; nothing was stored"
            )
        raise StoreError(
            f"the SQLite file {self._files.path!r} holds schema version {version}, not this "
            f"chronos_trio's {SCHEMA_VERSION}: use the chronos_trio that made it; nothing "
            "was stored"
        )

    def _write(
        self, conn: sqlite3.Connection, jobs: Sequence[NewJob], record: RecordSave | None
    ) -> list[EnqueueResult]:
        if conn.in_transaction:
            return self._in_savepoint(conn, jobs, record)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._failed(exc, "nothing was stored") from exc
        try:
            results = self._statements(conn, jobs, record)
            if _autocommit(conn):
                conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._failed(exc, "rolled back: nothing was stored") from exc
            raise
        return results

    def _statements(
        self, conn: sqlite3.Connection, jobs: Sequence[NewJob], record: RecordSave | None
    ) -> list[EnqueueResult]:
        """The writes, in the transaction open on ``conn``: the record's
        save first (when given), then the jobs."""
        now = self._files.now()
        if record is not None:
            save(conn, *record, now)
        return _enqueue.enqueue(conn, jobs, now) if jobs else []

    def _in_savepoint(
        self, conn: sqlite3.Connection, jobs: Sequence[NewJob], record: RecordSave | None
    ) -> list[EnqueueResult]:
        try:
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            results = self._statements(conn, jobs, record)
            conn.execute(f"RELEASE {_SAVEPOINT}")
        except BaseException as exc:
            undone = _undo_savepoint(conn)
            if isinstance(exc, sqlite3.Error):
                what = (
                    "nothing of it was stored; your transaction goes on"
                    if undone
                    else "SQLite rolled your transaction back: nothing of it is stored"
                )
                raise self._failed(exc, what) from exc
            raise
        return results

    def _failed(self, exc: sqlite3.Error, what: str) -> StoreError:
        return StoreError(
            f"SQLite transactional enqueue on the sqlite3 connection: "
            f"{self._files.describe(exc)} ({what})"
        )


def sqlite_connection(connection: object) -> sqlite3.Connection:
    """``connection`` as a usable ``sqlite3.Connection``: TypeError for
    another kind, ValueError for a closed one."""
    if not isinstance(connection, sqlite3.Connection):
        kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
        hint = (
            " (aiosqlite's connection is not supported: pass a sqlite3 connection, "
            "used in a thread)"
            if kind.startswith("aiosqlite")
            else ""
        )
        raise TypeError(
            f"the SQLite store's connection must be a sqlite3.Connection to its file, "
            f"not a {kind}{hint}; nothing was stored"
        )
    try:
        connection.in_transaction  # noqa: B018 - raises on a closed connection
    except sqlite3.ProgrammingError as exc:
        raise ValueError(f"the sqlite3 connection is closed ({exc}); nothing was stored") from exc
    return connection


def _same_file(found: str, path: str) -> bool:
    try:
        return os.path.samefile(found, path)
    except OSError:
        return os.path.realpath(found) == os.path.realpath(path)


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def _autocommit(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` commits each statement by itself when no transaction
    is open (``isolation_level=None``, or Python 3.12's ``autocommit=True``)
    rather than opening one before a write (the legacy default)."""
    mode = getattr(conn, "autocommit", None)
    if isinstance(mode, bool):
        return mode
    return conn.isolation_level is None


def _undo_savepoint(conn: sqlite3.Connection) -> bool:
    """Roll the enqueue's savepoint back; whether the caller's transaction
    is still open (SQLite rolls a whole transaction back on some errors)."""
    if not conn.in_transaction:
        return False
    with contextlib.suppress(sqlite3.Error):
        conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
        conn.execute(f"RELEASE {_SAVEPOINT}")
    return conn.in_transaction


@contextlib.contextmanager
def _plain_rows(conn: sqlite3.Connection) -> Iterator[None]:
    """Rows as tuples and text as str for the call (the caller's factories
    set aside, then restored)."""
    rows, text = conn.row_factory, conn.text_factory
    conn.row_factory, conn.text_factory = None, str
    try:
        yield
    finally:
        conn.row_factory, conn.text_factory = rows, text


__all__ = ["ProducerPart", "SqliteProducerStore", "open_sqlite_producer_store"]


class SqliteProducerStore(ProducerPart):
    """What a producer outside Trio opens for a ``sqlite://`` URL: the
    store's file through its own connections, no Trio imported. ValueError
    for a malformed URL (nothing opens before the first call)."""

    def __init__(self, url: str) -> None:
        self._files = Connections(parse_url(url))

    def __repr__(self) -> str:
        return f"SqliteProducerStore({self._files.path!r})"


def open_sqlite_producer_store(url: str) -> SqliteProducerStore:
    """The scheme registry's producer opener for ``sqlite://``."""
    return SqliteProducerStore(url)
