"""pytest fixtures for apps built on chronos_trio, on pytest-trio.

Opt in (nothing is registered by installing the package), in your
``conftest.py``::

    pytest_plugins = ["chronos_trio.testing.pytest_plugin"]

and override ``chronos_app`` there to return your App. The fixtures:

* ``chronos_app``: the App under test (default: a fresh ``App()``).
* ``chronos_memory_app``: that App on a fresh MemoryStore for the test,
  given back its own store after. The test must also take pytest-trio's
  ``autojump_clock`` (pytest-trio reads the clock from the test's own
  arguments only): the fixture fails the test without a virtual clock.
* ``chronos_worker``: a worker of ``chronos_memory_app`` running for the
  test (``await chronos_worker.wait_idle()``), with the options
  ``chronos_worker_options`` returns (override it; default: none).
* ``chronos_eager``: ``chronos_app`` in eager mode for the test (an
  :class:`~chronos_trio.testing.EagerMode`; see
  :func:`~chronos_trio.testing.eager`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing

from ..app import App
from ..store.memory import MemoryStore
from ..worker import Worker
from .app_store import using_store
from .eager import EagerMode, eager


@pytest.fixture
def chronos_app() -> App:
    """The App under test: override this fixture to return yours."""
    return App()


@pytest.fixture
async def chronos_memory_app(chronos_app: App) -> AsyncIterator[App]:
    """``chronos_app`` on a fresh MemoryStore, on the test's virtual clock."""
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        pytest.fail(
            "chronos_memory_app runs on the virtual clock: add pytest-trio's "
            "autojump_clock to the test's arguments"
        )
    with using_store(chronos_app, MemoryStore()):
        yield chronos_app


@pytest.fixture
def chronos_worker_options() -> dict[str, Any]:
    """The options of ``chronos_worker`` (WorkerConfig's): override this
    fixture to set them (default: none)."""
    return {}


@pytest.fixture
async def chronos_worker(
    chronos_memory_app: App, chronos_worker_options: dict[str, Any]
) -> AsyncIterator[Worker]:
    """A worker of ``chronos_memory_app`` running for the test, stopped
    gracefully after it."""
    async with chronos_memory_app.open_worker(**chronos_worker_options) as worker:
        yield worker


@pytest.fixture
def chronos_eager(chronos_app: App) -> Iterator[EagerMode]:
    """``chronos_app`` in eager mode for the test."""
    with eager(chronos_app) as mode:
        yield mode
