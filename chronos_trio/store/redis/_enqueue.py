"""Enqueue on Redis: one pipelined round trip per batch, one script per partition.

New jobs go to the queue's active version, partition ``crc32(id) % partitions``
(:func:`~chronos_trio.store.partition_of`, as in every backend). While a
queue has draining versions, an ID that still exists there is not stored
again. A stale topology that routes to a completed (closed) version is
refused by the script and the jobs are routed again. With ``wait_replicas``,
the round trip ends with ``WAIT`` (see ``RedisStore``).

The enqueue is a sans-IO plan (:func:`enqueue_plan`, see ``_core``): the
Trio store and the producers outside Trio run the very same routing, scripts
and retry rules, each over its own client. This module imports no Trio.
"""

from __future__ import annotations

import math
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ...records._job_batch import JobBatch
from ...records._jobs import EnqueueResult, NewJob
from ...records._options import encode_headers
from ...records._unique import Unique, with_run_slot
from .._partitioning import partition_of, routed_job_id
from .._roles import QueueVersion, StoreError
from . import _scripts as S
from ._codec import ident, parse_number
from ._core import Call, Plan, QueueMeta, RedisCore, ensure_plan
from ._enqueue_batch import batch_argv, batch_results, batch_wake_ops, route_batch
from ._packed import ArgvPacker, packed
from ._scripts import Op
from .keys import PartitionKeys

if TYPE_CHECKING:
    from ._context import StoreContext


