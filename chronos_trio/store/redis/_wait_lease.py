"""An idle worker's wait and lease in one round trip (single node).

An idle worker waits for a wake-up (``_waiting``) and then leases: two
round trips between a job's enqueue and its handler. On one node over Trio
sockets, the wait is sent instead as one pipeline on the blocking
connection::

    XREAD COUNT .. BLOCK ms STREAMS <wake_ready> <last seen ID>
    XREVRANGE <wake_ready> + - COUNT 1
    EVALSHA lease.lua ...

Redis holds a blocked client's later commands until the read returns (on
news or at its timeout) and then runs them, so the lease runs right after
the wake-up, and its reply comes with it: no second round trip.

Why no wake-up is missed: ``XREVRANGE`` reads the stream's last ID before
the lease runs; that ID is where the next wait blocks from. A change the
lease did not see was applied after it, so its wake-up (written after the
change) has a later ID and ends the next wait at once. (A stream written
anew after a restart without persistence, IDs behind ours, is seen the
same way: the last ID read is what we block from.)

What is computed when the pipeline is sent: the lease's token nonce, its
count (the caller's free slots then, which only grow while it is idle)
and the partitions (the cached topology, as ``lease`` uses). The lease
script reads the store's clock when it runs, so its lease counts from
then; the caller counts it from the call, which is earlier by at most the
block, capped at :data:`BLOCK_SHARE` of the lease duration.

Only one queue on one node over Trio sockets, not paused, with no replica
``WAIT`` and a wake-up stream the calling task has seen: anything else
returns None and the caller waits with ``wait_ready`` and leases as
before (a Cluster, Sentinel, several queues, whose lease needs a peek first,
and a task that lost its last wake-ups to other workers, which looks
before it leases: see ``_waiting``).

Failure cases:

* ``NOSCRIPT`` (scripts flushed, a restart): the lease did not run; the
  wake-up is taken in and a plain ``lease`` (which loads the script) runs.
* Cancelled while blocked (shutdown): the read is ended at once with
  ``CLIENT UNBLOCK`` and the replies are read, shielded, within
  :data:`UNBLOCK_GRACE` (``NativeNode.block_then``); jobs the lease got
  are released (back to ready at once, the attempt not counted) before the
  cancellation goes on. If the replies do not come in time the connection
  is closed: a lease Redis had not run yet never runs; one it ran is
  recovered when it expires (fenced by its token, as a lease whose reply
  was lost).
* The connection dies after sending: as a lease whose reply was lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ...records._log import log_event
from .._results import LeaseResult, QueueWeight, SettleKind, Settlement
from ._context import StoreContext
from ._errors import is_noscript
from ._jobs import _Batch, _Call, lease, log, settle

#: The block is at most this share of the lease duration, so a lease the
#: caller counts from its call is at most that much shorter on its clock.
BLOCK_SHARE = 0.1
#: A cancelled wait reads its replies (and releases what it leased) within this.
UNBLOCK_GRACE = 2.0


async def wait_lease(
    ctx: StoreContext,
    queues: Sequence[QueueWeight],
    count: int,
    *,
    worker_id: str,
    lease_duration: float,
    strict: bool,
    timeout: float,
) -> LeaseResult | None:
    if count <= 0 or timeout <= 0 or len(queues) != 1 or queues[0].weight <= 0:
        return None
    seen = ctx.wake_seen()
    q = queues[0]
    key = ctx.keys.wake_ready(q.name)
    last = seen.ids.get(key)
    if last is None or seen.cold:
        return None
    meta = (await ctx.meta([q.name]))[q.name]
    if meta.versions is None or meta.paused:
        return None
    pks = ctx.partitions_of(q.name, meta)
    if not pks:
        return None
    batch = _Batch(worker_id, repr(float(lease_duration)))
    calls = [_Call(pks, count)]
    (op,) = batch.ops(calls)
    then = [("XREVRANGE", key, "+", "-", "COUNT", 1), op.args]

    async def release(replies: list[Any]) -> None:
        """A cancelled wait's lease: give back what it got, at once. Never
        raises: what it cannot give back is recovered when its lease ends."""
        try:
            salvaged = _Batch(worker_id, batch.duration)
            salvaged.gather(calls, replies[1:], first=False)
            got = await salvaged.result(ctx, [q])
            if got.jobs:
                await settle(ctx, [Settlement(lj.ref, SettleKind.RELEASE) for lj in got.jobs])
        except Exception as exc:  # StoreError, a reply of a shape we did not write
            log_event(
                log, logging.WARNING, "wait_lease_release_failed", error=repr(exc), queue=q.name
            )

    block = min(timeout, lease_duration * BLOCK_SHARE)
    # COUNT 1: whether any wake-up came is all the read tells (the lease is the look)
    done = await ctx.adapter.xread_then(
        [(key, last)], 1, block, then, salvage=release, grace=UNBLOCK_GRACE
    )
    if done is None:
        return None  # not on this client: nothing was sent
    news, (tail, leased) = done
    seen.update(key, bytes(tail[0][0]) if tail else b"0-0")
    seen.woke = bool(news)  # the lease's outcome tells _waiting's cold logic
    if is_noscript(leased):
        # The script was flushed: the lease did not run. Lease now (the
        # adapter loads it); it runs after the wake-up all the same.
        return await lease(
            ctx, queues, count, worker_id=worker_id, lease_duration=lease_duration, strict=strict
        )
    batch.gather(calls, [leased])
    return await batch.result(ctx, [q])
