"""The worker's hot path on Redis: promote, lease, renew, settle, recover.

Each operation costs one pipelined round trip for the whole batch (one per
node on a Cluster). A queue's jobs come out in one order by due time however
it is partitioned (jobs due at the same time: by job ID within a partition,
in no set order across partitions, as the store protocol allows).

On a single node a script may touch the keys of many partitions, so lease,
promote and settle run one script over every partition of the batch: it
splits a lease's count or a promote's limit over the partitions by due time
itself (counting, see ``lua/lib/earliest.lua``), skips the
partitions with nothing to give, and keeps a key of the wrong type from
stopping more than its own partition. Nothing is cached between calls, so a
job enqueued into a partition that was empty is seen by the next call. On a
Cluster a script touches one slot: lease and promote first peek at the
partitions' heads (one more round trip) and then run a script per partition
with its share; settle runs one per partition. Lease's peek reads each
partition's due times as runs of equal ones (peek_ready.lua), not its
entries, first no more than twice an even share of them (a partition whose
share may be larger is peeked again in full), and equal due times go
partition by partition, from a partition each store picks at random: the
jobs of one enqueue_many call share a due time, so a drain's batch is one
or two scripts, not one per partition, and concurrent workers start on
different masters. Jobs that flow control
holds back (or expires) are replaced in the queue's one order: on one node
within the lease script, on a Cluster by further rounds when a partition
cannot make up for them by itself (see _lease_rounds). Promote's and
recover's peeks on a Cluster are due_peek.lua, one per partition: what is
due is judged by each node's TIME, never by the client's estimate of it.
Recovery (not on the hot path) peeks first on a single node too, with one
script over every partition (recover_peek.lua; a queue holding no lease
costs it one EXISTS), then runs recover.lua per partition that has expired
leases.
Leasing from several queues at once peeks first as well (their shares by
weight, or by strict priority, depend on what each holds), then runs one
script per queue on a single node.

Replies are decoded totally: what a script set aside (damaged records it
dead-lettered, index entries without a record, records of a newer format)
comes back in each result's ``aside``; a leased job the script let through
but Python cannot decode (text that is not UTF-8, say) is dead-lettered here
with its lease's token, one more round trip, and reported the same way. No
record makes lease, renew, settle, promote or recover raise.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import trio

from ...records._control import decode_control
from ...records._jobs import Job, JobState, LeasedJob, LeaseRef, require_field_order
from ...records._log import log_event
from ...records._options import decode_headers, encode_headers
from ...records._placement import Placement
from ...records._workflow import holds_failure_handling
from .._partitioning import share_by_weight, share_strictly
from .._record_rules import stored_damage
from .._results import Successor
from .._roles import (
    NOTHING_LEASED,
    NOTHING_SET_ASIDE,
    LeaseResult,
    PromoteResult,
    QueueWeight,
    RecoverResult,
    RenewResult,
    SetAside,
    SettleKind,
    Settlement,
    SettleResult,
    StoreError,
)
from . import _kinds as redis  # isinstance(client, redis.Redis) without importing redis-py
from . import _scripts as S
from ._alloc import earliest, earliest_bounded, pairs, peek_cap, read_further, runs
from ._chain_settle import successor_args, to_warm
from ._codec import (
    READ_FIELDS,
    decode_aside,
    decode_dead,
    ident,
    job_from_fields,
    record_fields,
    then_of,
)
from ._context import StoreContext
from ._scripts import Op
from .keys import LEASED_SENTINEL, PartitionKeys

log = logging.getLogger("chronos_trio.store.redis")

_SETTLE_CODES = {
    SettleKind.SUCCEEDED: "s",
    SettleKind.RETRY: "r",
    SettleKind.DEAD: "d",
    SettleKind.RELEASE: "l",
    SettleKind.DISCARD: "x",
    SettleKind.DEFER: "f",
    SettleKind.ABORTED: "a",
    SettleKind.UNCLAIMED: "u",
}


#: How old a cached topology recovery may use (seconds). A busy worker's
#: hot path refreshes it every second anyway; for an idle one this only
#: delays recovery in a version created by another process in the last 30 s.
RECOVER_TOPOLOGY_AGE = 30.0

#: Longest wait for dead-lettering leased jobs the client could not decode.
_UNDECODABLE_TIMEOUT = 10.0


async def _one_node(ctx: StoreContext) -> bool:
    """Whether the store is one Redis node (standalone, or a Sentinel's
    master) rather than a Cluster: there one script may touch the keys of
    many partitions, so a batch over a whole queue is one script (the client
    is made once, then cached). Raises StoreError when it cannot be made."""
    return isinstance(await ctx.adapter.client(), redis.Redis)


def _nonce() -> str:
    """Per lease.lua call; with a partition's counter it makes tokens unique."""
    return secrets.token_hex(6) + "-"


def _peeked(reply: Any) -> list[tuple[float, bytes]]:
    """A peek's (score, member) pairs; none from an index key of the wrong
    type (its script then fails alone, see :func:`_usable`)."""
    return [] if isinstance(reply, Exception) else pairs(reply)


async def _due_peek(
    ctx: StoreContext,
    slots: Sequence[PartitionKeys],
    zsets_of: Callable[[PartitionKeys], tuple[str, ...]],
    limit: int,
) -> tuple[dict[PartitionKeys, list[tuple[float, bytes]]], dict[PartitionKeys, float], float]:
    """On a Cluster: what is due in each partition's ``zsets_of`` zsets by
    the store's clock (one due_peek.lua per partition, one round trip):
    per partition its due entries' scores, first ``limit`` of each zset,
    merged and sorted (members left empty: the scripts that act pick
    their own); each partition's first score (its head; none when its
    zsets are empty); and the store's now (the latest any node told). A
    partition whose peek failed (a key of the wrong type) shows nothing:
    its own script then fails alone."""
    replies = await ctx.adapter.execute(
        [Op.script_call(S.DUE_PEEK, list(zsets_of(pk)), [limit], soft=True) for pk in slots]
    )
    cands: dict[PartitionKeys, list[tuple[float, bytes]]] = {}
    heads: dict[PartitionKeys, float] = {}
    now: float | None = None
    for pk, reply in zip(slots, replies, strict=True):
        if isinstance(reply, Exception):
            cands[pk] = []
            continue
        told = float(reply[0])
        now = told if now is None else max(now, told)
        firsts = [float(z[0]) for z in reply[1:] if z[0]]
        if firsts:
            heads[pk] = min(firsts)
        cands[pk] = sorted((float(score), b"") for z in reply[1:] for score in z[1:])
    if now is None:  # every peek failed: the store's clock all the same
        (t,) = await ctx.adapter.execute([Op.command(None, "TIME")])
        now = int(t[0]) + int(t[1]) / 1_000_000
    return cands, heads, ctx.observe_now(now)


