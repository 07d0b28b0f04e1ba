"""The Redis backend: :class:`RedisStore` (Redis and Redis Cluster).

``RedisStore`` and ``RedisCommands`` (which run on Trio) are imported on
first use (PEP 562): the backend's sans-IO core also serves the producers
outside Trio.

The shape of the package: operations are sans-IO plans (``_core``: a plan
yields a ``Call``, a batch of ops, and is sent the replies), run by one
driver per runtime; every batch goes through one transport protocol
(``_transport``: ``Transport``/``BlockingTransport``, whose ``batch_plan``
holds the rules of a batch once) answered by each runtime's IO: Trio
(``_adapter``, ``_native``, ``_cluster``), a blocking client
(``_blocking``) or asyncio (``_asyncio``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...records._public import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from ._commands import RedisCommands as RedisCommands
    from .store import RedisStore as RedisStore
    from .store import RedisStoreStatistics as RedisStoreStatistics

#: The names imported on first use, and their module.
_LAZY = {"RedisCommands": "_commands", "RedisStore": "store", "RedisStoreStatistics": "store"}


def open_store(url: str) -> RedisStore:
    """A Redis store for a ``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://`` or ``rediss+cluster://`` URL (the scheme registry's
    opener; see :meth:`RedisStore.from_url`). ``ValueError`` for any other."""
    store: Any = __getattr__("RedisStore")
    opened: RedisStore = store.from_url(url)
    return opened


__getattr__ = _lazy_getattr(__name__, globals(), _LAZY)

__all__ = ["RedisCommands", "RedisStore", "RedisStoreStatistics", "open_store"]
