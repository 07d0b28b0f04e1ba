"""Idle waiting without fast polling, where no waiter can swallow a wake-up.

Whatever makes jobs ready (enqueue, promote, release, recover, run_now,
requeue_dead, resume, a settle that frees a concurrency slot) adds an entry
to the queue's ready wake-up stream; whatever schedules a job adds its due
time to the queue's scheduled stream (``RedisCore.wake_*_ops``, sent after
the change itself is applied). Waiters read them with ``XREAD BLOCK``, from
the last entry they saw. Reading takes nothing away, so every waiter sees
every wake-up, and a waiter that never reads its reply (a stopped process,
a link that stopped forwarding) hides none from the others. Lists of tokens
popped with BLPOP did: Redis hands a token to the first blocked client, and
a stopped process never reads it, so a healthy idle worker slept on until
its poll interval.

A wake-up sent between a waiter's look and its block is never missed: the
waiter blocks from an entry ID it saw *before* it last looked at the
queues, and a wake-up is written after its change is visible, so one whose
change the look did not see has a later ID. The IDs come from

* the wait's own look: the streams' last IDs are read first, in the same
  pipeline on a single node (Redis runs it in order), in a round trip of
  their own before the look on a Cluster (whose nodes run in parallel);
* or, for a wait that does not look first (``held``; the promoter right
  after its promote_due), what the calling task saw in its previous wait
  (``StoreContext.wake_seen``): the task has looked since (leased,
  promoted). A task that has seen nothing yet reads the IDs and returns at
  once (a spurious return the contract allows): its caller's next look
  comes after them.

A ready-waiter returns on any new entry (the caller's lease is the look),
unless its last wake-up found the job taken by another (its lease after it
got nothing, and it had got no job of its own in the last 100 ms:
``WakeSeen.cold``). Then it waits a little (10 ms, doubling up to 100 ms
while it keeps finding jobs taken; back to 0 once a lease gets jobs), and
looks (one EXISTS on a single node) instead of leasing; wake-ups during
that wait cost it nothing (the look covers them). So one job does not cost
every idle worker a lease, as broadcast wake-ups would otherwise, and an
idle worker that keeps losing costs Redis at most one look per 100 ms
while wake-ups come, however many; the waiters that got the last jobs
still lease at once. A waiter that stalls costs a job at most that wait,
since every other waiter still sees every wake-up.

A promoter looks again only for a due time before its horizon, or when it
got :data:`~._core.WAKE_KEEP` entries at once (older ones may have been
trimmed unseen). A block that ends empty (at ``max_block``, before the
wait's own timeout) reads the last IDs again: one that changed is news (a
stream written anew, lower IDs and all, after a restart without
persistence), so a waiter never stays deaf for longer than one block.

Cost: an idle waiter blocks in one XREAD per ``max_block`` (30 s), plus one
XREVRANGE when it ends empty. Every idle waiter of a queue wakes on each of
its wake-ups (one per batch that made jobs ready, not one per job): the
waiters that got jobs last lease, the others look (see docs/SCALING.md).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, NamedTuple

import trio

from ._alloc import pairs
from ._context import StoreContext, WakeSeen
from ._core import WAKE_KEEP
from ._kinds import is_node
from ._scripts import Op

#: A scheduled wake-up's due time is the producer's estimate of the store's
#: clock; entries this much later than a promoter's horizon still make it look.
_DUE_SLACK = 0.05
#: The ID before every entry: where a waiter starts on a stream that is empty.
_BEFORE_ALL = b"0-0"


class _News(NamedTuple):
    """What a block brought: the fields of each new entry, and whether they
    are every entry since the last seen (none trimmed away unseen)."""

    entries: list[dict[bytes, bytes]]
    complete: bool

    @property
    def nothing(self) -> bool:
        return self.complete and not self.entries


_NOTHING = _News([], complete=True)


def _last_id_ops(keys: Sequence[str]) -> list[Op]:
    return [Op.command(key, "XREVRANGE", key, "+", "-", "COUNT", 1) for key in keys]


def _remember_last(seen: WakeSeen, keys: Sequence[str], replies: Sequence[Any]) -> bool:
    """Record the last IDs that ``_last_id_ops(keys)`` read; whether one changed."""
    changed = False
    for key, reply in zip(keys, replies, strict=True):
        changed |= seen.update(key, bytes(reply[0][0]) if reply else _BEFORE_ALL)
    return changed


async def _in_order(ctx: StoreContext, first: list[Op], then: list[Op]) -> list[Any]:
    """The replies of ``first`` then ``then``, each op of ``first`` applied
    before any of ``then``: one pipeline on a single node, two round trips
    on a Cluster (whose nodes run a batch in parallel)."""
    if first and then and not is_node(await ctx.adapter.client()):
        return [*await ctx.adapter.execute(first), *await ctx.adapter.execute(then)]
    return await ctx.adapter.execute([*first, *then])


async def _any_ready(
    ctx: StoreContext, queues: Sequence[str], seen: WakeSeen, keys: Sequence[str], *, fresh: bool
) -> bool:
    """Whether a queue that is not paused has a ready job; the last IDs of
    ``keys`` are read first (into ``seen``)."""
    metas = await ctx.meta(queues, fresh=fresh)
    slots = [pk for q in queues if not metas[q].paused for pk in ctx.partitions_of(q, metas[q])]
    look: list[Op]
    if not slots:
        look = []
    elif len(slots) > 1 and is_node(await ctx.adapter.client()):
        # One node: one EXISTS over every ready zset (Redis drops an empty one).
        look = [Op.command(None, "EXISTS", *(pk.ready for pk in slots))]
    else:
        look = [Op.command(pk.tag, "ZCARD", pk.ready) for pk in slots]
    replies = await _in_order(ctx, _last_id_ops(keys), look)
    _remember_last(seen, keys, replies[: len(keys)])
    return any(replies[len(keys) :])


async def _earliest_due(
    ctx: StoreContext, queues: Sequence[str], seen: WakeSeen, keys: Sequence[str], *, fresh: bool
) -> float | None:
    """The earliest due time of a scheduled or retry_wait job of ``queues``;
    the last IDs of ``keys`` are read first (into ``seen``)."""
    metas = await ctx.meta(queues, fresh=fresh)
    look = [
        Op.command(pk.tag, "ZRANGE", z, 0, 0, "WITHSCORES")
        for q in queues
        for pk in ctx.partitions_of(q, metas[q])
        for z in (pk.scheduled, pk.retry)
    ]
    replies = await _in_order(ctx, _last_id_ops(keys), look)
    _remember_last(seen, keys, replies[: len(keys)])
    heads = [p[0][0] for r in replies[len(keys) :] if (p := pairs(r))]
    return min(heads, default=None)


def _fields(raw: Any) -> dict[bytes, bytes]:
    """An entry's fields as a dict (an entry of a shape we did not write: empty)."""
    if not isinstance(raw, list | tuple):
        return {}
    return {bytes(k): bytes(v) for k, v in zip(raw[::2], raw[1::2], strict=False)}


