"""Round-trip observers: how a layer above the store (the worker, for its
metrics) learns of every batch a store sends, without the store importing
it.

An observer is a plain callable ``observer(operation, failed)``, called
once per batch a store sends (one pipeline per node of a Cluster batch
counts once), after it returned or failed. ``operation`` names the batch by
its first op: a Lua script's name (``lease``, ``settle``, ...) or a
command's, lower case (``hmget``). ``failed``: the batch raised
:class:`~chronos_trio.store.StoreError`.

With no observer set (the default) a store pays one attribute check per
batch. An observer runs on the store's hot path: it must be quick (a
counter increment) and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``observer(operation, failed)``: see the module docstring.
StoreObserver = Callable[[str, bool], None]
