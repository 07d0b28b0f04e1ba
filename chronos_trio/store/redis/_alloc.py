"""Choosing which partitions serve a batch so that a queue's jobs come out in
one global order (due time, then job ID) however many partitions it has."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def pairs(flat: Sequence[bytes]) -> list[tuple[float, bytes]]:
    """``[member, score, member, score, ...]`` (a WITHSCORES reply) as (score, member)."""
    return [(float(flat[i + 1]), flat[i]) for i in range(0, len(flat), 2)]


def earliest(
    candidates: Mapping[K, Sequence[tuple[float, bytes]]], n: int, bound: float | None = None
) -> dict[K, int]:
    """How many of the ``n`` earliest candidates (score, then member) each source
    holds, counting only scores ``<= bound`` when given. Each source's list
    must be sorted (as a zset reply is)."""
    taken: dict[K, int] = {}
    if n <= 0:
        return taken
    keys = list(candidates)
    merged = heapq.merge(
        *(
            [(score, member, idx) for score, member in candidates[key]]
            for idx, key in enumerate(keys)
        )
    )
    count = 0
    for score, _member, idx in merged:
        if count >= n or (bound is not None and score > bound):
            break
        taken[keys[idx]] = taken.get(keys[idx], 0) + 1
        count += 1
    return taken
