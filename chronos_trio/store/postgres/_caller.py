"""Transactional enqueue on the PostgreSQL store, without Trio: jobs
written by the caller's own connection, in the caller's transaction.

The rows go in with the store's own enqueue statement
(``_enqueue.enqueue_query``: one call of the schema's ``chronos_enqueue``
function for the batch), run on the caller's connection
(``_connections``). So the jobs are visible to workers only once the
caller commits, and vanish with a rollback or a crash before it. The
wake-up (``pg_notify``) is queued in the same transaction, and PostgreSQL
delivers notifications only at commit: workers wake after it, never for
jobs they cannot see yet.

Before its first statement on a database, the part checks that the
store's schema there is current (read on the caller's connection); with
``migrate=auto`` a missing or older schema is first migrated by the store's
own connection (never in the caller's transaction), then checked again.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ...records._errors import StoreError
from ...records._jobs import EnqueueResult, JobOutcome, JobRef, NewJob
from ...records._notes import JobNotes
from .._sql_notes import read_notes, read_query
from .._transactional import ProducerEnqueue
from . import _enqueue, _migrate, _results
from ._connections import Bound, driver_error_types, recognise
from ._pool import Pool, describe
from ._url import parse_url
from ._workflow_save import save_query

#: Databases (a key per connection, engine or Django alias) known to hold a
#: current schema, with the schemas found current there. Weak where it can be.
_current: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_current_by_name: dict[object, set[str]] = {}
_current_lock = threading.Lock()

#: A workflow record to save with a flow's first jobs: its ID, encoded
#: tree, first step's kind and ttl (s).
RecordSave = tuple[str, str, str, float]


def _known_current(database: object, schema: str) -> bool:
    with _current_lock:
        try:
            found = _current.get(database)
        except TypeError:  # not weakly referenceable (a tuple key)
            found = _current_by_name.get(database)
        return found is not None and schema in found


def _remember_current(database: object, schema: str) -> None:
    with _current_lock:
        try:
            _current.setdefault(database, set()).add(schema)
        except TypeError:
            _current_by_name.setdefault(database, set()).add(schema)


#: Whether the schema's migrations table exists (one ``%s``: the schema).
#: Read from the catalog tables, not with ``to_regclass``: a name looked up
#: and not found is cached as missing by the backend until its transaction
#: ends, so a schema migrated meanwhile by the store's own connection would
#: stay invisible to the caller's transaction.
_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
    "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'chronos_migrations')"
)


def _version_query(schema: str) -> str:
    """The schema's version (to run only when its table exists)."""
    table = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.chronos_migrations").format(
        sql.Identifier(schema)
    )
    return table.as_string(None)


def _schema_error(schema: str, kind: str, version: int) -> StoreError:
    latest = _migrate.latest_version()
    if version == 0:
        found = f"has no chronos_trio schema {schema!r}"
        hint = "is it the store's database? "
    elif version > latest:
        return StoreError(
            f"the PostgreSQL schema {schema!r} of the {kind}'s database is at version "
            f"{version}, newer than this code's {latest}: upgrade chronos_trio (nothing "
            "was stored)"
        )
    else:
        found = f"holds the schema {schema!r} at version {version}, not {latest}"
        hint = ""
    return StoreError(
        f"the {kind}'s database {found}: {hint}run `python -m chronos_trio migrate URL` "
        "(or use the store with migrate=auto once); nothing was stored"
    )


