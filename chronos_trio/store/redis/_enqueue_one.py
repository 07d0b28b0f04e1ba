"""One job, one enqueue: the one-at-a-time producer's plan.

:func:`enqueue_one_plan` stores one job exactly as
:func:`~._enqueue.enqueue_plan` stores a batch of one (the same routing,
script, arguments, wake-up and replies), without the batch's bookkeeping
(lists of indexes, groups by partition, the buffers of reprs): the path a
``SyncProducer.enqueue``, an ``AsyncioProducer.enqueue`` and a lone Trio
``task.enqueue`` take on every call. It takes it while the job's queue has
one topology version, active, in the topology cache; any other case (no
cached topology, a queue being resized, a version closed under it) is
handed to ``enqueue_plan`` itself, whose rules then apply.

A plain job (:func:`is_plain`: due now, no unique key, no flow control,
no workflow continuation, not marked as waited on) on one node (``RedisCore.one_node``: a plain
node or a Sentinel's master) takes ``enqueue_plain.lua``: the record and
zset entry ``enqueue.lua`` would write, byte for byte, and the wake-up
written by the script itself, all for about half of what Redis spends on
``enqueue.lua`` and a separate ``XADD`` (see the script's header). Any
other job, and every job on a Cluster (whose wake-up stream is in another
slot), takes ``enqueue.lua`` and its separate wake-up, as a batch does.

What is the same for every job of a partition (the ``EVALSHA`` head: the
script's SHA and its KEYS) is built once per partition and kept.
This module imports no Trio.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ...records._jobs import EnqueueResult, NewJob
from ...records._options import encode_headers
from .._partitioning import partition_of, routed_job_id
from .._roles import VersionState
from . import _scripts as S
from ._codec import ident, parse_number
from ._core import Call, Plan, RedisCore
from ._enqueue import enqueue_plan, enqueue_shielded, enqueue_wake_ops, job_args
from ._scripts import Op
from .keys import PartitionKeys

if TYPE_CHECKING:
    from ._context import StoreContext

#: enqueue.lua's call head per partition: ("EVALSHA", sha, 4, *KEYS).
_HEADS: dict[PartitionKeys, tuple[Any, ...]] = {}
#: enqueue_plain.lua's call head per partition: ("EVALSHA", sha, 4, *KEYS).
_PLAIN_HEADS: dict[PartitionKeys, tuple[Any, ...]] = {}
#: The reprs of delays and timeouts seen (a task's few values), bounded.
_REPRS: dict[float, str] = {0.0: "0.0"}
_MAX_REPRS = 256


def _head(pk: PartitionKeys) -> tuple[Any, ...]:
    head = _HEADS.get(pk)
    if head is None:
        if len(_HEADS) > 10_000:  # bound the cache; rebuilding is cheap
            _HEADS.clear()
        keys = pk.enqueue_keys
        head = _HEADS[pk] = ("EVALSHA", S.ENQUEUE.sha, len(keys), *keys)
    return head


def _plain_head(ctx: RedisCore, pk: PartitionKeys) -> tuple[Any, ...]:
    head = _PLAIN_HEADS.get(pk)
    if head is None:
        if len(_PLAIN_HEADS) > 10_000:  # bound the cache; rebuilding is cheap
            _PLAIN_HEADS.clear()
        keys = (pk.ready, pk.closed, pk.job_prefix, ctx.keys.wake_ready(pk.queue))
        head = _PLAIN_HEADS[pk] = ("EVALSHA", S.ENQUEUE_PLAIN.sha, len(keys), *keys)
    return head


def is_plain(job: NewJob) -> bool:
    """Whether ``job`` is plain: due now (no run_at, no positive delay),
    with no unique key, no flow control (priority, limits, expiry), no
    workflow continuation and not stored marked as waited on
    (``keep_outcome``); what ``enqueue_plain.lua`` stores as
    ``enqueue.lua`` would. Headers are allowed."""
    return (
        job.run_at is None
        and job.delay <= 0
        and job.unique is None
        and job.control is None
        and job.then is None
        and not job.keep_outcome
    )


def _repr(value: float) -> str:
    text = _REPRS.get(value)
    if text is None:
        text = repr(float(value))
        if len(_REPRS) < _MAX_REPRS:
            _REPRS[value] = text
    return text


def enqueue_one_plan(ctx: RedisCore, job: NewJob) -> Plan[list[EnqueueResult]]:
    """Store ``job`` (its result, in a list of one, as ``enqueue_plan``
    returns it). Raises as :func:`~._enqueue.enqueue_plan` does: StoreError
    for a queue whose topology cannot be read or has no active version,
    ValueError for a unique or limited job whose given ID routes elsewhere
    (before anything is sent)."""
    queue = job.queue
    meta = ctx.cached_meta(queue)
    versions = None if meta is None else meta.versions
    if versions is None or len(versions) != 1 or versions[0].state is not VersionState.ACTIVE:
        return (yield from enqueue_plan(ctx, [job]))
    active = versions[0]
    n = active.partitions
    job_id = job.id
    if job.unique is not None or job.control is not None:
        # routed by its key, where the lock or limit lives (raises, before
        # anything is sent, for a given ID that routes elsewhere)
        job_id = routed_job_id(job, n)
    pk = ctx.keys.partition(queue, active.version, 0 if n == 1 else partition_of(job_id, n))
    if ctx.one_node and is_plain(job):
        # the usual case: enqueue_plain.lua, its wake-up within (its ARGV:
        # enqueue.lua's first 8 entries of a job, run_at and delay unused)
        headers = job.headers
        args = (
            *_plain_head(ctx, pk),
            job_id,
            job.kind,
            job.payload,
            "",
            "",
            int(job.max_retries),
            _repr(job.timeout),
            encode_headers(headers) if headers else "",
        )
        (reply,) = yield Call([Op(pk.ready, args, S.ENQUEUE_PLAIN)], replicas=ctx.replica_wait)
    else:
        args = (
            *_head(pk),
            "",
            *job_args(job, job_id, _repr(job.delay), _repr(job.timeout), ctx.keys.done_channel),
        )
        if job.run_at is None and job.delay <= 0:
            wake = ctx.wake_one_ops(queue)  # its op made once per queue
        else:
            wake = enqueue_wake_ops(ctx, [job], [0])
        (reply,) = yield Call(
            [Op(pk.scheduled, args, S.ENQUEUE)], after=wake, replicas=ctx.replica_wait
        )
    if type(reply) is not list:
        # stored (enqueue_plain.lua): its due time, now
        return [EnqueueResult(job_id, True, ctx.observe_now(reply), pk.placement)]
    if reply[0] == b"closed":
        # the version was completed after our topology was read: the long way
        ctx.forget(queue)
        return (yield from enqueue_plan(ctx, [job]))
    ctx.observe_now(reply[0])
    created = reply[1] == 1
    return [
        EnqueueResult(
            # the job's own ID, or that of the job holding its unique key
            ident(reply[3]),
            created,
            # a stored job's due time; for one not stored, the existing
            # key's ('' when it has none readable; enqueue_plain.lua sends
            # it as it is: judged here, as enqueue.lua judges it)
            float(reply[2]) if created else parse_number(reply[2]) or 0.0,
            pk.placement,
        )
    ]


def enqueue_lone(
    ctx: StoreContext, jobs: Sequence[NewJob]
) -> Coroutine[Any, Any, list[EnqueueResult]]:
    """The group commit's lone caller (``enqueue_shielded``, to be awaited:
    to completion even if the caller is cancelled), one job by
    :func:`enqueue_one_plan`."""
    if len(jobs) == 1:
        return ctx.run_shielded(enqueue_one_plan(ctx, jobs[0]))
    return enqueue_shielded(ctx, jobs)
