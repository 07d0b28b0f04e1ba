"""The Redis backend: :class:`RedisStore` (Redis and Redis Cluster)."""

from __future__ import annotations

from .._base import Store
from ._connect import SCHEMES
from .store import RedisStore as RedisStore
from .store import RedisStoreStatistics as RedisStoreStatistics


def open_store(url: str | None) -> Store:
    """A Redis store for a ``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://`` or ``rediss+cluster://`` URL.

    ``memory://`` and None are the App's business (the embedded MemoryStore);
    anything else raises ValueError naming the accepted schemes.
    """
    scheme = (url or "").partition("://")[0].lower()
    if url is None or scheme not in SCHEMES:
        raise ValueError(
            f"not a Redis store URL: {url!r}; expected one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return RedisStore.from_url(url)


__all__ = ["RedisStore", "RedisStoreStatistics", "open_store"]
