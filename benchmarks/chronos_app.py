"""The chronos_trio side of the benchmark: one App with a no-op task (which
sleeps ``hold`` seconds when asked: the I/O-bound workload), the same no-op
returning a small attrs result (stored for its producer), a handler that
makes one Redis round trip (``INCR`` on the worker's own connections), and
a task whose payload is one 100-character str (the memory workload).

Imported by worker processes (``python -m benchmarks.chronos_worker`` or
``python -m chronos_trio worker benchmarks.chronos_app:app``); the store URL
comes from ``BENCH_REDIS_URL`` (the embedded memory store when unset).
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import trio

import chronos_trio
from benchmarks._common import ENV_URL, INCR_KEY, PAD, recorder


@attrs.frozen
class Bench:
    """About 100 bytes as JSON (see ``benchmarks._common``)."""

    sent_at: float
    due_at: float = 0.0
    hold: float = 0.0
    pad: str = PAD


@attrs.frozen
class Blob:
    """The memory workload's payload: one str field (``MEMORY_DATA``, 100
    characters), stored as the JSON ``{"data":"xx...x"}``."""

    data: str


@attrs.frozen
class Done:
    """The result of ``bench.result``: when the handler ran (wall time), so a
    producer can tell how long the result took to reach it."""

    ran_at: float


#: The kind of the task that returns a :class:`Done`.
RESULT_KIND = "bench.result"


async def noop(args: Bench, job: chronos_trio.JobContext) -> None:
    recorder().record(args.sent_at, args.due_at)
    if args.hold and job.attempt == 1:
        await trio.sleep(args.hold)


async def noop_result(args: Bench, job: chronos_trio.JobContext) -> Done:
    """The same handler I/O as :func:`noop` (one recorder call), returning a
    small attrs result, which the worker stores (``result_ttl`` default)."""
    return Done(recorder().record(args.sent_at, args.due_at))


async def mixed_none(args: Bench, job: chronos_trio.JobContext) -> None:
    """:func:`noop`, its start tagged 0 (the interleaved drain)."""
    rec = recorder()
    rec.record(args.sent_at, args.due_at)
    rec.mark(0)


async def mixed_result(args: Bench, job: chronos_trio.JobContext) -> Done:
    """:func:`noop_result`, its start tagged 1 (the interleaved drain)."""
    rec = recorder()
    done = Done(rec.record(args.sent_at, args.due_at))
    rec.mark(1)
    return done


async def incr(args: Bench, job: chronos_trio.JobContext) -> None:
    """One Redis round trip the way a chronos_trio user makes it: ``INCR`` on
    the worker's own Trio-native connections (``job.redis``). Recorded once
    the reply is in, so a job counts when its round trip is done."""
    await job.redis.execute("INCR", INCR_KEY)
    recorder().record(args.sent_at, args.due_at)


#: The kind of the task whose handler makes one Redis round trip.
INCR_KIND = "bench.incr"


async def blob(args: Blob, job: chronos_trio.JobContext) -> None:
    """The memory workload's task (its jobs are due later than it runs)."""
    recorder().record(0.0, 0.0)


#: The kind of the task whose payload is a :class:`Blob`.
BLOB_KIND = "bench.blob"

#: Kinds of the tagged tasks, by tag.
MIXED_KINDS = ("bench.mixed.none", "bench.mixed.result")


def make_app(store: Any = None) -> tuple[chronos_trio.App, chronos_trio.Task[Bench]]:
    """An App (store URL or Store object) with the benchmark's tasks
    registered; returns the no-op task (``app.tasks[kind]`` has the others)."""
    bench_app = chronos_trio.App(store, name="bench")
    task = bench_app.task("bench.noop", max_retries=3, timeout=3600)(noop)
    bench_app.task(RESULT_KIND, max_retries=3, timeout=3600)(noop_result)
    bench_app.task(INCR_KIND, max_retries=3, timeout=3600)(incr)
    bench_app.task(BLOB_KIND, max_retries=3, timeout=3600)(blob)
    for kind, handler in zip(MIXED_KINDS, (mixed_none, mixed_result), strict=True):
        bench_app.task(kind, max_retries=3, timeout=3600)(handler)
    return bench_app, task


def result_task(bench_app: chronos_trio.App) -> chronos_trio.Task[Bench]:
    """The task of ``bench_app`` whose jobs store a :class:`Done`."""
    return bench_app.tasks[RESULT_KIND]


app, task = make_app(os.environ.get(ENV_URL) or None)

# Start the recorder's thread at import, so a worker that never runs a job
# still shows up (a progress file with count 0).
recorder()
