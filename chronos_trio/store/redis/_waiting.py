"""Idle waiting without fast polling.

Whatever makes jobs ready (enqueue, promote, release, recover, run_now,
requeue_dead, resume) pushes tokens on the queue's ``wake:ready`` list; what
schedules a job pushes its due time on ``wake:scheduled``. A waiter first
looks whether its condition already holds (one pipelined round trip, one
command per partition; a ready-waiter on a single node sends one EXISTS
over all of them), then blocks in BLPOP (at most ``max_block`` seconds per
call). A ready-waiter returns as soon as it pops a token (the
caller's lease is the look); a promoter looks again after each token. So an
idle worker costs a BLPOP per poll interval, and a token pushed between the
look and the BLPOP is never missed: it waits in the list.

Tokens are consumed: one job wakes one waiter, a burst up to WAKE_CAP.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ._alloc import pairs
from ._context import StoreContext
from ._kinds import is_node
from ._scripts import Op

#: A scheduled wake-up's due time is the producer's estimate of the store's
#: clock; tokens this much later than a promoter's horizon still make it look.
_DUE_SLACK = 0.05


async def _any_ready(ctx: StoreContext, queues: Sequence[str], *, fresh: bool) -> bool:
    """Whether a queue that is not paused has a ready job."""
    metas = await ctx.meta(queues, fresh=fresh)
    slots = [pk for q in queues if not metas[q].paused for pk in ctx.partitions_of(q, metas[q])]
    if not slots:
        return False
    if len(slots) > 1 and is_node(await ctx.adapter.client()):
        # One node: one EXISTS over every ready zset (Redis drops an empty one).
        (found,) = await ctx.adapter.execute(
            [Op.command(None, "EXISTS", *(pk.ready for pk in slots))]
        )
        return bool(found)
    counts = await ctx.adapter.execute([Op.command(pk.tag, "ZCARD", pk.ready) for pk in slots])
    return any(counts)


async def _earliest_due(ctx: StoreContext, queues: Sequence[str], *, fresh: bool) -> float | None:
    """The earliest due time of a scheduled or retry_wait job of ``queues``."""
    metas = await ctx.meta(queues, fresh=fresh)
    slots = [pk for q in queues for pk in ctx.partitions_of(q, metas[q])]
    if not slots:
        return None
    replies = await ctx.adapter.execute(
        [
            Op.command(pk.tag, "ZRANGE", z, 0, 0, "WITHSCORES")
            for pk in slots
            for z in (pk.scheduled, pk.retry)
        ]
    )
    heads = [p[0][0] for r in replies if (p := pairs(r))]
    return min(heads, default=None)


async def wait_ready(
    ctx: StoreContext, queues: Sequence[str], timeout: float, *, held: bool = False
) -> None:
    queues = list(dict.fromkeys(queues))
    if not queues or timeout <= 0:
        await trio.lowlevel.checkpoint()
        return
    keys = [ctx.keys.wake_ready(q) for q in queues]
    # BLPOP blocks only for what is left, so at the deadline it is usually over
    # already; a late one is abandoned (see RedisAdapter.blpop).
    deadline = trio.current_time() + timeout
    with trio.move_on_at(deadline):
        # held: the ready jobs there are held back by flow control; only a
        # wake-up (a new ready job, a freed concurrency slot) is news
        if not held and await _any_ready(ctx, queues, fresh=False):
            return
        while True:
            while await ctx.adapter.blpop(keys, deadline - trio.current_time()) is None:
                pass
            # A token, and our cached flags say some queue is open: return at
            # once and let the caller's lease be the look (looking first would
            # add a round trip to every pickup; if another waiter already took
            # the job, the lease comes back empty and the caller waits again,
            # a spurious return the protocol allows).
            if ctx.any_open_cached(queues):
                return
            # Cached as paused (or unknown): the token may come from a resume
            # or a new version in another process, so re-read the flags.
            if await _any_ready(ctx, queues, fresh=True):
                return


async def wait_scheduled(
    ctx: StoreContext, queues: Sequence[str], *, earlier_than: float | None, timeout: float
) -> None:
    queues = list(dict.fromkeys(queues))
    if not queues or timeout <= 0:
        await trio.lowlevel.checkpoint()
        return
    keys = [ctx.keys.wake_scheduled(q) for q in queues]
    deadline = trio.current_time() + timeout

    def wanted(due: float | None, slack: float = 0.0) -> bool:
        return due is not None and (earlier_than is None or due < earlier_than + slack)

    with trio.move_on_at(deadline):
        # Right after promote_due reported nothing due before ``earlier_than``,
        # the first look is skipped: anything scheduled since then pushed a
        # wake-up after it became visible, and BLPOP will see that.
        if not ctx.promoted_recently(queues, earlier_than) and wanted(
            await _earliest_due(ctx, queues, fresh=False)
        ):
            return
        while True:
            got = await ctx.adapter.blpop(keys, deadline - trio.current_time())
            if got is None or not wanted(float(got[1]), _DUE_SLACK):
                continue
            if wanted(await _earliest_due(ctx, queues, fresh=False)):
                return
            if wanted(await _earliest_due(ctx, queues, fresh=True)):
                return