def _usable(slots: Sequence[Any], replies: list[Any], what: str) -> list[Any]:
    """The replies of one script per partition, with None for a partition
    whose script failed (an error reply: a key of that partition of the
    wrong type, say), so one broken partition does not discard what the
    others already did (leases taken, jobs moved). Raises StoreError when
    every partition failed: nothing was done, and the caller backs off."""
    failed = [(s, r) for s, r in zip(slots, replies, strict=True) if isinstance(r, Exception)]
    if not failed:
        return replies
    for slot, error in failed:
        pk = slot[0] if isinstance(slot, tuple) else slot
        log_event(
            log, logging.WARNING, f"{what}: partition failed", partition=pk.tag, error=str(error)
        )
    if len(failed) == len(replies):
        raise StoreError(f"{what} failed in every partition: {failed[0][1]}")
    return [None if isinstance(r, Exception) else r for r in replies]


# -- promote ---------------------------------------------------------------------------
def _promote_op(pks: Sequence[PartitionKeys], limit: int, groups: Sequence[int]) -> Op:
    """One promote.lua call over ``pks``, in ``groups`` of partitions (see its header)."""
    keys = [
        key
        for pk in pks
        for key in (pk.scheduled, pk.retry, pk.ready, pk.job_prefix, pk.dead, pk.damaged)
    ]
    return Op.script_call(S.PROMOTE, keys, [limit, *groups], soft=True)


async def promote_due(ctx: StoreContext, queues: Sequence[str], limit: int) -> PromoteResult:
    sent = time.monotonic()  # what wait_scheduled compares its wake-up IDs with
    order = list(dict.fromkeys(queues))
    metas = await ctx.meta(order)
    by_queue = {q: ctx.partitions_of(q, metas[q]) for q in order}
    slots = [pk for pks in by_queue.values() for pk in pks]
    if not slots:
        (t,) = await ctx.adapter.execute([Op.command(None, "TIME")])
        return PromoteResult(0, None, int(t[0]) + int(t[1]) / 1_000_000)
    plan: list[tuple[Sequence[PartitionKeys], int]]
    heads: dict[PartitionKeys, float] = {}
    now: float | None = None
    # Wake-ups sent with the promotion itself (after it, in the same round
    # trip on one node): an idle leaser wakes a round trip sooner than after
    # a wake-up sent once the promotion's reply is in.
    sent_early: list[str]
    if len(slots) == 1 or await _one_node(ctx):
        # One script promotes every queue, the split over partitions (in one
        # order per queue, queue after queue) included: no peek. The queues
        # whose next job was due by now (the promoter slept until then) are
        # woken with it; if nothing was due after all, that wake-up is a
        # spurious one, which waiters allow.
        groups = [len(pks) for pks in by_queue.values() if pks]
        plan, ops = [(slots, limit)], [_promote_op(slots, limit, groups)]
        sent_early = ctx.due_by_now(order)
    else:
        plan, heads, now = await _promote_plan(ctx, order, slots, limit)
        ops = [_promote_op(pks, n, [1]) for pks, n in plan]
        sent_early = list(dict.fromkeys(pks[0].queue for pks, _ in plan))  # the peek saw them
    promoted = 0
    aside = NOTHING_SET_ASIDE
    woke: dict[str, int] = {}
    if ops:
        replies = await ctx.adapter.execute(
            ops, after=ctx.wake_ready_ops(dict.fromkeys(sent_early, 1))
        )
        for reply, pk, part in _partitions_done(plan, replies, "promote", first=1):
            n, next_due, raw_aside = part
            now = ctx.observe_now(reply[0])
            aside += decode_aside(raw_aside, pk.queue, pk.placement)
            promoted += n
            if n:
                woke[pk.queue] = woke.get(pk.queue, 0) + n
            heads.pop(pk, None)  # a peek's head may have just been promoted
            if next_due:
                heads[pk] = float(next_due)
    late = {q: n for q, n in woke.items() if q not in sent_early}
    if late:
        await ctx.adapter.execute([], after=ctx.wake_ready_ops(late))
    assert now is not None  # from the peek, or from a script (else StoreError)
    queue_heads: dict[str, float] = {}
    for pk, head in heads.items():
        queue_heads[pk.queue] = min(head, queue_heads.get(pk.queue, head))
    ctx.record_promote(order, queue_heads, sent)
    return PromoteResult(promoted, min(heads.values(), default=None), now, ctx.count_aside(aside))


async def _promote_plan(
    ctx: StoreContext, order: Sequence[str], slots: Sequence[PartitionKeys], limit: int
) -> tuple[list[tuple[Sequence[PartitionKeys], int]], dict[PartitionKeys, float], float]:
    """On a Cluster (one slot per script): a promote.lua call per partition
    with due jobs, each with its share of ``limit`` in one order per queue,
    queue after queue, from a peek at the due entries; also each partition's
    first due time (its head) and the store's clock."""
    # One due_peek.lua per partition: the due prefixes of its two zsets by
    # that node's own TIME (never the client's estimate: after a step of
    # the store's clock that would miss what just came due), and their
    # heads; only entries due by now are sent. The promote scripts re-check
    # due times themselves.
    cands, heads, now = await _due_peek(ctx, slots, lambda pk: (pk.scheduled, pk.retry), limit)
    plan: list[tuple[Sequence[PartitionKeys], int]] = []
    remaining = limit
    for q in order:
        taken = earliest({pk: c for pk, c in cands.items() if pk.queue == q}, remaining, bound=now)
        plan += [((pk,), n) for pk, n in taken.items()]
        remaining -= sum(taken.values())
    return plan, heads, now


