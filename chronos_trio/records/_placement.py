"""Where a job lives in its store: an opaque value the backend makes and
alone reads.

A backend may keep a job somewhere its ID alone does not name (a Redis store
keeps it in one partition of one routing version of its queue): the
*placement* tells that backend where, so a settle, a renewal or a lookup
goes straight there instead of searching. Records carry it (``Job``,
``EnqueueResult``, ``JobRef``, ``LeaseRef``, a check ``Finding``, a workflow
``Continuation``) without knowing what it holds: only the store that made a
placement reads it, and code above the store never looks inside.

A placement is a tuple of ints (immutable, hashable, compared by value,
and free to pass around: a store hands out shared instances). A backend that
needs none uses :data:`NO_PLACEMENT`, the empty tuple. The stores with
versioned, partitioned queues (Redis, and the MemoryStore that emulates its
topology) use ``(version, partition)``; read it only through
:meth:`~chronos_trio.store.TopologyRole.locate`.
"""

from __future__ import annotations

from typing import TypeAlias

#: Where a job lives in its store (see the module docstring): opaque to all
#: but the store that made it.
Placement: TypeAlias = tuple[int, ...]

#: The placement of a store that needs none: its jobs are found by ID alone.
NO_PLACEMENT: Placement = ()
