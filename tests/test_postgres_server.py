"""The private PostgreSQL cluster the PostgreSQL tests run on."""

from __future__ import annotations

import psycopg
import pytest

from chronos_trio.testing.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres


def test_each_test_gets_an_empty_database_of_its_own(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        port = conn.execute("select current_setting('port')").fetchone()
    assert tables == (0,)
    assert port is not None and port[0] != "5432", "never the shared server"


def test_a_killed_server_restarts_with_its_data(own_postgres: PostgresServer) -> None:
    with psycopg.connect(own_postgres.url, autocommit=True) as conn:
        conn.execute("create table kept (n int)")
        conn.execute("insert into kept values (7)")
    own_postgres.kill()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(own_postgres.url, connect_timeout=2).close()
    own_postgres.restart()
    with psycopg.connect(own_postgres.url) as conn:
        assert conn.execute("select n from kept").fetchall() == [(7,)]