async def _read(
    ctx: StoreContext, keys: Sequence[str], seen: WakeSeen, deadline: float
) -> _News | None:
    """Block until one of the streams ``keys`` has entries after the ones
    ``seen`` (which it updates), for at most ``max_block``: the news
    (:data:`_NOTHING` for none), or None when ``deadline`` came first."""
    left = deadline - trio.current_time()
    reply = await ctx.adapter.xread([(k, seen.ids[k]) for k in keys], WAKE_KEEP, left)
    if reply:
        entries: list[dict[bytes, bytes]] = []
        complete = True
        for raw_key, got in reply:
            if got:
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                seen.update(key, bytes(got[-1][0]))
                entries += [_fields(fields) for _, fields in got]
                complete = complete and len(got) < WAKE_KEEP
        return _News(entries, complete)
    if left <= ctx.adapter.max_block:
        return None  # the wait's own time is up
    # A block that ended empty before the wait did: a last ID that changed
    # anyway means a stream written anew (IDs behind ours), which XREAD from
    # our IDs would never show.
    replies = await ctx.adapter.execute(_last_id_ops(keys))
    return _News([], complete=False) if _remember_last(seen, keys, replies) else _NOTHING


async def wait_ready(
    ctx: StoreContext, queues: Sequence[str], timeout: float, *, held: bool = False
) -> None:
    queues = list(dict.fromkeys(queues))
    if not queues or timeout <= 0:
        await trio.lowlevel.checkpoint()
        return
    keys = [ctx.keys.wake_ready(q) for q in queues]
    seen = ctx.wake_seen()
    seen.woke = False
    # XREAD blocks only for what is left, so at the deadline it is usually
    # over already; a late one is abandoned (see RedisAdapter.xread).
    deadline = trio.current_time() + timeout
    with trio.move_on_at(deadline):
        if held:
            # The ready jobs there are held back by flow control: only a
            # wake-up (a new ready job, a freed concurrency slot) is news,
            # so block from what this task saw before its lease.
            unseen = [k for k in keys if k not in seen.ids]
            if unseen:
                _remember_last(seen, unseen, await ctx.adapter.execute(_last_id_ops(unseen)))
                return  # seen nothing before the lease: the caller leases again, after these
        elif await _any_ready(ctx, queues, seen, keys, fresh=False):
            seen.woke = True
            return
        while (news := await _read(ctx, keys, seen, deadline)) is not None:
            if news.nothing:
                continue
            if seen.cold and not held:
                # This task's last wake-up found its job taken: let the
                # waiters that got jobs lease first, then look (one cheap
                # read) instead of leasing. Every waiter still sees every
                # wake-up, so a stalled one delays a job by this at most.
                # Wake-ups meanwhile are covered by the look.
                await trio.sleep(seen.cold * random.uniform(0.5, 1.0))
                fresh = not ctx.any_open_cached(queues)
                if await _any_ready(ctx, queues, seen, keys, fresh=fresh):
                    seen.woke = True
                    return
                seen.colder()  # taken again: look less often while wake-ups keep coming
                continue
            # News, and our cached flags say some queue is open: return at
            # once and let the caller's lease be the look (looking first would
            # add a round trip to every pickup; if another waiter already took
            # the job, the lease comes back empty and the caller waits again,
            # a spurious return the protocol allows).
            # Cached as paused (or unknown): the news may be a resume or a new
            # version in another process, so re-read the flags.
            if ctx.any_open_cached(queues) or await _any_ready(ctx, queues, seen, (), fresh=True):
                seen.woke = not held
                return


