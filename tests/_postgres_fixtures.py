"""PostgreSQL fixtures: private clusters (never the shared server on 5432).

* ``postgres_server`` (session): one private cluster per pytest worker.
* ``postgres_url`` (function): a URL of a fresh, empty database on it, made
  for the test (``CREATE DATABASE`` from template0 takes ~0.1 s).
* ``own_postgres`` (function): a cluster of the test's own, for tests that
  kill or restart the server; closed after the test.

Without the PostgreSQL server binaries these tests skip, except under
CI=true, where they fail: CI must never pass by silently skipping them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from chronos_trio.testing.postgres_server import PostgresServer, PostgresUnavailable
from chronos_trio.testing.redis_server import in_ci

__all__ = ["own_postgres", "postgres_server", "postgres_url"]

_databases = itertools.count()


def _unavailable(exc: PostgresUnavailable) -> None:
    if in_ci():
        pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
    pytest.skip(str(exc))


def _started() -> PostgresServer:
    try:
        return PostgresServer().start()
    except PostgresUnavailable as exc:
        _unavailable(exc)
        raise


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = _started()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"test_{next(_databases)}")


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = _started()
    try:
        yield server
    finally:
        server.close()
