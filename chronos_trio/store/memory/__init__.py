"""The in-memory store, the typed reference model of the store contract: a
backend package of its own, as ``store.redis`` is, so the import contracts
can hold the two apart (neither imports the other; what they share lives
beside the contract in ``chronos_trio.store``).

* ``_store``: :class:`MemoryStore` itself, one transition per operation;
* ``_check``: its checker; ``_control``: rate and concurrency limits and
  expiry; ``_unique``: unique-key locks; ``_workers``: the worker registry
  (the settle rules it shares with the PostgreSQL store, the UNCLAIMED one
  among them, are ``store._settling``).
"""

from ...records._public import fixup_module_metadata as _fixup
from ._store import MemoryStore as MemoryStore
from ._store import open_memory_store as open_memory_store

__all__ = ["MemoryStore", "open_memory_store"]

_fixup(__name__, globals())
