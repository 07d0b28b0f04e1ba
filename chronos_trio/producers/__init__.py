"""Producers outside Trio: enqueue jobs, read their status and wait for their
results on Redis or Redis Cluster from code that does not run Trio; on
PostgreSQL or SQLite, enqueue in the caller's own transaction
(``connection=``, see ``chronos_trio.store._transactional``) and read
outcomes on the store's own connections.

* :class:`~chronos_trio.producers.sync.SyncProducer` — blocking, safe for
  many threads (Django, Flask, scripts);
* :class:`~chronos_trio.producers.asyncio.AsyncioProducer` — awaitable, on
  ``redis.asyncio`` (FastAPI, aiohttp).

Both run the Trio store's own sans-IO enqueue and watch plans
(``chronos_trio.store.redis``) with the same scripts, and make jobs exactly
as ``Task.new_job`` does; neither imports Trio. Each of the two is imported
on first use (``from chronos_trio.producers import SyncProducer`` does not
load the asyncio producer).

This package sits beside ``chronos_trio.app`` in the layers: it imports
``store`` and ``records`` only (``pyproject.toml`` holds the contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..records._public import fixup_module_metadata as _fixup
from ..records._public import lazy_getattr as _lazy_getattr
from ._common import AppLike as AppLike
from ._common import ProducerStatistics as ProducerStatistics
from ._common import TaskLike as TaskLike

if TYPE_CHECKING:
    from .asyncio import AsyncioJobHandle as AsyncioJobHandle
    from .asyncio import AsyncioProducer as AsyncioProducer
    from .sync import SyncJobHandle as SyncJobHandle
    from .sync import SyncProducer as SyncProducer

_LAZY = {
    "SyncProducer": "sync",
    "SyncJobHandle": "sync",
    "AsyncioProducer": "asyncio",
    "AsyncioJobHandle": "asyncio",
}

__all__ = ["AppLike", "ProducerStatistics", "TaskLike", *_LAZY]

_fixup(__name__, globals())


# one module at a time: the sync producer never loads the asyncio one
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
