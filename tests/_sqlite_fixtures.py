"""SQLite fixtures: a fresh database file per test (no server).

* ``sqlite_url`` (function): ``sqlite:///...`` of a new file in the test's
  temporary directory; each call of its ``fresh`` sibling
  (``sqlite_urls``) gives another file there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["sqlite_url", "sqlite_urls"]

_files = itertools.count()


@pytest.fixture
def sqlite_urls(tmp_path: Path) -> Callable[[], str]:
    """Makes URLs of new, distinct database files in the test's temp dir."""

    def fresh() -> str:
        return f"sqlite:///{tmp_path}/jobs{next(_files)}.db"

    return fresh


@pytest.fixture
def sqlite_url(sqlite_urls: Callable[[], str]) -> str:
    return sqlite_urls()
