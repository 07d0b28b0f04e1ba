"""How jobs spread over partitions, and one lease batch over weighted queues
(the same rules in every backend)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from ._roles import QueueWeight


def partition_of(job_id: str, partitions: int) -> int:
    """The partition a job ID hashes to (CRC32, the same in every backend)."""
    return zlib.crc32(job_id.encode()) % partitions


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
