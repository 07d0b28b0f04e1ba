"""The chronos_trio side of the benchmark: one App with a no-op task.

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
from benchmarks._common import ENV_URL, PAD, recorder


@attrs.frozen
class Bench:
    """About 100 bytes as JSON (see ``benchmarks._common``)."""

    sent_at: float
    due_at: float = 0.0
    hold: float = 0.0
    pad: str = PAD


async def noop(args: Bench, job: chronos_trio.JobContext) -> None:
    recorder().record(args.sent_at, args.due_at)
    if args.hold and job.attempt == 1:
        await trio.sleep(args.hold)


def make_app(store: Any = None) -> tuple[chronos_trio.App, chronos_trio.Task[Bench]]:
    """An App (store URL or Store object) with the benchmark's task registered."""
    bench_app = chronos_trio.App(store, name="bench")
    task = bench_app.task("bench.noop", max_retries=3, timeout=3600)(noop)
    return bench_app, task


app, task = make_app(os.environ.get(ENV_URL) or None)

# Start the recorder's thread at import, so a worker that never runs a job
# still shows up (a progress file with count 0).
recorder()
