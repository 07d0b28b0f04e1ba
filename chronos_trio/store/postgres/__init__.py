"""The PostgreSQL store (``pip install chronos_trio[postgres]``): every role
but promotion and every feature, on psycopg 3.

* ``store``: :class:`PostgresStore`, made of parts: ``_worker`` (enqueue,
  claims, renew, settle, recovery, wake-ups, results, workflows),
  ``_admin``, ``_registry``, ``_leader``, ``_check``;
* ``_database``: the connection pool, one transaction per operation in a
  worker thread; ``_migrate`` and ``migrations/``: the versioned schema;
  ``_rows``: rows and jobs; ``_url``: URLs and options.
"""

from ...records._public import fixup_module_metadata as _fixup
from ._migrate import latest_version as latest_version
from .store import PostgresStore as PostgresStore
from .store import open_postgres_store as open_postgres_store

__all__ = ["PostgresStore", "latest_version", "open_postgres_store"]

_fixup(__name__, globals())
