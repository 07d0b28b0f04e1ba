"""The Redis backend: :class:`RedisStore` (Redis and Redis Cluster).

``RedisStore`` and ``RedisCommands`` (which run on Trio) are imported on
first use (PEP 562): the backend's sans-IO core also serves the producers
outside Trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...records._public import fixup_module_metadata as _fixup

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
    _load()
    return RedisStore.from_url(url)


def _load() -> None:
    """Import the lazy names (all at once), reporting this package as their module."""
    import importlib

    loaded = {n: getattr(importlib.import_module(f".{m}", __name__), n) for n, m in _LAZY.items()}
    globals().update(loaded)
    _fixup(__name__, loaded)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        _load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RedisCommands", "RedisStore", "RedisStoreStatistics", "open_store"]
