"""The Redis backend: :class:`RedisStore` (Redis and Redis Cluster).

``RedisStore`` (which runs on Trio) is imported on first use (PEP 562): the
backend's sans-IO core also serves the producers outside Trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import RedisStore as RedisStore
    from .store import RedisStoreStatistics as RedisStoreStatistics


def open_store(url: str) -> RedisStore:
    """A Redis store for a ``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://`` or ``rediss+cluster://`` URL (the scheme registry's
    opener; see :meth:`RedisStore.from_url`). ``ValueError`` for any other."""
    from .store import RedisStore

    return RedisStore.from_url(url)


def __getattr__(name: str) -> object:
    if name in ("RedisStore", "RedisStoreStatistics"):
        from . import store

        value = getattr(store, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RedisStore", "RedisStoreStatistics", "open_store"]
