"""The SQLite store: a durable embedded queue in one file, no server
(stdlib ``sqlite3``). Every role but promotion and every feature.

* ``store``: :class:`SqliteStore`, made of parts: ``_worker`` (enqueue,
  claims, renew, settle, recovery, wake-ups, results, workflows),
  ``_admin``, ``_registry``, ``_leader``, ``_check``, ``_transactional``;
* ``_database``: one writer connection and a few readers per store, each
  operation one transaction in a worker thread; ``schema.sql``: the schema;
  ``_changes``: wake-ups within a process and between processes;
  ``_url``: URLs and options.
"""

from ...records._public import fixup_module_metadata as _fixup
from .store import SqliteStore as SqliteStore
from .store import open_sqlite_store as open_sqlite_store

__all__ = ["SqliteStore", "open_sqlite_store"]

_fixup(__name__, globals())
