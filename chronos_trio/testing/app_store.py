"""Running an App on another store for a while (a test's private
MemoryStore), then on its own again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..app import App
from ..store import StoreRole


@contextmanager
def using_store(app: App, store: StoreRole) -> Iterator[None]:
    """Make ``app`` use ``store`` inside the ``with`` (its tasks, handles,
    workers and inspector all reach it), then give it back the store it had:
    the same object, or the same URL, still unopened if it was. The store
    used meanwhile is not closed. Raises TypeError for a store without the
    core (see ``App.use_store``)."""
    saved = (app._store_url, app._store)
    app.use_store(store)
    try:
        yield
    finally:
        app._store_url, app._store = saved
