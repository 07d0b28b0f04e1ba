"""The caller's own connection, for transactional enqueue: recognise what
it is and run statements on it, in the caller's transaction.

Known kinds (SQLAlchemy and Django are looked up in ``sys.modules``, never
imported: an object of theirs can only exist once they are loaded):

* a psycopg 3 ``Connection`` (sync) or ``AsyncConnection`` (asyncio);
* a SQLAlchemy ``Connection``, ``Session`` or ``scoped_session`` (what
  Flask-SQLAlchemy's ``db.session`` is), and their asyncio forms
  ``AsyncConnection``, ``AsyncSession`` and ``async_scoped_session``, on a
  PostgreSQL engine with the psycopg (or psycopg2, sync only) driver;
* Django's ``django.db.connection`` (or ``connections[alias]``) on its
  PostgreSQL backend.

:func:`recognise` looks at the object only (no I/O), in the caller's
thread: Django's connection is per thread, so it is resolved there and
then shared with the thread that runs the statements. Statements use
``%s`` placeholders, with parameters bound by the driver.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import psycopg
from psycopg import pq

#: ``run(query, params)``: the rows of one statement (blocking).
Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
#: ``arun(query, params)``: the same on an asyncio connection.
ARun = Callable[[str, Sequence[Any]], Awaitable[list[tuple[Any, ...]]]]

#: The kinds this module knows, for the error on any other.
KNOWN = (
    "a psycopg Connection or AsyncConnection, a SQLAlchemy Connection, Session or "
    "scoped_session (or their asyncio forms), or Django's django.db.connection"
)

#: SQLAlchemy drivers whose cursors take ``%s`` placeholders and bind lists
#: as arrays (asyncpg takes ``$1``: not supported).
_SQLALCHEMY_DRIVERS = frozenset({"psycopg", "psycopg2", "psycopg2cffi"})


@attrs.frozen
class Bound:
    """A recognised connection: how to run statements on it (``run`` for a
    synchronous one, usable from any one thread at a time; ``arun`` for an
    asyncio one), what it is (for messages), and a key that stands for its
    database (to remember a schema found current there)."""

    kind: str
    database: object
    run: Run | None = None
    arun: ARun | None = None


def recognise(connection: object) -> Bound:
    """``connection`` as a :class:`Bound`. Raises ``TypeError`` for an object
    of another kind or a database that is not PostgreSQL (or a driver that
    is not supported), ``ValueError`` for a connection that is closed or
    whose transaction has failed (it must be rolled back first). Does no I/O."""
    if isinstance(connection, psycopg.Connection):
        _check_psycopg(connection)
        return Bound("psycopg Connection", connection, run=_psycopg_run(connection))
    if isinstance(connection, psycopg.AsyncConnection):
        _check_psycopg(connection)
        return Bound("psycopg AsyncConnection", connection, arun=_psycopg_arun(connection))
    for recogniser in (_sqlalchemy, _sqlalchemy_asyncio, _django):
        bound = recogniser(connection)
        if bound is not None:
            return bound
    raise TypeError(
        f"connection must be {KNOWN}; got {type(connection).__module__}."
        f"{type(connection).__qualname__}"
    )


# -- psycopg -------------------------------------------------------------------------
def _check_psycopg(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    if conn.closed:
        raise ValueError("the connection is closed: nothing was stored")
    status = conn.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise ValueError(
            "the connection's transaction has failed: roll it back first (nothing was stored)"
        )
    if status in (pq.TransactionStatus.ACTIVE, pq.TransactionStatus.UNKNOWN):
        raise ValueError(
            f"the connection is not usable now (transaction status {status.name}): "
            "nothing was stored"
        )


def _psycopg_run(conn: psycopg.Connection[Any]) -> Run:
    def run(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(query, params)
            return [tuple(row) for row in cur.fetchall()]

    return run


def _psycopg_arun(conn: psycopg.AsyncConnection[Any]) -> ARun:
    async def arun(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with conn.cursor() as cur:
            await cur.execute(query, params)
            return [tuple(row) for row in await cur.fetchall()]

    return arun


# -- SQLAlchemy ----------------------------------------------------------------------
def _check_dialect(bind: Any, kind: str) -> None:
    dialect = bind.dialect
    if dialect.name != "postgresql":
        raise TypeError(f"the {kind} is on {dialect.name}, not PostgreSQL: nothing was stored")
    if dialect.driver not in _SQLALCHEMY_DRIVERS:
        raise TypeError(
            f"the {kind} uses the {dialect.driver} driver; transactional enqueue takes "
            "psycopg (postgresql+psycopg://) or psycopg2: nothing was stored"
        )


def _check_sa_connection(conn: Any, kind: str) -> None:
    if conn.closed or conn.invalidated:
        raise ValueError(f"the {kind} is closed: nothing was stored")


def _sa_rows(result: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in result.fetchall()]


def _sqlalchemy(connection: object) -> Bound | None:
    engine_mod = sys.modules.get("sqlalchemy.engine")
    orm = sys.modules.get("sqlalchemy.orm")
    if engine_mod is not None and isinstance(connection, engine_mod.Connection):
        conn: Any = connection
        _check_dialect(conn, "SQLAlchemy Connection")
        _check_sa_connection(conn, "SQLAlchemy Connection")

        def run(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            # a tuple: one execution with positional parameters (a list would be many)
            return _sa_rows(conn.exec_driver_sql(query, tuple(params)))

        return Bound("SQLAlchemy Connection", conn.engine, run=run)
    if orm is not None and isinstance(connection, orm.Session | orm.scoped_session):
        session: Any = connection
        bind = session.get_bind()
        _check_dialect(bind, "SQLAlchemy Session")

        def run_session(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            # the session's connection, in its transaction (begun here if none is)
            return _sa_rows(session.connection().exec_driver_sql(query, tuple(params)))

        return Bound("SQLAlchemy Session", getattr(bind, "engine", bind), run=run_session)
    return None


def _sqlalchemy_asyncio(connection: object) -> Bound | None:
    ext = sys.modules.get("sqlalchemy.ext.asyncio")
    if ext is None:
        return None
    if isinstance(connection, ext.AsyncConnection):
        conn: Any = connection
        _check_dialect(conn.sync_engine, "SQLAlchemy AsyncConnection")
        _check_sa_connection(conn.sync_connection or conn, "SQLAlchemy AsyncConnection")

        async def arun(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return _sa_rows(await conn.exec_driver_sql(query, tuple(params)))

        return Bound("SQLAlchemy AsyncConnection", conn.sync_engine, arun=arun)
    if isinstance(connection, ext.AsyncSession | ext.async_scoped_session):
        session: Any = connection
        bind = session.get_bind()
        _check_dialect(bind, "SQLAlchemy AsyncSession")

        async def arun_session(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            sa_conn = await session.connection()
            return _sa_rows(await sa_conn.exec_driver_sql(query, tuple(params)))

        return Bound("SQLAlchemy AsyncSession", getattr(bind, "engine", bind), arun=arun_session)
    return None


# -- Django --------------------------------------------------------------------------
def _django(connection: object) -> Bound | None:
    proxies = sys.modules.get("django.utils.connection")
    base = sys.modules.get("django.db.backends.base.base")
    db = sys.modules.get("django.db")
    if proxies is None or base is None or db is None:
        return None
    wrapper: Any
    if isinstance(connection, proxies.ConnectionProxy):
        # this thread's connection of the alias, resolved here (it is per thread)
        wrapper = db.connections[connection.alias]
    elif isinstance(connection, base.BaseDatabaseWrapper):
        wrapper = connection
    else:
        return None
    if wrapper.vendor != "postgresql":
        raise TypeError(
            f"Django's database {wrapper.alias!r} is {wrapper.vendor}, not PostgreSQL: "
            "nothing was stored"
        )
    if wrapper.needs_rollback:
        raise ValueError(
            f"Django's connection {wrapper.alias!r} is marked for rollback (an error in "
            "this atomic block): nothing was stored"
        )

    def run(query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        # Django refuses a connection used from another thread unless shared
        # (the Trio and asyncio paths run this in a worker thread).
        wrapper.inc_thread_sharing()
        try:
            with wrapper.cursor() as cur:
                cur.execute(query, list(params))
                return [tuple(row) for row in cur.fetchall()]
        finally:
            wrapper.dec_thread_sharing()

    settings = wrapper.settings_dict
    database = ("django", settings.get("HOST"), settings.get("PORT"), settings.get("NAME"))
    return Bound(f"Django connection {wrapper.alias!r}", database, run=run)


def driver_error_types() -> tuple[type[BaseException], ...]:
    """The database errors a statement on a caller's connection may raise
    (psycopg's, and SQLAlchemy's and Django's wrappers of them when loaded)."""
    types: list[type[BaseException]] = [psycopg.Error]
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None:
        types.append(sa_exc.DBAPIError)
    django_db = sys.modules.get("django.db")
    if django_db is not None:
        types.append(django_db.Error)
    return tuple(types)


__all__ = ["KNOWN", "ARun", "Bound", "Run", "driver_error_types", "recognise"]