class ProducerPart(ProducerEnqueue):
    """The blocking and asyncio forms of ``enqueue_in_transaction`` (see
    :class:`~chronos_trio.store._transactional.ProducerEnqueue` for what
    they guarantee and raise), and the producers' committed enqueue and
    outcome reads. No Trio: producers outside Trio use it alone
    (:class:`PostgresProducerStore`), the PostgresStore beside its Trio
    form (``_transactional``)."""

    #: The store's pool (a PostgresStore's is its Database).
    _files: Pool

    def close_blocking(self) -> None:
        """Close the store's own connections (a producer's ``close``)."""
        self._files.close_blocking()

    # -- entry points --------------------------------------------------------------
    def enqueue_in_transaction_blocking(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        bound = self._bound(connection, asyncio_ok=False)
        if not jobs:
            return []
        return self._enqueue_sync(bound, jobs)

    async def enqueue_in_transaction_asyncio(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        bound = self._bound(connection, asyncio_ok=True)
        if not jobs:
            return []
        if bound.arun is None:
            return await asyncio.to_thread(self._enqueue_sync, bound, jobs)
        schema = self._files.schema
        try:
            if not _known_current(bound.database, schema):
                version = await self._version_async(bound)
                if version != _migrate.latest_version() and self._may_migrate(version):
                    await asyncio.to_thread(self._migrate_own)
                    version = await self._version_async(bound)
                self._accept(bound, version)
            rows = await bound.arun(
                _enqueue.enqueue_query(schema, jobs), _enqueue.enqueue_params(jobs)
            )
        except driver_error_types() as exc:
            raise self._failed(bound, exc) from exc
        return _enqueue.enqueue_results(rows, jobs)

    def enqueue_committed_blocking(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            return []
        try:
            with self._files.connect() as conn:  # commits when the block ends
                return self._enqueue_sync(recognise(conn), jobs)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL enqueue: {describe(exc)}") from exc

    async def enqueue_committed_asyncio(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            return []
        db = self._files
        try:
            conn = await psycopg.AsyncConnection.connect(db.options.conninfo, **db.connect_kwargs())
            async with conn:  # commits when the block ends
                return await self.enqueue_in_transaction_asyncio(conn, jobs)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL enqueue: {describe(exc)}") from exc

    def outcome_blocking(self, ref: JobRef) -> JobOutcome | None:
        try:
            with self._files.connect() as conn:
                return _results.outcome(conn, ref)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL outcome: {describe(exc)}") from exc

    def notes_blocking(self, ref: JobRef) -> JobNotes | None:
        try:
            with self._files.connect() as conn:
                # the shared statement, not ._notes (a Trio module: producers
                # run without Trio)
                return read_notes(ref, conn.execute(*read_query(ref, "%s")).fetchone())
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL job_notes: {describe(exc)}") from exc

    # -- the steps -----------------------------------------------------------------
    @staticmethod
    def _bound(connection: object, *, asyncio_ok: bool) -> Bound:
        bound = recognise(connection)
        if bound.run is None and not asyncio_ok:
            raise TypeError(
                f"a {bound.kind} is an asyncio connection: use it from asyncio "
                "(AsyncioProducer), or pass a synchronous connection; nothing was stored"
            )
        return bound

    def _enqueue_sync(
        self, bound: Bound, jobs: Sequence[NewJob], record: RecordSave | None = None
    ) -> list[EnqueueResult]:
        """Check the schema, then write ``jobs`` on ``bound`` (and first,
        given ``record``, a workflow's record: ID, tree, first kind, ttl;
        a record of that ID already there stands), in its transaction."""
        run = bound.run
        assert run is not None
        schema = self._files.schema
        try:
            if not _known_current(bound.database, schema):
                version = self._version_sync(bound)
                if version != _migrate.latest_version() and self._may_migrate(version):
                    self._migrate_own()
                    version = self._version_sync(bound)
                self._accept(bound, version)
            if record is not None:
                run(save_query(schema), record)
            if not jobs:
                return []
            rows = run(_enqueue.enqueue_query(schema, jobs), _enqueue.enqueue_params(jobs))
        except driver_error_types() as exc:
            raise self._failed(bound, exc) from exc
        return _enqueue.enqueue_results(rows, jobs)

    def _version_sync(self, bound: Bound) -> int:
        assert bound.run is not None
        schema = self._files.schema
        [(found,)] = bound.run(_EXISTS, (schema,))
        if not found:
            return 0
        [(number,)] = bound.run(_version_query(schema), ())
        return int(number)

    async def _version_async(self, bound: Bound) -> int:
        assert bound.arun is not None
        schema = self._files.schema
        [(found,)] = await bound.arun(_EXISTS, (schema,))
        if not found:
            return 0
        [(number,)] = await bound.arun(_version_query(schema), ())
        return int(number)

    def _may_migrate(self, version: int) -> bool:
        return version < _migrate.latest_version() and self._files.options.migrate == "auto"

    def _migrate_own(self) -> None:
        """Apply pending migrations on the store's own connection (its first
        use does, with ``migrate=auto``): never in the caller's transaction."""
        self._files.run_blocking(lambda conn: None, "migrate")

    def _accept(self, bound: Bound, version: int) -> None:
        if version != _migrate.latest_version():
            raise _schema_error(self._files.schema, bound.kind, version)
        _remember_current(bound.database, self._files.schema)

    @staticmethod
    def _failed(bound: Bound, exc: BaseException) -> StoreError:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, psycopg.Error):
            cause = cause.__cause__
        if isinstance(cause, psycopg.Error):
            text = describe(cause)
        else:
            text = " ".join(str(exc).split()) or type(exc).__name__
        return StoreError(
            f"PostgreSQL transactional enqueue on the {bound.kind}: {text} (roll the "
            "transaction back; no job of it will be stored)"
        )


__all__ = ["PostgresProducerStore", "ProducerPart", "open_postgres_producer_store"]


class PostgresProducerStore(ProducerPart):
    """What a producer outside Trio opens for a ``postgresql://`` URL: the
    store's database through its own pool, no Trio imported. ValueError
    for a malformed URL (nothing connects before the first call)."""

    def __init__(self, url: str) -> None:
        self._files = Pool(parse_url(url))

    def __repr__(self) -> str:
        return f"PostgresProducerStore(schema={self._files.schema!r})"


def open_postgres_producer_store(url: str) -> PostgresProducerStore:
    """The scheme registry's producer opener for ``postgresql://``."""
    return PostgresProducerStore(url)
