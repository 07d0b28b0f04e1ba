"""The PostgreSQL store (``pip install chronos_trio[postgres]``): every role
but promotion and every feature, on psycopg 3.

* ``store``: :class:`PostgresStore`, made of parts: ``_worker`` (enqueue,
  claims, renew, settle, recovery, wake-ups, results, workflows),
  ``_admin``, ``_registry``, ``_leader``, ``_check``, ``_transactional``
  (over ``_caller``, its part without Trio, which producers outside Trio
  open alone: :class:`PostgresProducerStore`);
* ``_pool``: the connection pool, one transaction per operation;
  ``_database`` runs them in Trio worker threads; ``_migrate`` and
  ``migrations/``: the versioned schema; ``_url``: URLs and options.

Importing the package imports neither Trio nor the store: each name loads
its module on first use.
"""

from typing import TYPE_CHECKING

from ...records._public import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from ._caller import PostgresProducerStore as PostgresProducerStore
    from ._caller import open_postgres_producer_store as open_postgres_producer_store
    from ._migrate import latest_version as latest_version
    from .store import PostgresStore as PostgresStore
    from .store import open_postgres_store as open_postgres_store

#: The names imported on first use, and their module.
_LAZY = {
    "PostgresStore": "store",
    "open_postgres_store": "store",
    "latest_version": "_migrate",
    "PostgresProducerStore": "_caller",
    "open_postgres_producer_store": "_caller",
}

__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)

__all__ = [
    "PostgresProducerStore",
    "PostgresStore",
    "latest_version",
    "open_postgres_producer_store",
    "open_postgres_store",
]