# -- lease -----------------------------------------------------------------------------
#: On a Cluster, at most this many rounds per lease call (each round after
#: the first costs a peek and a lease, two round trips): further rounds
#: replace jobs that flow control held back, or that expired, in one
#: partition by the next ready jobs of the others (see _lease_rounds).
CLUSTER_LEASE_ROUNDS = 4

#: Entries a lease looks at beyond its count, at most (as lease.lua does).
_LOOK_BEYOND = 256


class _Call(NamedTuple):
    """One lease.lua call: the partitions it leases from in global order,
    its count, and for a Cluster's partition its bound, how many entries
    at the head to pass over, and how many to look at (lease.lua ARGV[6..8])."""

    pks: Sequence[PartitionKeys]
    n: int
    bound: float | None = None
    skip: int = 0
    budget: int | None = None


class _Ran(NamedTuple):
    """What one partition's lease script did (lease.lua's flow part)."""

    leased: int
    #: entries it judged and put back at the head of its ready zset
    held: int
    #: False when its ready zset ran out
    more: bool
    looked: int


class _Batch:
    """What the lease scripts of one lease call gave, round after round
    (plain slots: this is on the hot path)."""

    __slots__ = (
        "aside", "by_queue", "capped", "duration", "expired", "held_until", "lease_now",
        "sources", "undecodable", "worker_id",
    )  # fmt: skip

    def __init__(self, worker_id: str, duration: str) -> None:
        self.worker_id, self.duration = worker_id, duration
        self.by_queue: dict[str, list[LeasedJob]] = {}
        self.aside = NOTHING_SET_ASIDE
        self.undecodable: list[tuple[PartitionKeys, bytes, bytes, str]] = []
        #: Per queue, how many partitions its jobs came from (one: already in order).
        self.sources: dict[str, int] = {}
        self.expired: tuple[Job, ...] = ()
        self.held_until: float | None = None
        self.capped = False
        self.lease_now = 0.0

    def ops(self, calls: Sequence[_Call]) -> list[Op]:
        """The lease.lua calls of ``calls``."""
        ops = []
        for c in calls:
            argv: list[object] = [c.n, self.duration, self.worker_id, _nonce(), LEASED_SENTINEL]
            if len(c.pks) == 1 and (c.bound is not None or c.skip or c.budget is not None):
                bound = "" if c.bound is None else repr(c.bound)
                argv += [bound, c.skip, "" if c.budget is None else c.budget]
            keys = [
                key
                for pk in c.pks
                for key in (pk.ready, pk.leased, pk.tokens, pk.job_prefix, pk.dead, pk.damaged)
            ]
            ops.append(Op.script_call(S.LEASE, keys, argv, soft=True))
        return ops

    def gather(
        self, calls: Sequence[_Call], replies: list[Any], *, first: bool = True
    ) -> dict[PartitionKeys, _Ran]:
        """Take in the replies to ``calls``; what each partition that had
        ready jobs did. Raises StoreError when every partition failed in
        the ``first`` round of the call (nothing done)."""
        ran: dict[PartitionKeys, _Ran] = {}
        plan = [(c.pks, c.n) for c in calls]
        for reply, pk, part in _partitions_done(plan, replies, "lease", must_run=first):
            self.lease_now = now = float(reply[0])
            self.aside += decode_aside(part[0], pk.queue, pk.placement)
            flow = part[1]
            if flow[0]:
                self.expired += decode_dead(flow[0], pk.queue, pk.placement)
            if flow[1]:
                until = float(flow[1])
                self.held_until = until if self.held_until is None else min(self.held_until, until)
            self.capped = self.capped or flow[2] == 1
            got = _leased_jobs(part, reply[1], now, pk, self.worker_id, self.undecodable)
            self.by_queue.setdefault(pk.queue, []).extend(got)
            self.sources[pk.queue] = self.sources.get(pk.queue, 0) + 1
            ran[pk] = _Ran((len(part) - 2) // 11, int(flow[4]), flow[5] == 1, int(flow[6]))
        return ran

    async def result(self, ctx: StoreContext, live: Sequence[QueueWeight]) -> LeaseResult:
        """The lease's result (leased jobs the client could not decode are
        dead-lettered first, see :func:`_dead_letter_undecodable`)."""
        if self.lease_now:
            ctx.observe_now(self.lease_now)
        if self.undecodable:
            # Shielded: a cancellation here must not drop the healthy jobs this
            # call has already leased (their reply is in hand).
            with trio.move_on_after(_UNDECODABLE_TIMEOUT, shield=True):
                self.aside += await _dead_letter_undecodable(ctx, self.undecodable)
        jobs: list[LeasedJob] = []
        for qw in live:
            mine = self.by_queue.pop(qw.name, [])
            if self.sources.get(qw.name, 0) > 1:
                mine.sort(key=lambda lj: (-lj.job.priority, lj.job.run_at, lj.job.id))
            jobs += mine
        ctx.leased(bool(jobs), self.held_until is not None or self.capped)  # the wake-up's fate
        return LeaseResult(
            tuple(jobs),
            ctx.count_aside(self.aside),
            self.expired,
            None if self.held_until is None else max(0.0, self.held_until - self.lease_now),
            self.capped,
        )


async def lease(
    ctx: StoreContext,
    queues: Sequence[QueueWeight],
    count: int,
    *,
    worker_id: str,
    lease_duration: float,
    strict: bool = False,
) -> LeaseResult:
    if count <= 0 or not queues:
        return NOTHING_LEASED
    metas = await ctx.meta([q.name for q in queues])
    live = [q for q in queues if metas[q.name].versions is not None and not metas[q.name].paused]
    slots = {q.name: ctx.partitions_of(q.name, metas[q.name]) for q in live if q.weight > 0}
    slots = {q: pks for q, pks in slots.items() if pks}
    if not slots:
        return NOTHING_LEASED
    one_node = await _one_node(ctx)
    batch = _Batch(worker_id, repr(float(lease_duration)))
    if len(slots) == 1 and (one_node or sum(map(len, slots.values())) == 1):
        # One queue on one node (or of one partition): one script does it all,
        # the split over partitions included. No peek, one round trip.
        calls = [_Call(next(iter(slots.values())), count)]
        batch.gather(calls, await ctx.adapter.execute(batch.ops(calls)))
        return await batch.result(ctx, live)
    # One node: the script splits a queue's share in global order, the
    # peek only tells each queue's ready jobs (for the shares by weight,
    # or, strict, for how many the queues before the next one can give).
    # A Cluster: a script per partition (one slot each), with its share
    # in one order by due time, from the peek (see _lease_peek).
    heads = await _lease_peek(ctx, slots, count)
    available = {
        q: min(count, sum(n for pk in pks for _, n in heads[pk])) for q, pks in slots.items()
    }
    split = share_strictly if strict else share_by_weight
    shares = split(live, count, available)
    if one_node:
        if shares:
            calls = [_Call(slots[q], share) for q, share in shares.items()]
            batch.gather(calls, await ctx.adapter.execute(batch.ops(calls)))
    else:
        await _lease_rounds(ctx, batch, {q: slots[q] for q in shares}, shares, heads)
    return await batch.result(ctx, live)


async def _lease_rounds(
    ctx: StoreContext,
    batch: _Batch,
    slots: dict[str, list[PartitionKeys]],
    shares: dict[str, int],
    heads: dict[PartitionKeys, list[tuple[float, int]]],
) -> None:
    """On a Cluster: lease each queue's share with a script per partition,
    in the queue's one order by due time, in rounds. A partition's script
    replaces what it cannot lease (held back by a limit, expired, set
    aside) by its own next jobs only while no other partition's job comes
    first (its bound, from the peek); when a queue is still short and some
    partition may have more, another round peeks past the entries held
    back so far and leases what is still wanted, and so on, up to
    :data:`CLUSTER_LEASE_ROUNDS` rounds, looking at no more than a queue's
    share + 256 entries (as on one node). Without flow control, or when
    each partition can make up for what it held back, that is one round:
    the peek and one round trip."""
    skip: dict[PartitionKeys, int] = {}
    done_with: set[PartitionKeys] = set()
    wanted = dict(shares)
    looked = dict.fromkeys(shares, 0)
    for round_ in range(CLUSTER_LEASE_ROUNDS):
        calls: list[_Call] = []
        for q, n in wanted.items():
            # Equal due times go partition by partition, in an order of this
            # store's own: a batch of one due time comes from as few
            # partitions (scripts) as can give it, and concurrent workers
            # start from different partitions (masters).
            pks = slots[q]
            if not pks:
                continue
            first = ctx.tie_rotation % len(pks)
            order = [(pk, heads[pk]) for pk in (*pks[first:], *pks[:first])]
            budget = shares[q] + _LOOK_BEYOND - looked[q] if round_ else None
            calls += [
                _Call((pk,), k, bound, skip.get(pk, 0), budget)
                for pk, (k, bound) in earliest_bounded(order, n).items()
            ]
        if not calls:
            return
        ran = batch.gather(calls, await ctx.adapter.execute(batch.ops(calls)), first=not round_)
        asked = {c.pks[0] for c in calls}
        # a partition asked that did not run failed (a key of the wrong
        # type) or had no ready job, one that ran out has none left but
        # what it held back: later rounds leave them alone
        done_with |= asked - ran.keys()
        done_with |= {pk for pk, r in ran.items() if not r.more}
        again: dict[str, int] = {}
        for q, n in wanted.items():
            mine = [ran[pk] for pk in slots[q] if pk in ran]
            looked[q] += sum(r.looked for r in mine)
            for pk in slots[q]:
                if pk in ran:
                    skip[pk] = skip.get(pk, 0) + ran[pk].held
            n -= sum(r.leased for r in mine)
            # more to find: a partition that ran and did not run out, or one
            # with ready jobs this round did not ask
            more = any(r.more for r in mine) or any(
                heads[pk] and pk not in asked and pk not in done_with for pk in slots[q]
            )
            if n > 0 and more and looked[q] < shares[q] + _LOOK_BEYOND:
                again[q] = n
        if not again or round_ + 1 == CLUSTER_LEASE_ROUNDS:
            return
        wanted = again
        slots = {q: [pk for pk in slots[q] if pk not in done_with] for q in wanted}
        heads = await _lease_peek(ctx, slots, max(wanted.values()), skip)


async def _lease_peek(
    ctx: StoreContext,
    slots: dict[str, list[PartitionKeys]],
    count: int,
    skip: dict[PartitionKeys, int] | None = None,
) -> dict[PartitionKeys, list[tuple[float, int]]]:
    """The due times of the first ``count`` ready jobs of each partition of
    ``slots`` (after the first ``skip[pk]``, held back by an earlier round),
    as runs of (due time, how many): peek_ready.lua per
    partition, one round trip (one per node on a Cluster). Runs, not the
    entries: the jobs of one enqueue_many call share a due time, and
    sending, decoding and merging 64 entries of each of 8 partitions per
    lease cost more than the lease scripts. A key of the wrong type reads
    as empty (its lease script then fails alone).

    Of a queue's partitions the peek first describes :func:`~._alloc.peek_cap`
    entries each (jobs of distinct due times cost Redis a formatted score
    each: 64 of them about 470,000 instructions a partition); a partition
    whose entries past those could be among the queue's ``count`` earliest
    (:func:`~._alloc.read_further`) is peeked again in full, in a second
    round trip. So the runs returned describe every partition's share of
    the ``count`` earliest and the entry after it exactly, as a full peek
    would."""
    skip = skip or {}
    caps = {pk: peek_cap(count, len(pks)) for pks in slots.values() for pk in pks}
    heads, cut = await _peek(ctx, caps, count, skip)
    again = [
        pk
        for pks in slots.values()
        for pk in read_further({pk: heads[pk] for pk in pks}, cut & set(pks), count)
    ]
    if again:
        fuller, _ = await _peek(ctx, dict.fromkeys(again, count), count, skip)
        heads.update(fuller)
    return heads


async def _peek(
    ctx: StoreContext, caps: dict[PartitionKeys, int], count: int, skip: dict[PartitionKeys, int]
) -> tuple[dict[PartitionKeys, list[tuple[float, int]]], set[PartitionKeys]]:
    """peek_ready.lua of each partition of ``caps``, reading no further than
    its cap: the runs of each, and the partitions whose peek stopped at its
    cap with entries left."""
    flat = list(caps)
    ops = []
    for pk in flat:
        argv: list[object] = [count]
        if caps[pk] < count:
            argv += [skip.get(pk, 0), caps[pk]]
        elif skip.get(pk):
            argv.append(skip[pk])
        ops.append(Op.script_call(S.PEEK_READY, [pk.ready], argv, soft=True))
    heads: dict[PartitionKeys, list[tuple[float, int]]] = {}
    cut: set[PartitionKeys] = set()
    for pk, r in zip(flat, await ctx.adapter.execute(ops), strict=True):
        if isinstance(r, Exception):
            heads[pk] = []
            continue
        if r[0] == 1:
            cut.add(pk)
        heads[pk] = runs(r[1:])
    return heads, cut


def _partitions_done(
    plan: Sequence[tuple[Sequence[PartitionKeys], int]],
    replies: list[Any],
    what: str,
    *,
    first: int = 2,
    must_run: bool = True,
) -> list[tuple[Any, PartitionKeys, Any]]:
    """(reply, partition, its part) of every partition that a multi-partition
    script ran in (lease.lua, promote.lua: their replies hold one part per
    partition from index ``first`` on), from the replies to ``plan``'s
    calls. A partition with no share (an empty part) is left out; one that
    failed (its part is the reason, or its call got an error reply: a key of
    the wrong type, say) is logged and left out, so one broken partition
    does not discard what the others already did. Raises StoreError when
    some partition failed and none ran (unless not ``must_run``: a later
    round of a call that did something): nothing was done, and the caller
    backs off."""
    done: list[tuple[Any, PartitionKeys, Any]] = []
    failed: list[tuple[PartitionKeys, object]] = []
    for (pks, _), reply in zip(plan, replies, strict=True):
        if isinstance(reply, Exception):
            failed.append((pks[0], reply))
            continue
        for pk, part in zip(pks, reply[first:], strict=True):
            if isinstance(part, bytes):
                failed.append((pk, part.decode(errors="replace")))
            elif part:
                done.append((reply, pk, part))
    for pk, error in failed:
        log_event(
            log, logging.WARNING, f"{what}: partition failed", partition=pk.tag, error=str(error)
        )
    if failed and not done and must_run:
        raise StoreError(f"{what} failed in every partition: {failed[0][1]}")
    return done


require_field_order(
    Job,
    (
        "id", "queue", "kind", "payload", "run_at", "state", "attempts", "max_retries",
        "timeout", "lease_token", "lease_owner", "lease_expires_at", "placement",
        "last_error", "created_at", "finished_at", "damage", "result",
        "result_until", "headers", "then", "control", "unclaimed_since", "history",
    ),
    "store.redis._jobs._leased_jobs",
)  # fmt: skip


def _leased_jobs(
    reply: list[Any],
    expires_at: bytes,
    leased_at: float,
    pk: PartitionKeys,
    worker_id: str,
    undecodable: list[tuple[PartitionKeys, bytes, bytes, str]],
) -> list[LeasedJob]:
    """The jobs of one partition's part of a lease.lua reply (see its header
    for the layout). The script judged the fields it reads (format, state,
    kind and payload present, attempts); the others are judged here, as
    they are decoded, by the same rules (``store._record_rules``), so a
    lease takes exactly the ready records the store checker calls usable. A
    job that fails is added to ``undecodable`` (partition, raw id, raw
    token, why) instead of the result. ``expires_at`` is the reply's
    expiry, as sent, and ``leased_at`` its store time (lease.lua's TIME)."""
    expires = float(expires_at)
    queue, placement = pk.queue, pk.placement
    leased = JobState.LEASED
    out = []
    # a job with flow control: its number in the part -> its fc (lease.lua)
    flat = reply[1][3]
    controls = {flat[c]: flat[c + 1] for c in range(0, len(flat), 2)} if flat else None
    # a workflow job: its number in the part -> its extras (lease.lua)
    flat = reply[1][7]
    thens = {flat[c]: flat[c + 1] for c in range(0, len(flat), 2)} if flat else None
    for n, k in enumerate(range(2, len(reply), 11), 1):
        fc = controls.get(n) if controls else None
        try:
            token = reply[k + 1].decode()
            # parse_number / parse_count inlined (the one judgement, on
            # every leased job): float() reads what they read plus
            # underscores; x - x is NaN (true) for inf and NaN, 0.0 for a
            # finite x. Anything refused here is named by _why_undecodable,
            # which judges with them.
            raw_run_at, raw_max = reply[k + 4], reply[k + 6]
            raw_timeout, raw_created = reply[k + 7], reply[k + 9]
            run_at, timeout, created_at = float(raw_run_at), float(raw_timeout), float(raw_created)
            if (
                run_at - run_at
                or created_at - created_at
                or not timeout > 0  # inf allowed (no timeout); NaN refused
                or not (raw_max.isdigit() and len(raw_max) <= 15)
                or b"_" in raw_run_at
                or b"_" in raw_timeout
                or b"_" in raw_created
            ):
                raise ValueError("a field is not a number of its kind")
            max_retries = int(raw_max)
            raw_headers = reply[k + 10]
            error = reply[k + 8]
            job = Job(
                reply[k].decode(), queue, reply[k + 2].decode(), reply[k + 3],
                run_at, leased, int(reply[k + 5]), max_retries,
                timeout, token, worker_id, expires, placement,
                error.decode("utf-8", "backslashreplace") if error else "", created_at, None, "",
                None, None, decode_headers(raw_headers) if raw_headers else (),
                then_of(thens.get(n)) if thens else None,
                decode_control(fc.decode()) if fc else None,
            )  # fmt: skip
        except (UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
            why = _why_undecodable(reply, k, fc, exc)
            undecodable.append((pk, reply[k], reply[k + 1], why))
            continue
        out.append(LeasedJob(job, token, expires, leased_at))
    return out


def _why_undecodable(reply: list[Any], k: int, fc: bytes | None, exc: Exception) -> str:
    """Why the lease reply's job at ``k`` could not be used, naming the
    field (the one judgement of ``store._record_rules``, as the store
    checker names it)."""
    if not isinstance(reply[k], bytes):
        return f"job ID {reply[k]!r} is not text"
    try:
        reply[k].decode()
    except UnicodeDecodeError:
        return f"job ID {ident(reply[k])!r} is not UTF-8 text"
    fields: dict[str, bytes | None] = {
        "kind": reply[k + 2], "payload": reply[k + 3], "run_at": reply[k + 4] or None,
        "state": b"ready", "attempts": b"0", "max_retries": reply[k + 6],
        "timeout": reply[k + 7], "last_error": reply[k + 8], "created_at": reply[k + 9],
        "h": reply[k + 10] or None, "fc": fc,
    }  # fmt: skip
    damage = stored_damage(fields)
    if damage:
        return "; ".join(damage.values())
    return f"the lease reply could not be decoded ({type(exc).__name__}: {exc})"


async def _dead_letter_undecodable(
    ctx: StoreContext, jobs: list[tuple[PartitionKeys, bytes, bytes, str]]
) -> SetAside:
    """Dead-letter leased jobs Python could not decode, with their fresh
    lease's token (a fenced settle: if the lease is somehow gone, nothing
    changes and recovery takes the job back), and read them back to report.
    The reads go after the settles, in a round trip of their own: in one
    batch a settle that met NOSCRIPT runs again after them, and they would
    read the job as it was."""
    settles, reads = [], []
    for pk, job_id, token, why in jobs:
        argv: list[object] = [job_id, token, "d", f"damaged record: {why}", "0", "0", *_NO_RESULT]
        settles.append(_settle_op({pk: argv}))
        reads.append(Op.soft_command(pk.tag, "HGETALL", pk.job_prefix.encode() + job_id))
    try:
        settled = await ctx.adapter.execute(settles)
        stored_now = await ctx.adapter.execute(reads)
        replies = [r for pair in zip(settled, stored_now, strict=True) for r in pair]
    except StoreError as exc:
        # Still leased: recovery takes them back after their lease, and the
        # next lease dead-letters them again (their attempts count, so
        # recovery dead-letters them in the end). Never fail the healthy jobs.
        log_event(
            log,
            logging.WARNING,
            "could not dead-letter undecodable jobs",
            count=len(jobs),
            error=str(exc),
        )
        return NOTHING_SET_ASIDE
    dead = []
    for n, (pk, job_id, _, why) in enumerate(jobs):
        part, stored = replies[2 * n][1], replies[2 * n + 1]
        if isinstance(part, bytes) or part[1] != 1 or isinstance(stored, Exception):
            log_event(
                log,
                logging.WARNING,
                "could not dead-letter undecodable job",
                job=ident(job_id),
                why=why,
            )
            continue
        fields, problem = record_fields(stored)
        dead.append(
            job_from_fields(ident(job_id), pk.queue, pk.placement, fields, payload_problem=problem)
        )
    return SetAside(dead=tuple(dead))


# -- renew and settle --------------------------------------------------------------------
def _group(ctx: StoreContext, refs: Sequence[LeaseRef]) -> dict[PartitionKeys, list[int]]:
    groups: dict[PartitionKeys, list[int]] = {}
    for i, ref in enumerate(refs):
        pk = ctx.keys.placed(ref.queue, ref.placement)
        groups.setdefault(pk, []).append(i)
    return groups


async def renew(
    ctx: StoreContext, leases: Sequence[LeaseRef], lease_duration: float
) -> RenewResult:
    groups = _group(ctx, leases)
    duration = repr(float(lease_duration))
    ops = []
    for pk, idxs in groups.items():
        argv: list[object] = [duration]
        for i in idxs:
            argv += [leases[i].job_id, leases[i].token]
        ops.append(Op.script_call(S.RENEW, [pk.leased, pk.job_prefix, pk.dead], argv))
    replies = await ctx.adapter.execute(ops)
    results = [False] * len(leases)
    flagged: list[int] = []
    aside = NOTHING_SET_ASIDE
    for (pk, idxs), reply in zip(groups.items(), replies, strict=True):
        aside += decode_aside(reply[1], pk.queue, pk.placement)
        for k, i in enumerate(idxs):
            code = reply[2 + k]
            results[i] = code == 1 or code == 4
            if code == 4:  # renewed, and an abort was asked (renew.lua)
                flagged.append(i)
    return RenewResult(tuple(results), ctx.count_aside(aside), frozenset(flagged))


#: Settle kinds that put the job back to wait for a due time (promoters are woken).
_WAITS_AGAIN = frozenset({SettleKind.RETRY, SettleKind.DEFER, SettleKind.UNCLAIMED})

#: settle.lua's result and result_ttl arguments when there is no result to keep.
_NO_RESULT = ("", "")


def _settle_op(
    argv_of: dict[PartitionKeys, list[object]],
    successors: dict[PartitionKeys, list[object]] | None = None,
) -> Op:
    """One settle.lua call over the partitions of ``argv_of`` (partition ->
    its settlements' arguments, 8 each, see settle.lua), then the successors
    of its chain links (``successors``: partition -> their arguments, 13
    each, in the order of its settlements of kind 'c')."""
    keys = [
        key
        for pk in argv_of
        for key in (pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead, pk.job_prefix)
    ]
    argv: list[object] = [len(a) // 8 for a in argv_of.values()]
    for a in argv_of.values():
        argv += a
    if successors:
        for pk in argv_of:
            argv += successors.get(pk, ())
    return Op.script_call(S.SETTLE, keys, argv)


async def _chain_successors(
    ctx: StoreContext, settlements: Sequence[Settlement]
) -> tuple[dict[int, tuple[list[object], Placement, str]], list[str]]:
    """settle.lua's arguments of each chain link's successor this settle can
    store itself (by settlement index; see ``_chain_settle``), with where it
    goes and the token of its lease when its worker takes it over
    (``Successor.lease_to``; '' none): none on a Cluster. Then the
    successors' queues whose cached topology the settle's round trip reads
    again (``to_warm``). Raises StoreError when the client cannot be made."""
    found: dict[int, tuple[list[object], Placement, str]] = {}
    seen: dict[str, bool] = {}  # queue -> whether to warm it (looked at once)
    nonce = ""
    for i, s in enumerate(settlements):
        successor = s.successor
        if successor is not None and s.kind is SettleKind.SUCCEEDED:
            queue = successor.job.queue
            if queue not in seen:
                if not seen and not await _one_node(ctx):
                    return {}, []
                seen[queue] = to_warm(ctx, queue)
            token = ""
            if successor.lease_to:
                # the call's nonce and a count, "h" between them: never a
                # token lease.lua issues (its nonce is followed by digits)
                nonce = nonce or _nonce()
                token = f"{nonce}h{i}"
            got = successor_args(ctx, successor, token)
            if got is not None:
                found[i] = got
    return found, [q for q, warm in seen.items() if warm]


def _handed_over(successor: Successor, token: str, placement: Placement, now: float) -> LeasedJob:
    """The lease settle.lua made of ``successor`` (code 8): its job as a
    lease of it reads it back (state leased, its first attempt, due and
    created now), fenced by ``token``."""
    new = successor.job
    expires = now + successor.lease_duration
    # its headers as a lease reads them back (stored encoded, see job_args)
    headers = decode_headers(encode_headers(new.headers)) if new.headers else ()
    job = Job(
        new.id, new.queue, new.kind, new.payload, now, JobState.LEASED, 1, new.max_retries,
        float(new.timeout), token, successor.lease_to, expires, placement, "", now, None, "",
        None, None, headers, new.then, None,
    )  # fmt: skip
    return LeasedJob(job, token, expires, now)


async def settle(ctx: StoreContext, settlements: Sequence[Settlement]) -> SettleResult:
    groups = _group(ctx, [s.lease for s in settlements])
    chains, warm = await _chain_successors(ctx, settlements)
    argv_of: dict[PartitionKeys, list[object]] = {}
    tails: dict[PartitionKeys, list[object]] = {}
    for pk, idxs in groups.items():
        argv: list[object] = []
        for i in idxs:
            s = settlements[i]
            # retain_for's place carries an UNCLAIMED settle's grace (settle.lua)
            keep = s.unclaimed_grace if s.kind is SettleKind.UNCLAIMED else s.retain_for
            code = _SETTLE_CODES[s.kind]
            if code == "s" and ctx.compact_succeeded:
                code = "k"  # a success whose record is rewritten compactly if kept
            if chains and i in chains:
                code = "c"  # a chain link's success that stores its successor
                tails.setdefault(pk, []).extend(chains[i][0])
            argv += [
                s.lease.job_id,
                s.lease.token,
                # upper case: the job has flow control (settle.lua reads it)
                code.upper() if s.lease.controlled else code,
                s.error,
                repr(float(s.retry_delay)) if s.retry_delay else "0",
                repr(float(keep)) if keep else "0",
                *(
                    (s.result, repr(float(s.result_ttl)))
                    if s.result is not None and s.result_ttl > 0
                    # any other kind: result_ttl's place carries the attempt's start
                    else _NO_RESULT
                    if s.started is None
                    else ("", repr(float(s.started)))
                ),
            ]
        argv_of[pk] = argv
    # One script for the whole batch on one node; one per partition (slot) on a Cluster.
    calls = [[pk] for pk in groups]
    if len(calls) > 1 and await _one_node(ctx):
        calls = [list(groups)]
    ops = [_settle_op({pk: argv_of[pk] for pk in call}, tails) for call in calls]
    now = ctx.estimated_now()
    ready: dict[str, int] = {}
    for i, (_, _, token) in chains.items():
        if token:
            continue  # leased to this worker, if stored: nobody to wake
        # a successor the settle may store: its queue's leasers are woken
        # with the settle (same round trip; a wrong guess costs a cheap look)
        q = settlements[i].successor.job.queue  # type: ignore[union-attr]
        ready[q] = ready.get(q, 0) + 1
    due: dict[str, float] = {}
    for s in settlements:
        q = s.lease.queue
        if s.kind is SettleKind.RELEASE:
            ready[q] = ready.get(q, 0) + 1
        elif s.kind in _WAITS_AGAIN:
            at = now + max(0.0, s.retry_delay)
            due[q] = min(at, due.get(q, at))
    if warm:
        # the successors' topology read again in the same round trip (after
        # the settle: read-only), for the next settles (see to_warm)
        read_at = time.monotonic()
        replies = await ctx.adapter.execute(
            [*ops, *ctx.refresh_ops(warm)],
            after=ctx.wake_ready_ops(ready) + ctx.wake_scheduled_ops(due),
        )
        ctx.store_metas(warm, replies[len(ops) :], read_at)
        del replies[len(ops) :]
    else:
        replies = await ctx.adapter.execute(
            ops, after=ctx.wake_ready_ops(ready) + ctx.wake_scheduled_ops(due)
        )
    results = [False] * len(settlements)
    aborted: list[int] = []
    unclaimed_dead: list[int] = []
    continued: list[int] = []
    handed: list[tuple[int, LeasedJob]] = []
    aside = NOTHING_SET_ASIDE
    failed: list[tuple[PartitionKeys, bytes]] = []
    freed: dict[str, int] = {}
    for call, reply in zip(calls, replies, strict=True):
        ctx.observe_now(reply[0])
        stamp = float(reply[0])
        for pk, part in zip(call, reply[1:], strict=True):
            if isinstance(part, bytes):  # a key of the wrong type stopped it
                failed.append((pk, part))
                continue
            aside += decode_aside(part[0], pk.queue, pk.placement)
            for k, i in enumerate(groups[pk]):
                code = part[1 + k]
                results[i] = (
                    code == 1 or code == 4 or code == 5 or code == 6 or code == 7 or code == 8
                )
                if code == 4:  # a workflow continuation went to the outbox
                    ctx.outbox_filled.set()
                elif code == 7:  # its successor is stored: no outbox entry
                    continued.append(i)
                elif code == 8:  # its successor is stored leased to this worker
                    continued.append(i)
                    _, placement, token = chains[i]
                    successor = settlements[i].successor
                    assert successor is not None
                    handed.append((i, _handed_over(successor, token, placement, stamp)))
                elif code == 5:  # the job is aborted now (its step may be in the outbox)
                    aborted.append(i)
                    ctx.outbox_filled.set()
                elif code == 6:  # unclaimed past its grace: dead-lettered
                    unclaimed_dead.append(i)
            slots = part[1 + len(groups[pk])] if len(part) > 1 + len(groups[pk]) else 0
            if slots:
                freed[pk.queue] = freed.get(pk.queue, 0) + int(slots)
    ctx.count_aside(aside)
    if freed:
        # concurrency slots came back: idle leasers held by them look again
        # (one more round trip, only then)
        with trio.move_on_after(_UNDECODABLE_TIMEOUT, shield=True):
            try:
                await ctx.adapter.execute(ctx.wake_ready_ops(freed))
            except StoreError as exc:  # the settle stands; leasers look again by themselves
                log_event(
                    log,
                    logging.WARNING,
                    "could not wake leasers after freeing concurrency slots",
                    error=str(exc),
                )
    if failed:
        # As when a partition's own script fails: what the others applied
        # stays applied; the caller settles the batch again (fenced).
        pk, why = failed[0]
        raise StoreError(f"settle failed in partition {pk.tag}: {why.decode(errors='replace')}")
    if continued:
        ctx.chain_settles += len(continued)
    return SettleResult(
        tuple(results),
        aside,
        frozenset(aborted),
        frozenset(unclaimed_dead),
        frozenset(continued),
        tuple(handed),
    )


# -- recover ---------------------------------------------------------------------------
async def _recover_plan_one_node(
    ctx: StoreContext, order: Sequence[str], slots: Sequence[PartitionKeys], limit: int
) -> dict[PartitionKeys, int]:
    """On a single node: each partition's share of ``limit`` expired leases
    (earliest expiry first, queue after queue in ``order``), from one
    recover_peek.lua call over all of ``slots``: one round trip, and when no
    partition holds a lease, one EXISTS in Redis (see the script)."""
    groups = [n for q in order if (n := sum(1 for pk in slots if pk.queue == q))]
    (reply,) = await ctx.adapter.execute(
        [Op.script_call(S.RECOVER_PEEK, [pk.leased for pk in slots], [limit, *groups])]
    )
    if reply[0]:
        ctx.observe_now(reply[0])
    return {pk: n for pk, n in zip(slots, reply[1:], strict=True) if n > 0}


async def recover_expired(ctx: StoreContext, queues: Sequence[str], limit: int) -> RecoverResult:
    if limit <= 0:
        return RecoverResult()
    # An older topology will do here (see RECOVER_TOPOLOGY_AGE): an idle
    # worker then spends no round trip per recovery pass on re-reading it.
    metas = await ctx.meta(queues, max_age=RECOVER_TOPOLOGY_AGE)
    order = list(dict.fromkeys(queues))
    slots = [pk for q in order for pk in ctx.partitions_of(q, metas[q])]
    if not slots:
        return RecoverResult()
    plan: dict[PartitionKeys, int]
    if await _one_node(ctx):
        plan = await _recover_plan_one_node(ctx, order, slots, limit)
    elif len(slots) == 1:
        plan = {slots[0]: limit}
    else:
        # what expired by each node's own TIME (the store's clock)
        cands, _, now = await _due_peek(ctx, slots, lambda pk: (pk.leased,), limit)
        plan, remaining = {}, limit
        for q in order:
            mine = {pk: c for pk, c in cands.items() if pk.queue == q}
            taken = earliest(mine, remaining, bound=now)
            plan.update(taken)
            remaining -= sum(taken.values())
    if not plan:
        return RecoverResult()
    replies = await ctx.adapter.execute(
        [
            Op.script_call(
                S.RECOVER,
                [pk.leased, pk.ready, pk.dead, pk.job_prefix, pk.damaged],
                [n],
                soft=True,
            )
            for pk, n in plan.items()
        ]
    )
    requeued: list[str] = []
    dead: list[Job] = []
    aborted: list[Job] = []
    woke: dict[str, int] = {}
    aside = NOTHING_SET_ASIDE
    for pk, reply in zip(plan, _usable(list(plan), replies, "recover"), strict=True):
        if reply is None:
            continue
        script_now, ids, dead_flat, raw_aside, aborted_flat = reply
        ctx.observe_now(script_now)
        aside += decode_aside(raw_aside, pk.queue, pk.placement)
        requeued += [ident(i) for i in ids]
        if ids:
            woke[pk.queue] = woke.get(pk.queue, 0) + len(ids)
        for flat, into in ((dead_flat, dead), (aborted_flat, aborted)):
            # per job its ID, then READ_FIELDS (recover.lua): the whole job
            width = 1 + len(READ_FIELDS)
            for k in range(0, len(flat), width):
                into.append(
                    job_from_fields(ident(flat[k]), pk.queue, pk.placement, flat[k + 1 : k + width])
                )
    if any(holds_failure_handling(job.then) for job in (*dead, *aborted)):
        ctx.outbox_filled.set()  # recover.lua put them in the outbox
    if woke:
        await ctx.adapter.execute([], after=ctx.wake_ready_ops(woke))
    return RecoverResult(tuple(requeued), tuple(dead), ctx.count_aside(aside), tuple(aborted))
