"""Shared pytest fixtures. Redis/cluster fixtures live in tests/_redis_fixtures.py,
PostgreSQL ones in tests/_postgres_fixtures.py, SQLite ones in tests/_sqlite_fixtures.py,
the runtime tests' memory-and-Redis ``backend`` in tests/_backends.py.

Tests marked ``soak`` (long soaks) are skipped unless ``CHRONOS_SOAK=1``."""

from __future__ import annotations

import os
import tempfile

import pytest

from tests._backends import *  # noqa: F403
from tests._postgres_fixtures import *  # noqa: F403
from tests._redis_fixtures import *  # noqa: F403
from tests._sqlite_fixtures import *  # noqa: F403

# Workers the tests spawn keep their code cache (chronos_trio._code_cache) in
# a directory of this run, never the user's ~/.cache (tests that check the
# cache set their own).
os.environ.setdefault("CHRONOS_CODE_CACHE", tempfile.mkdtemp(prefix="chronos-code-cache-"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CHRONOS_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="long soak: runs only with CHRONOS_SOAK=1")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)
