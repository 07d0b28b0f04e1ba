"""Choosing which partitions serve a batch so that a queue's jobs come out in
one global order by due time however many partitions it has (within a
partition, equal due times go by job ID)."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Hashable, Mapping, Sequence
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


def runs(flat: Sequence[bytes | int]) -> list[tuple[float, int]]:
    """``[score, count, score, count, ...]`` (a peek_ready.lua reply) as
    (score, count) runs."""
    return [(float(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]


#: The fewest entries a lease's peek describes of a partition (see :func:`peek_cap`).
PEEK_FLOOR = 8


def peek_cap(count: int, partitions: int) -> int:
    """How many entries a lease of ``count`` jobs over ``partitions``
    partitions of one queue has the peek describe of each: twice an even
    share (at least :data:`PEEK_FLOOR`, at most ``count``). A partition whose
    share turns out larger is read again in full (:func:`read_further`)."""
    return min(count, max(PEEK_FLOOR, 2 * -(-count // max(1, partitions))))


def nth_score(sources: Sequence[Sequence[tuple[float, int]]], n: int) -> float | None:
    """The score of the ``n``-th earliest entry (1-based) of all the runs of
    ``sources`` (each sorted by score); None when they hold fewer."""
    seen = 0
    for score, count in heapq.merge(*sources):
        seen += count
        if seen >= n:
            return score
    return None


def read_further(
    heads: Mapping[K, Sequence[tuple[float, int]]], cut: Collection[K], n: int
) -> list[K]:
    """The sources of ``cut`` (whose runs in ``heads`` may stop short of
    their entries) whose entries past those runs could be among the ``n``
    earliest of all the sources of ``heads``: each one of them when all the
    runs hold fewer than ``n`` entries, else those whose last run scores no
    higher than the ``n``-th earliest entry (a later entry of any other
    scores higher: it cannot be among them, and every source's runs then
    describe its share and the entry after it exactly)."""
    if not cut:
        return []
    bar = nth_score(list(heads.values()), n)
    return [k for k in cut if bar is None or not heads[k] or heads[k][-1][0] <= bar]


def earliest_runs(sources: Sequence[tuple[K, Sequence[tuple[float, int]]]], n: int) -> dict[K, int]:
    """How many of the ``n`` earliest entries each source holds, from each
    source's entries in order as runs of (score, count). Among equal
    scores, the source listed first gives first (so a batch of one due time
    comes from as few sources as can give it), then the next; within a
    source, entries go in its own order."""
    taken: dict[K, int] = {}
    heap = [(r[0][0], rank, 0) for rank, (_, r) in enumerate(sources) if r]
    heapq.heapify(heap)
    remaining = n
    while remaining > 0 and heap:
        _, rank, i = heapq.heappop(heap)
        key, r = sources[rank]
        take = min(r[i][1], remaining)
        taken[key] = taken.get(key, 0) + take
        remaining -= take
        if i + 1 < len(r):
            heapq.heappush(heap, (r[i + 1][0], rank, i + 1))
    return taken


def score_at(r: Sequence[tuple[float, int]], rank: int) -> float | None:
    """The score of the entry at ``rank`` (0-based) of runs ``r``; None
    beyond them."""
    for score, count in r:
        if rank < count:
            return score
        rank -= count
    return None


def earliest_bounded(
    sources: Sequence[tuple[K, Sequence[tuple[float, int]]]], n: int
) -> dict[K, tuple[int, float | None]]:
    """:func:`earliest_runs`, with each chosen source's bound: the lowest
    score any other source holds after its own share (None: no other has
    one left). A source may replace what it cannot use of its share by its
    own next entries up to that bound and still give the ``n`` earliest
    usable entries of all of them: no other source's entry comes first."""
    taken = earliest_runs(sources, n)
    after = {key: score_at(r, taken.get(key, 0)) for key, r in sources}
    out: dict[K, tuple[int, float | None]] = {}
    for key, k in taken.items():
        others = [s for other, s in after.items() if other != key and s is not None]
        out[key] = (k, min(others, default=None))
    return out
