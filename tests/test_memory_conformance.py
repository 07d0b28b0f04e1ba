"""The conformance suite on the MemoryStore, under Trio's virtual clock."""

from __future__ import annotations

import pytest

from chronos_trio.store import MemoryStore
from chronos_trio.testing import CHECKS
from chronos_trio.testing.conformance import Check


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("partitions", [1, 4])
async def test_memory_store_conforms(check: Check, partitions: int, autojump_clock: object) -> None:
    await check(MemoryStore(default_partitions=partitions))
