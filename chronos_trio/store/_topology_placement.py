"""The placement of a store with versioned, partitioned queues: the one
shape the Redis store and the MemoryStore (which emulates its topology)
share, made and read here only.

Such a store keeps each job in one partition of one routing version of its
queue, and its placement (see ``records._placement``) is ``(version,
partition)``. Code above the store reads it only through
:meth:`~chronos_trio.store.TopologyRole.locate`, when the store has that
capability.
"""

from __future__ import annotations

from ..records._placement import Placement

_INTERNED: dict[tuple[int, int], Placement] = {}


def topology_placement(version: int, partition: int) -> Placement:
    """The placement of partition ``partition`` of version ``version``: one
    shared instance per pair (a lease of 64 jobs allocates none)."""
    key = (version, partition)
    placement = _INTERNED.get(key)
    if placement is None:
        if len(_INTERNED) > 100_000:  # bound it; making one again is cheap
            _INTERNED.clear()
        placement = _INTERNED[key] = key
    return placement


def locate(placement: Placement | None) -> tuple[int, int] | None:
    """The ``(version, partition)`` a placement of such a store names; None
    when it names none (None, or a placement of another shape: a store
    without topology makes ``()``)."""
    if placement is None or len(placement) != 2:
        return None
    version, partition = placement
    return version, partition
