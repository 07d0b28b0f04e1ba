"""The conformance suite on the MemoryStore, under Trio's virtual clock: a
new MemoryStore for every store a check asks for."""

from __future__ import annotations

import pytest

from chronos_trio.store import MemoryStore
from chronos_trio.testing import CHECKS, Check


@pytest.mark.parametrize("check", CHECKS, ids=str)
@pytest.mark.parametrize("partitions", [1, 4])
async def test_memory_store_conforms(check: Check, partitions: int, autojump_clock: object) -> None:
    assert check.skip_reason(MemoryStore) is None, "the MemoryStore offers every role"

    async def fresh() -> MemoryStore:
        return MemoryStore(default_partitions=partitions)

    await check(fresh)
