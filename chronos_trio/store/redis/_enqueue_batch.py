"""A bulk enqueue's jobs read from their columns (``records._job_batch``).

:func:`~._enqueue.enqueue_plan` stores a :class:`JobBatch` as any other
jobs (the same routing, scripts, retries and replies), but reads its
columns instead of a ``NewJob`` per job: enqueue.lua's ARGV is laid out a
column at a time, its RESP made in one pass, the wake-ups counted at once
and the results built without a look at each job. Every function here
gives what its per-job counterpart in ``_enqueue`` gives for the batch's
records (``tests/test_bulk_fast_paths.py`` compares them).
"""

from __future__ import annotations

from itertools import repeat
from operator import eq

from ...records._job_batch import JobBatch
from ...records._jobs import EnqueueResult, enqueue_results
from ...records._options import encode_headers
from ...records._placement import Placement
from .._partitioning import partition_of
from .._roles import QueueVersion
from ._core import RedisCore
from ._packed import ArgvPacker, bulk
from ._scripts import Op
from .keys import PartitionKeys

#: enqueue.lua's arguments a job (see the script's header and ``_enqueue.job_args``).
WIDTH = 9


def route_batch(
    ctx: RedisCore, batch: JobBatch, todo: list[int], active: QueueVersion
) -> dict[PartitionKeys, list[int]]:
    """The jobs ``todo`` grouped by their partition of ``active`` (the
    batch queue's active version), by their IDs."""
    partition, queue, version = ctx.keys.partition, batch.queue, active.version
    partitions = active.partitions
    if partitions == 1:
        return {partition(queue, version, 0): todo}
    ids = batch.ids
    groups: dict[int, list[int]] = {}
    for i in todo:
        p = partition_of(ids[i], partitions)
        group = groups.get(p)
        if group is None:
            groups[p] = [i]
        else:
            group.append(i)
    return {partition(queue, version, p): idxs for p, idxs in groups.items()}


def batch_argv(
    batch_now: str, batch: JobBatch, idxs: list[int], pack: bool
) -> tuple[list[object], ArgvPacker | None]:
    """enqueue.lua's ARGV for the jobs ``idxs`` of ``batch`` (what
    ``_enqueue._argv`` makes of their records), and with ``pack`` its RESP
    (None when an argument is not one the packer writes)."""
    n = len(idxs)
    if n == len(batch):  # the whole batch, in order (one partition)
        ids, payloads, headers = batch.ids, batch.payloads, batch.headers
    else:
        ids = [batch.ids[i] for i in idxs]
        payloads = [batch.payloads[i] for i in idxs]
        headers = None if batch.headers is None else [batch.headers[i] for i in idxs]
    delay, timeout, max_retries = batch.delay, batch.timeout, int(batch.max_retries)
    delay_s = "0.0" if delay == 0.0 else repr(float(delay))
    timeout_s = "0.0" if timeout == 0.0 else repr(float(timeout))
    encoded: list[bytes | str] = (
        [""] * n if headers is None else [encode_headers(h) if h else "" for h in headers]
    )
    argv: list[object] = [None] * (1 + WIDTH * n)
    argv[0] = batch_now
    argv[1::WIDTH] = ids
    argv[2::WIDTH] = repeat(batch.kind, n)
    argv[3::WIDTH] = payloads
    argv[4::WIDTH] = repeat("", n)  # run_at: none (a batch's jobs are due by their delay)
    argv[5::WIDTH] = repeat(delay_s, n)
    argv[6::WIDTH] = repeat(max_retries, n)
    argv[7::WIDTH] = repeat(timeout_s, n)
    argv[8::WIDTH] = encoded
    argv[9::WIDTH] = repeat("", n)  # extras: none (no unique key, flow control, continuation)
    if not pack:
        return argv, None
    try:
        body = _resp(batch.kind, ids, payloads, (delay_s, max_retries, timeout_s), encoded)
    except (TypeError, UnicodeEncodeError):
        return argv, None
    packer = ArgvPacker(batch_now)
    packer.add_packed(body, len(argv))
    return argv, packer


def _resp(
    kind: str,
    ids: list[str],
    payloads: list[bytes],
    shared: tuple[str, int, str],
    headers: list[bytes | str],
) -> bytes:
    """The RESP of the jobs' arguments (``ArgvPacker.add_all``'s bytes for
    them). TypeError or UnicodeEncodeError as ``bulk`` raises them."""
    kind_b = bulk(kind)
    # run_at (none), delay, max_retries, timeout
    before = bulk("") + b"".join([bulk(a) for a in shared])
    extras = bulk("")
    if any(headers):
        tails = [before + bulk(h) + extras for h in headers]
    else:
        tails = [before + bulk("") + extras] * len(ids)
    if payloads and set(map(id, map(type, payloads))) != {id(bytes)}:
        raise TypeError("not packed here: a payload that is not bytes")
    return b"".join(
        [
            b"$%d\r\n%b\r\n%b$%d\r\n%b\r\n%b" % (len(id_b), id_b, kind_b, len(p), p, tail)
            for id_b, p, tail in zip(map(str.encode, ids), payloads, tails, strict=True)
        ]
    )


def batch_wake_ops(ctx: RedisCore, batch: JobBatch, count: int) -> list[Op]:
    """``_enqueue.enqueue_wake_ops`` for ``count`` jobs of ``batch`` (one
    queue, one delay)."""
    if count == 0:
        return []
    queue, delay = batch.queue, batch.delay
    if delay <= 0:
        return ctx.wake_ready_ops({queue: count})
    now = ctx.estimated_now()
    at = now + delay
    if at <= now:
        return ctx.wake_ready_ops({queue: count})
    return ctx.wake_scheduled_ops({queue: at})


def batch_results(
    batch: JobBatch,
    idxs: list[int],
    reply: list[object],
    placement: Placement,
    results: list[EnqueueResult | None],
) -> None:
    """Put the results of the jobs ``idxs`` in ``results``, from their
    partition's enqueue.lua ``reply`` (its flags, due times and IDs, three a
    job after the store's clock). A job with no unique key is answered
    under its own ID: the reply's third entry, as the IDs column has it."""
    ids = batch.ids
    due = reply[2::3]
    # the jobs of a call share a due time or a few ('' for an existing job
    # without a readable one: 0.0): each read once
    read = {r: float(r or 0.0) for r in set(due)}  # type: ignore[arg-type]
    whole = len(idxs) == len(results)  # the whole batch, in order (one call)
    made = enqueue_results(
        ids if whole else [ids[i] for i in idxs],
        list(map(eq, reply[1::3], repeat(1))),
        list(map(read.__getitem__, due)),
        placement,
    )
    if whole:
        results[:] = made
    else:
        for i, result in zip(idxs, made, strict=True):
            results[i] = result
