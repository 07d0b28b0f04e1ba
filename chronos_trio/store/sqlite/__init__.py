"""The SQLite store: a durable embedded queue in one file, no server
(stdlib ``sqlite3``). Every role but promotion and every feature.

* ``store``: :class:`SqliteStore`, made of parts: ``_worker`` (enqueue,
  claims, renew, settle, recovery, wake-ups, results, workflows),
  ``_admin``, ``_registry``, ``_leader``, ``_check``, ``_transactional``
  (over ``_caller``, its part without Trio, which producers outside Trio
  open alone: :class:`SqliteProducerStore`);
* ``_connections``: one writer connection and a few readers per store,
  each operation one transaction; ``_database`` runs them in Trio worker
  threads; ``schema.sql``: the schema;
  ``_changes``: wake-ups within a process and between processes;
  ``_url``: URLs and options.

Importing the package imports neither Trio nor the store: each name loads
its module on first use.
"""

from typing import TYPE_CHECKING

from ...records._public import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from ._caller import SqliteProducerStore as SqliteProducerStore
    from ._caller import open_sqlite_producer_store as open_sqlite_producer_store
    from .store import SqliteStore as SqliteStore
    from .store import open_sqlite_store as open_sqlite_store

#: The names imported on first use, and their module: importing the package
#: imports neither Trio nor the store (a producer outside Trio loads only
#: ``_caller``).
_LAZY = {
    "SqliteStore": "store",
    "open_sqlite_store": "store",
    "SqliteProducerStore": "_caller",
    "open_sqlite_producer_store": "_caller",
}

__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)

__all__ = ["SqliteProducerStore", "SqliteStore", "open_sqlite_producer_store", "open_sqlite_store"]
