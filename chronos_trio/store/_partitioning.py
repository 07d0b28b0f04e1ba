"""How jobs spread over partitions, and one lease batch over weighted queues
(the same rules in every backend)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from ..records._jobs import NewJob
from ..records._producing import new_job_id
from ._roles import QueueWeight


def id_hash(job_id: str) -> int:
    """A job ID's hash (CRC32 of its UTF-8): what partitions are taken from."""
    return zlib.crc32(job_id.encode())


def partition_of(job_id: str, partitions: int) -> int:
    """The partition a job ID hashes to (CRC32, the same in every backend)."""
    return id_hash(job_id) % partitions


def routing_key(job: NewJob) -> str | None:
    """The key whose partition ``job`` must live in: its unique key (where
    its lock lives), else its first flow-control key (where that limit's
    state lives, see ``records._control``); None: routed by its ID."""
    if job.unique is not None and job.unique.key is not None:
        return job.unique.key
    if job.control is not None:
        return job.control.routing_key
    return None


def routed_job_id(job: NewJob, partitions: int) -> str:
    """The ID ``job`` is stored under: one that routes to the partition of
    its :func:`routing_key` (one script, one Cluster slot, judges the key
    and stores or leases the job). An ID the producer made up is drawn
    again until it does (``partitions`` tries on average); a given one that
    does not raises ValueError (leave ``job_id`` unset for a unique or
    limited job of a queue with several partitions)."""
    key = routing_key(job)
    if key is None or partitions <= 1:
        return job.id
    home = partition_of(key, partitions)
    if partition_of(job.id, partitions) == home:
        return job.id
    if job.id_given:
        what = "unique" if job.unique is not None else "limited"
        raise ValueError(
            f"job {job.id!r} is {what} (key {key!r}): its ID must route to the "
            f"partition of its key (partition {home} of {partitions}); leave job_id unset"
        )
    while True:
        job_id = new_job_id()
        if partition_of(job_id, partitions) == home:
            return job_id


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


def share_strictly(
    queues: Sequence[QueueWeight], count: int, available: Mapping[str, int]
) -> dict[str, int]:
    """Split ``count`` lease slots among ``queues`` by strict priority: the
    first queue takes what it has ``available``, up to ``count``, then the
    next one takes what is left, and so on, so a queue gets slots only when
    every queue before it has given all its ready jobs. Weights are ignored,
    except that a queue with weight <= 0 is skipped (as in
    :func:`share_by_weight`)."""
    shares: dict[str, int] = {}
    remaining = count
    for q in queues:
        if remaining <= 0:
            break
        give = min(available.get(q.name, 0), remaining)
        if give > 0 and q.weight > 0:
            shares[q.name] = give
            remaining -= give
    return shares