async def wait_scheduled(
    ctx: StoreContext, queues: Sequence[str], *, earlier_than: float | None, timeout: float
) -> None:
    queues = list(dict.fromkeys(queues))
    if not queues or timeout <= 0:
        await trio.lowlevel.checkpoint()
        return
    keys = [ctx.keys.wake_scheduled(q) for q in queues]
    seen = ctx.wake_seen()
    deadline = trio.current_time() + timeout

    def wanted(due: float | None, slack: float = 0.0) -> bool:
        return due is not None and (earlier_than is None or due < earlier_than + slack)

    def any_wanted(news: _News) -> bool:
        for fields in news.entries:
            try:
                due = float(fields[b"due"])
            except (KeyError, ValueError):
                return True  # an entry we did not write: look rather than miss one
            if wanted(due, _DUE_SLACK):
                return True
        return False

    with trio.move_on_at(deadline):
        # Right after promote_due reported nothing due before ``earlier_than``,
        # the first look is skipped when this task saw the streams before that
        # promote_due was sent: anything scheduled since wrote a wake-up after
        # those, and XREAD will see it.
        skip = all(k in seen.ids for k in keys) and ctx.promoted_recently(
            queues, earlier_than, after=seen.at
        )
        if not skip and wanted(await _earliest_due(ctx, queues, seen, keys, fresh=False)):
            return
        while (news := await _read(ctx, keys, seen, deadline)) is not None:
            if news.complete and not any_wanted(news):
                continue
            if wanted(await _earliest_due(ctx, queues, seen, (), fresh=False)):
                return
            if wanted(await _earliest_due(ctx, queues, seen, (), fresh=True)):
                return
