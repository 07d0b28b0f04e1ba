"""The Redis backend: :class:`RedisStore` (Redis and Redis Cluster)."""

from __future__ import annotations

from ...records._public import fixup_module_metadata as _fixup
from ._commands import RedisCommands as RedisCommands
from .store import RedisStore as RedisStore
from .store import RedisStoreStatistics as RedisStoreStatistics


def open_store(url: str) -> RedisStore:
    """A Redis store for a ``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://`` or ``rediss+cluster://`` URL (the scheme registry's
    opener; see :meth:`RedisStore.from_url`). ``ValueError`` for any other."""
    return RedisStore.from_url(url)


__all__ = ["RedisCommands", "RedisStore", "RedisStoreStatistics", "open_store"]

_fixup(__name__, globals())
del _fixup