async def enqueue_many(ctx: StoreContext, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
    """The Trio store's enqueue: :func:`enqueue_plan` over its adapter."""
    return await ctx.run(enqueue_plan(ctx, jobs))


def enqueue_shielded(
    ctx: StoreContext, jobs: Sequence[NewJob]
) -> Coroutine[Any, Any, list[EnqueueResult]]:
    """:func:`enqueue_many` (to be awaited), to completion even if the
    caller is cancelled (``StoreContext.run_shielded``): the group
    commit's lone caller. A plain function: no coroutine of its own."""
    return ctx.run_shielded(enqueue_plan(ctx, jobs))


def enqueue_plan(ctx: RedisCore, jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
    """Store ``jobs`` (results in their order): routed by the queues'
    topologies, one enqueue.lua per partition in one batch with the
    wake-ups; jobs refused by a version completed meanwhile are routed again
    (up to 3 times, then StoreError). StoreError for a queue whose topology
    cannot be read."""
    results: list[EnqueueResult | None] = [None] * len(jobs)
    # plain jobs as columns: read from them, no record built (_enqueue_batch)
    batch = jobs if isinstance(jobs, JobBatch) else None
    # a unique or limited job's ID may be drawn again (routed_job_id)
    ids = list(batch.ids) if batch is not None else [j.id for j in jobs]
    todo = list(range(len(jobs)))
    for _attempt in range(3):
        if not todo:
            break
        queues = [batch.queue] if batch else list(dict.fromkeys(jobs[i].queue for i in todo))
        metas = yield from ensure_plan(ctx, queues)
        todo = yield from _skip_existing_in_draining(ctx, jobs, todo, metas, results)
        if batch is not None:
            groups = route_batch(ctx, batch, todo, _active(batch.queue, metas[batch.queue]))
        else:
            groups = _route(ctx, jobs, todo, metas, ids)
        if not groups:
            break
        batch_now = ""
        if len(groups) > 1 and (batch is not None or any(jobs[i].run_at is None for i in todo)):
            # One clock reading for the batch, so delay-based due times of jobs in
            # different partitions keep the batch's order.
            (t,) = yield Call([Op.command(None, "TIME")])
            batch_now = repr(int(t[0]) + int(t[1]) / 1_000_000)
        if batch is not None:
            ops = [
                _script_op(pk, *batch_argv(batch_now, batch, idxs, len(idxs) >= PACK_FROM))
                for pk, idxs in groups.items()
            ]
            wake = batch_wake_ops(ctx, batch, len(todo))
        else:
            ops = [
                _script_op(pk, *_argv(batch_now, jobs, ids, idxs, ctx.keys.done_channel))
                for pk, idxs in groups.items()
            ]
            wake = enqueue_wake_ops(ctx, jobs, todo)
        replies = yield Call(ops, after=wake, replicas=ctx.replica_wait)
        closed: list[int] = []
        for (pk, idxs), reply in zip(groups.items(), replies, strict=True):
            if reply[0] == b"closed":
                # the version was completed after our topology was read: route again
                ctx.forget(pk.queue)
                closed += idxs
                continue
            ctx.observe_now(reply[0])
            placement = pk.placement
            if batch is not None:
                batch_results(batch, idxs, reply, placement, results)
                continue
            # per job: created, run_at ('' for an existing key without a
            # readable due time), the job's own ID or that of the job holding
            # its unique key (ident's reading, written out: the hot loop)
            for i, created, run_at, job_id in zip(
                idxs, reply[1::3], reply[2::3], reply[3::3], strict=True
            ):
                results[i] = EnqueueResult(
                    job_id.decode("utf-8", "backslashreplace")
                    if type(job_id) is bytes
                    else ident(job_id),
                    created == 1,
                    float(run_at or 0.0),
                    placement,
                )
        todo = closed
    if todo:
        raise StoreError("could not enqueue: the queue's topology kept changing; try again")
    return [r for r in results if r is not None]


def _route(
    ctx: RedisCore,
    jobs: Sequence[NewJob],
    todo: list[int],
    metas: dict[str, QueueMeta],
    ids: list[str],
) -> dict[PartitionKeys, list[int]]:
    """The jobs ``todo`` grouped by the partition of its queue's active
    version each goes to (unique and limited jobs by their key, see
    ``routed_job_id``). StoreError for a queue with no active version."""
    groups: dict[PartitionKeys, list[int]] = {}
    # per queue: its active version, and its one partition's keys when it has one
    routes: dict[str, tuple[QueueVersion, PartitionKeys | None]] = {}
    partition = ctx.keys.partition
    for i in todo:
        job = jobs[i]
        queue = job.queue
        route = routes.get(queue)
        if route is None:
            active = _active(queue, metas[queue])
            only = partition(queue, active.version, 0) if active.partitions == 1 else None
            route = routes[queue] = (active, only)
        active, pk = route
        if job.unique is not None or job.control is not None:
            # routed by its key, where the lock or limit lives (raises,
            # before anything is sent, for a given ID that routes elsewhere)
            ids[i] = routed_job_id(job, active.partitions)
        if pk is None:
            pk = partition(queue, active.version, partition_of(ids[i], active.partitions))
        group = groups.get(pk)
        if group is None:
            groups[pk] = [i]
        else:
            group.append(i)
    return groups


def _active(queue: str, meta: QueueMeta) -> QueueVersion:
    active = meta.active
    if active is None:
        damage = meta.damage
        raise StoreError(
            f"queue {queue!r}: {damage}"
            if damage
            else f"queue {queue!r} has no active topology version"
        )
    return active


#: Calls of at least this many jobs send their RESP made with the arguments
#: (``_packed``); a smaller one is packed as every command is (as cheap there).
PACK_FROM = 16


def _script_op(pk: PartitionKeys, argv: list[object], packer: ArgvPacker | None) -> Op:
    """The enqueue.lua call of one partition, its RESP made already when
    ``packer`` has it."""
    if packer is None:
        return Op.script_call(S.ENQUEUE, pk.enqueue_keys, argv)
    keys = pk.enqueue_keys
    head = ("EVALSHA", S.ENQUEUE.sha, len(keys), *keys)
    return Op(keys[0], packed((*head, *argv), head, packer.parts, packer.count), S.ENQUEUE)


def _argv(
    batch_now: str, jobs: Sequence[NewJob], ids: list[str], idxs: list[int], channel: str
) -> tuple[list[object], ArgvPacker | None]:
    """enqueue.lua's ARGV for the jobs ``idxs`` (see the script's header;
    ``channel``: the namespace's done channel),
    and for PACK_FROM jobs or more its RESP (None when an argument is not
    one the packer writes: then the usual packer decides)."""
    argv: list[object] = [batch_now]
    add = argv.extend
    packer = ArgvPacker(batch_now) if len(idxs) >= PACK_FROM else None
    numbers: dict[float, str] = {0.0: "0.0"}  # reprs, made once per value
    for i in idxs:
        j = jobs[i]
        delay, timeout = j.delay, j.timeout
        delay_s = numbers.get(delay)
        if delay_s is None:
            delay_s = numbers[delay] = repr(float(delay))
        timeout_s = numbers.get(timeout)
        if timeout_s is None:
            timeout_s = numbers[timeout] = repr(float(timeout))
        add(job_args(j, ids[i], delay_s, timeout_s, channel))
    if packer is not None:
        try:
            packer.add_all(argv, 9)
        except (TypeError, UnicodeEncodeError):
            packer = None
    return argv, packer


def job_args(
    job: NewJob, job_id: str, delay: str, timeout: str, channel: str
) -> tuple[object, ...]:
    """One job's 9 entries of enqueue.lua's ARGV (see the script's header):
    stored under ``job_id``, its delay and timeout as ``repr(float(...))``
    (the caller's, made once per value), ``channel`` the namespace's done
    channel (named in the record of a job stored marked as waited on). The
    one layout of them: a batch's, a lone call's (``_enqueue_one``) and a
    chain link's successor's (``_chain_settle``)."""
    run_at = job.run_at
    return (
        job_id,
        job.kind,
        job.payload,
        "" if run_at is None else repr(float(run_at)),
        delay,
        int(job.max_retries),
        timeout,
        encode_headers(job.headers) if job.headers else "",
        ""
        if job.unique is None and job.then is None and job.control is None and not job.keep_outcome
        else extras(job, channel),
    )


_MODE_LETTERS = {"lock": "l", "throttle": "t", "debounce": "d"}


def extras(job: NewJob, channel: str) -> str:
    """A job's extras as enqueue.lua takes them: for a job stored marked as
    waited on (``keep_outcome``), a 0x02 byte, the byte length of the done
    channel ``channel``, ':' and the channel (stored as field w); then its
    flow control (``JobControl.encode``; a unique job's has its key's run
    slot) and a 0x01 byte when it has one, then its
    unique spec (``lua/lib/unique_spec.lua``), NUL, its
    workflow continuation; '' for an ordinary job."""
    unique, control = job.unique, job.control
    mark = f"\2{len(channel.encode())}:{channel}" if job.keep_outcome else ""
    if unique is None and job.then is None and control is None:
        return mark  # '' for an ordinary job: what a drain of them pays, one test
    rest = ""
    if unique is not None or job.then is not None:
        spec = "" if unique is None else unique_spec(unique)
        rest = f"{spec}\0{job.then or ''}"
    if unique is not None:
        # a unique job also carries its key's run slot (records._unique.with_run_slot)
        control = with_run_slot(control, unique)
    if control is None:
        return mark + rest
    return f"{mark}{control.encode()}\1{rest}"


def unique_spec(unique: Unique) -> str:
    """A unique job's spec as enqueue.lua takes it (``lua/lib/unique_spec.lua``):
    mode letter, lock ttl in ms (none: no digits), ``|``, key."""
    ttl = "" if unique.ttl is None else str(max(1, math.ceil(unique.ttl * 1000)))
    return f"{_MODE_LETTERS[unique.mode]}{ttl}|{unique.key}"


def _skip_existing_in_draining(
    ctx: RedisCore,
    jobs: Sequence[NewJob],
    todo: list[int],
    metas: dict[str, QueueMeta],
    results: list[EnqueueResult | None],
) -> Plan[list[int]]:
    """A job ID that exists in a draining version must not be stored again in the
    active one. Checked only while a queue has more than one version."""
    if all(v is m.active for m in metas.values() for v in m.versions or ()):
        return todo  # no queue has a version but its active one: nothing to look at
    checks: list[tuple[int, PartitionKeys]] = []
    for i in todo:
        job = jobs[i]
        for v in metas[job.queue].versions or ():
            if metas[job.queue].active is not v:
                pk = ctx.keys.partition(job.queue, v.version, partition_of(job.id, v.partitions))
                checks.append((i, pk))
    if not checks:
        return todo
    # EXISTS, not only HGET run_at: a damaged record without run_at (or a key
    # of another type, whose HGET is an error reply) exists too.
    replies = yield Call(
        [
            op
            for i, pk in checks
            for op in (
                Op.command(pk.tag, "EXISTS", pk.job(jobs[i].id)),
                Op.soft_command(pk.tag, "HGET", pk.job(jobs[i].id), "run_at"),
            )
        ]
    )
    for n, (i, pk) in enumerate(checks):
        exists, run_at = replies[2 * n], replies[2 * n + 1]
        if exists and results[i] is None:
            due = parse_number(run_at) if isinstance(run_at, bytes) else None
            results[i] = EnqueueResult(jobs[i].id, False, due or 0.0, pk.placement)
    return [i for i in todo if results[i] is None]


def enqueue_wake_ops(ctx: RedisCore, jobs: Sequence[NewJob], todo: list[int]) -> list[Op]:
    """Wake-ups for the jobs ``todo`` a batch probably made ready or
    scheduled (a wrong guess only costs a waiter a cheap look)."""
    now = ctx.estimated_now()
    ready: dict[str, int] = {}
    due: dict[str, float] = {}
    for i in todo:
        j = jobs[i]
        if j.run_at is None:
            if j.delay <= 0:
                ready[j.queue] = ready.get(j.queue, 0) + 1
                continue
            at = now + j.delay
        else:
            at = j.run_at
        if at <= now:
            ready[j.queue] = ready.get(j.queue, 0) + 1
        else:
            due[j.queue] = min(at, due.get(j.queue, at))
    return ctx.wake_ready_ops(ready) + ctx.wake_scheduled_ops(due)
