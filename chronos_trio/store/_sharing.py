"""Splitting one lease batch among weighted queues."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._base import QueueWeight


def share_by_weight(
    queues: Sequence[QueueWeight], count: int, available: Mapping[str, int]
) -> dict[str, int]:
    """Split ``count`` lease slots among ``queues`` in proportion to weight.

    No queue gets more than it has ``available``; slots a queue cannot use go
    to the others, heaviest first, so a batch is never short while any queue
    still has ready jobs. Every queue with work and weight > 0 gets at least
    one slot when ``count`` allows, so a light queue never starves.
    """
    live = [q for q in queues if available.get(q.name, 0) > 0 and q.weight > 0]
    shares = {q.name: 0 for q in live}
    remaining = count
    while remaining > 0 and live:
        total = sum(q.weight for q in live)
        granted = 0
        for q in live:
            want = max(1, remaining * q.weight // total)
            room = available[q.name] - shares[q.name]
            give = min(want, room, remaining - granted)
            shares[q.name] += give
            granted += give
            if granted >= remaining:
                break
        remaining -= granted
        live = [q for q in live if shares[q.name] < available[q.name]]
        if granted == 0:
            break
    return {name: n for name, n in shares.items() if n > 0}
