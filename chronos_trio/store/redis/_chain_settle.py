"""A chain link's successor stored by its own success settle (``settle.lua``,
kind ``'c'``): the arguments the script takes for it, or None when this
settle cannot store it and the outbox path is taken, as ever.

Only a single node (standalone or Sentinel) is asked: the script reads the
successor's partition keys and its workflow's record, which a Cluster would
refuse from another slot (and the cancel mark, read in the same step as the
successor is made, is what keeps a cancel whole; see ``settle.lua``). The
successor's queue must have one live topology version, read from the cache
(no round trip): while a queue has draining versions, or its topology is not
cached, the continuer enqueues it (``_enqueue`` checks the draining
versions then). The script refuses a closed partition itself.
"""

from __future__ import annotations

import time

from ...records._placement import Placement
from .._partitioning import partition_of
from .._results import Successor
from ._core import RedisCore
from ._enqueue import job_args

#: settle.lua's entries per successor (see its header).
SUCCESSOR_ARGS = 17

#: A successor's queue whose cached topology is older than this share of
#: the cache's TTL (or not cached) is read again in the settle's own round
#: trip (:func:`to_warm`), for the next settles: a worker running chains
#: that are handed over to it may lease nothing for long, and its lease was
#: what kept the cache fresh.
WARM_AFTER = 0.5


def to_warm(core: RedisCore, queue: str) -> bool:
    """Whether ``queue``'s cached topology is due for a read with this
    settle (see :data:`WARM_AFTER`). Never raises."""
    m = core.cached_at(queue)
    return m is None or time.monotonic() - m >= core.topology_ttl * WARM_AFTER


def successor_args(
    core: RedisCore, successor: Successor, token: str = ""
) -> tuple[list[object], Placement, str] | None:
    """settle.lua's 17 entries for ``successor`` (its job as enqueue.lua
    takes it, its partition's ready zset, closed marker and job key prefix,
    its workflow's record hash, then its partition's leased zset, ``token``,
    the lease duration and the lease owner: with a token the script stores
    it leased to ``successor.lease_to``), or None when it goes the outbox
    path: its queue's topology is not cached, or has another version than
    the active one (draining, or none), or is damaged. With the entries,
    the successor's placement (its partition: where a lease of it is) and
    the token it is leased under ('' none: no token given, or its queue is
    paused, whose jobs wait ready)."""
    job = successor.job
    meta = core.cached_meta(job.queue)
    if meta is None:
        return None
    versions = meta.versions
    if not versions or len(versions) != 1 or meta.active is not versions[0]:
        return None
    active = versions[0]
    n = active.partitions
    pk = core.keys.partition(job.queue, active.version, 0 if n == 1 else partition_of(job.id, n))
    wid = successor.workflow
    if meta.paused:
        token = ""  # a paused queue's job waits ready, as a lease would leave it
    return (
        [
            *job_args(job, job.id, "0.0", repr(float(job.timeout)), core.keys.done_channel),
            pk.ready,
            pk.closed,
            pk.job_prefix,
            core.keys.workflow(wid) if wid is not None else "",
            pk.leased,
            token,
            repr(float(successor.lease_duration)) if token else "",
            successor.lease_to if token else "",
        ],
        pk.placement,
        token,
    )
