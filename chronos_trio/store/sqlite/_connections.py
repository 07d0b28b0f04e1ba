"""The SQLite store's connections, without Trio: one writer and a few
readers per store, every operation one transaction on the calling thread
(the Trio side, :mod:`._database`, runs them in worker threads).


* **Writes** go through the store's single writer connection, one at a
  time (a limiter of one), each in ``BEGIN IMMEDIATE`` ... ``COMMIT``: the
  file's write lock is taken at BEGIN, so a transaction never fails half
  way for a lock (a deferred transaction that upgrades to a write fails at
  once with SQLITE_BUSY, ignoring the busy timeout). Another process's
  write makes BEGIN wait, up to ``busy_timeout`` seconds, in SQLite's busy
  handler; only then is it a StoreError ("database is locked" never
  reaches a user under normal load).
* **Reads** run on reader connections (at most ``readers`` at once), each
  in a deferred transaction: one consistent snapshot, never blocked by a
  writer (WAL).

The file is in WAL mode, with ``synchronous`` NORMAL by default (a crash or
kill -9 of any process loses nothing; a power cut may lose the last commits,
never corrupting the file) or FULL (a commit is on the disk when it
returns). The schema is created by the first
process that opens the file, in one write transaction, and its version
checked by every other (``PRAGMA user_version``).

Errors become :class:`StoreError` saying what to do (the disk full, the
file read-only, the file locked too long, not a database); the operation's
transaction was rolled back, so nothing it did is half-stored.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from typing import TypeVar

from ...records._errors import StoreError
from .._observer import StoreObserver
from .._sql_aggregates import table_sql
from ._url import SqliteOptions

T = TypeVar("T")

#: What an operation runs in its thread: one transaction on ``conn``.
Work = Callable[[sqlite3.Connection], T]

#: The schema version this code writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION = 7

#: Stored schedules (version 4, ``store._sql_schedules``); schema.sql has
#: them too.
SCHEDULE_TABLES = (
    "CREATE TABLE schedules (leader TEXT NOT NULL, id TEXT NOT NULL,"
    " definition TEXT NOT NULL, paused INTEGER NOT NULL DEFAULT 0,"
    " updated_at REAL NOT NULL, PRIMARY KEY (leader, id)) STRICT"
)
SCHEDULE_VERSIONS_TABLE = (
    "CREATE TABLE schedule_versions (leader TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT"
)

#: Per schema version below :data:`SCHEMA_VERSION`, the statements that take
#: a file of that version to the next one; ``schema.sql`` is the result of
#: them all. Applied by the first process of this code that opens the file,
#: in the write transaction that checks the version (so once, atomically).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 1 -> 2: attempt history (records._attempts); NULL for every older row
    1: ("ALTER TABLE jobs ADD COLUMN attempt_history TEXT",),
    # 2 -> 3: notes (progress and log lines, store._sql_notes)
    2: (
        "ALTER TABLE jobs ADD COLUMN notes_progress TEXT",
        "ALTER TABLE jobs ADD COLUMN notes_lines TEXT",
        "ALTER TABLE jobs ADD COLUMN notes_dropped INTEGER NOT NULL DEFAULT 0",
    ),
    # 3 -> 4: stored schedules (store._sql_schedules)
    3: (SCHEDULE_TABLES, SCHEDULE_VERSIONS_TABLE),
    # 4 -> 5: workflow records (WorkflowRole, sqlite/_workflows.py)
    4: (
        "CREATE TABLE workflows (id TEXT PRIMARY KEY, tree TEXT NOT NULL,"
        " first_kind TEXT NOT NULL, created REAL NOT NULL, cancelled_at REAL,"
        " expires_at REAL NOT NULL) STRICT",
        "CREATE INDEX workflows_expiry ON workflows (expires_at)",
    ),
    # 5 -> 6: per-minute aggregates (store._sql_aggregates)
    5: table_sql("INTEGER", " STRICT"),
    # 6 -> 7: outbox entries of deleted workflow jobs (store._sql_flow_kept)
    6: (
        "CREATE TABLE flow_kept (id TEXT PRIMARY KEY, queue TEXT NOT NULL,"
        " then_step TEXT NOT NULL, result BLOB, version INTEGER NOT NULL,"
        " part INTEGER NOT NULL, state TEXT NOT NULL, last_error TEXT NOT NULL,"
        " attempts INTEGER NOT NULL, kind TEXT NOT NULL, finished_at REAL NOT NULL) STRICT",
    ),
}

#: Oldest SQLite library the store runs on (STRICT tables, RETURNING).
MIN_SQLITE = (3, 37, 0)

Clock = Callable[[], float]


class Connections:
    """The connections of one store (their single owner) and its clock,
    used from plain threads: no Trio here (a producer outside Trio opens
    its store on these alone; :class:`~._database.Database` adds the Trio
    side)."""

    def __init__(self, options: SqliteOptions, *, clock: Clock | None = None) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreError(
                f"the SQLite store needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer; "
                f"this Python's sqlite3 module has {sqlite3.sqlite_version}"
            )
        self.options = options
        self.path = options.path
        self._clock: Clock = clock or time.time
        self._writer: sqlite3.Connection | None = None
        self._idle_readers: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._watcher: sqlite3.Connection | None = None
        self._ready = False
        self._closed = False
        self._observer: StoreObserver | None = None

    # -- the clock -----------------------------------------------------------------
    def now(self) -> float:
        """The store's clock (epoch seconds): the host's wall clock, or the
        one the store was made with (tests)."""
        return self._clock()

    # -- connections ---------------------------------------------------------------
    def connect(self) -> sqlite3.Connection:
        """A new connection to the file with the store's settings (autocommit:
        transactions are explicit). Blocking; for threads and tools."""
        if self._closed:
            raise StoreError("the SQLite store is closed")
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreError(
                f"SQLite store {self.path!r}: the directory {directory!r} does not exist"
            )
        conn = sqlite3.connect(
            self.path,
            timeout=self.options.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=512,
        )
        try:
            conn.execute(f"PRAGMA synchronous = {self.options.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA temp_store = MEMORY")
        except sqlite3.Error:
            conn.close()
            raise
        self._all.append(conn)
        return conn

    def _writer_conn(self) -> sqlite3.Connection:
        if self._writer is None:
            self._writer = self.connect()
        if not self._ready:
            _prepare(self._writer, self.path)
            self._ready = True
        return self._writer

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        if not self._ready:
            # the schema first (and WAL mode), on the writer
            with self._write_lock_blocking():
                self._writer_conn()
        conn = self._idle_readers.pop() if self._idle_readers else self.connect()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if self._closed:
                conn.close()
            else:
                self._idle_readers.append(conn)

    @contextlib.contextmanager
    def _write_lock_blocking(self) -> Iterator[None]:
        # blocking callers (threads) take the Trio limiter's place with a
        # plain lock: the writer connection is used by one thread at a time
        with _BLOCKING_WRITE:
            yield

    # -- running operations --------------------------------------------------------
    def write_blocking(self, work: Work[T], what: str) -> T:
        """:meth:`write_blocking` for code already off the Trio loop (threads, tools)."""
        failed = True
        try:
            with self._write_lock_blocking():
                conn = self._writer_conn()
                result = _transaction(conn, work, "BEGIN IMMEDIATE")
            failed = False
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite {what}: {self.describe(exc)}") from exc
        finally:
            self._observed(what, failed)

    def read_blocking(self, work: Work[T], what: str) -> T:
        """:meth:`read` for code already off the Trio loop."""
        failed = True
        try:
            with self._reader() as conn:
                result = _transaction(conn, work, "BEGIN")
            failed = False
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite {what}: {self.describe(exc)}") from exc
        finally:
            self._observed(what, failed)

    def _observed(self, what: str, failed: bool) -> None:
        observer = self._observer
        if observer is not None:
            observer(what, failed)

    def observe(self, observer: StoreObserver | None) -> None:
        self._observer = observer

    def describe(self, exc: sqlite3.Error) -> str:
        """What went wrong, and what a user must do where a user must act."""
        text = str(exc) or type(exc).__name__
        name = getattr(exc, "sqlite_errorname", "") or ""
        where = f"the database file {self.path!r}"
        if name.startswith("SQLITE_FULL"):
            return f"{text} ({where}'s disk is full: free space; nothing of this was stored)"
        if name.startswith("SQLITE_READONLY") or "readonly" in text:
            return (
                f"{text} ({where} or its directory is read-only: the store needs to write "
                "the file and its -wal and -shm files beside it; nothing of this was stored)"
            )
        if name.startswith("SQLITE_BUSY") or "database is locked" in text:
            return (
                f"{text} (another process held {where}'s write lock for over "
                f"busy_timeout={self.options.busy_timeout:g}s; nothing of this was stored)"
            )
        if name.startswith("SQLITE_CANTOPEN"):
            if _read_only_filesystem(self.path):
                return (
                    f"{text} ({where} is on a read-only file system: the store needs to write "
                    "the file and its -wal and -shm files beside it)"
                )
            return f"{text} (cannot open {where}: check the path and its permissions)"
        if name.startswith("SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT"):
            return f"{text} ({where} is not a usable SQLite database)"
        return text

    def close_blocking(self) -> None:
        """Close every connection (blocking: from a thread, or a producer's
        ``close``); the store cannot be used afterwards."""
        self._closed = True
        with self._write_lock_blocking():
            for conn in self._all:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
            self._idle_readers.clear()
            self._writer = None
            self._watcher = None


# One lock for blocking writers of every store of the process: a blocking
# write (a producer's thread) and a Trio write of one store never share the
# writer connection at once. Contention across stores is rare (one store
# per file per process is the norm) and writes are short.
_BLOCKING_WRITE = threading.RLock()


def _transaction(conn: sqlite3.Connection, work: Work[T], begin: str) -> T:
    conn.execute(begin)
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return result


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    """WAL mode and the schema, once per file: the first process creates the
    tables in one write transaction; every later one checks the version."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise sqlite3.OperationalError(
            f"{path!r} could not be put in WAL mode (got {mode[0] if mode else None!r})"
        )

    def create(c: sqlite3.Connection) -> None:
        version = int(c.execute("PRAGMA user_version").fetchone()[0])
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store {path!r}: the file's schema is version {version}, newer than "
                f"this chronos_trio's {SCHEMA_VERSION}: upgrade chronos_trio"
            )
        if version in MIGRATIONS:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    c.execute(statement)
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        if version != 0:
            raise StoreError(f"SQLite store {path!r}: unknown schema version {version}")
        tables = c.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
        ).fetchone()[0]
        if tables:
            raise StoreError(
                f"SQLite store {path!r}: the file has a 'jobs' table that is not chronos_trio's"
            )
        for statement in _statements(schema_sql()):
            c.execute(statement)
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    _transaction(conn, create, "BEGIN IMMEDIATE")


def schema_sql() -> str:
    """The schema's SQL (``schema.sql`` beside this module)."""
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def _statements(script: str) -> list[str]:
    """``script``'s statements, comments removed (none contains a ';')."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _read_only_filesystem(path: str) -> bool:
    """Whether the file system holding ``path`` (or its directory) is
    mounted read-only (which SQLite reports only as "unable to open")."""
    target = path if os.path.exists(path) else os.path.dirname(os.path.abspath(path))
    try:
        return bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        return False
