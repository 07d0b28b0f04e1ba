"""Versioned schema migrations: ``migrations/NNNN_name.sql``, applied in
order, each once, in one transaction under a transaction-scoped advisory
lock (so processes that start together apply each once, and behind
PgBouncer in transaction mode too), recorded in ``chronos_migrations``.

:func:`migrate` applies what is pending; :func:`check_current` refuses a
schema that is older (with ``migrate=off``) or newer than this code.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import attrs
import psycopg
from psycopg import sql

from ...records._errors import StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """Every migration this code knows, by version (1, 2, ... with no gap)."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[m.version for m in found]}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def _lock(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"chronos_trio:{schema}",)
    )


def applied_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version: 0 when it has no migrations table yet."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".chronos_migrations',)
    ).fetchone()
    if row is None or not row[0]:
        return 0
    got = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}.chronos_migrations").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return int(got[0]) if got else 0


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[Migration]:
    """Apply every pending migration to ``schema`` (made if missing), in one
    transaction; the ones applied (none when current).

    Raises StoreError when the schema is newer than this code."""
    with conn.transaction():
        _lock(conn, schema)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.chronos_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(sql.Identifier(schema))
        )
        current = applied_version(conn, schema)
        _refuse_newer(current, schema)
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        applied = []
        for migration in migrations():
            if migration.version <= current:
                continue
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO chronos_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration)
        return applied


def check_current(conn: psycopg.Connection[Any], schema: str) -> None:
    """Raise StoreError unless ``schema`` is at this code's version."""
    current = applied_version(conn, schema)
    _refuse_newer(current, schema)
    if current < latest_version():
        raise StoreError(
            f"the PostgreSQL schema {schema!r} is at version {current}, this code needs "
            f"{latest_version()}: run `python -m chronos_trio migrate URL` "
            "(or leave the URL's migrate option at auto)"
        )


def _refuse_newer(current: int, schema: str) -> None:
    if current > latest_version():
        raise StoreError(
            f"the PostgreSQL schema {schema!r} is at version {current}, newer than this "
            f"code's {latest_version()}: upgrade chronos_trio before running it there"
        )
