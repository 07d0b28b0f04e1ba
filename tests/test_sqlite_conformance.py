"""The store conformance suite on SqliteStore: every store a check asks for
is a SqliteStore on a new file of its own, so it starts empty."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.testing import CHECKS, Check

pytestmark = pytest.mark.sqlite


@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_sqlite_store_conforms(check: Check, sqlite_urls: Callable[[], str]) -> None:
    if reason := check.skip_reason(SqliteStore):
        pytest.skip(reason)

    async def fresh() -> SqliteStore:
        return SqliteStore.from_url(sqlite_urls())

    with trio.fail_after(60):
        await check(fresh)  # the check closes the stores it made
