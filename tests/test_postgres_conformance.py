"""The store conformance suite on PostgresStore, on a private PostgreSQL.

Every store a check asks for is a PostgresStore on a schema of its own
(``?schema=``), so it starts empty though the stores of one test share one
database."""

from __future__ import annotations

import itertools

import pytest
import trio

from chronos_trio.store.postgres import PostgresStore
from chronos_trio.testing import CHECKS, Check

pytestmark = pytest.mark.postgres

_schemas = itertools.count()


@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_postgres_store_conforms(check: Check, postgres_url: str) -> None:
    if reason := check.skip_reason(PostgresStore):
        pytest.skip(reason)

    async def fresh() -> PostgresStore:
        return PostgresStore.from_url(f"{postgres_url}?schema=conformance_{next(_schemas)}")

    with trio.fail_after(60):
        await check(fresh)  # the check closes the stores it made
