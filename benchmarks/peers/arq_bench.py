"""arq: ``arq benchmarks.peers.arq_bench.WorkerSettings`` (one process per worker;
arq has no multi-process flag). Settings: ``max_jobs`` = concurrency, and
``keep_result = 0`` (no result stored, like chronos_trio's no-op); the rest
default (``poll_delay`` 0.5 s, pickle). ``noop_result`` (the round trip)
keeps its result for arq's default 3600 s; ``poll_delay`` may come from the
benchmark's options (the tuned round trip). ``incr`` makes its one Redis round
trip on the ``ArqRedis`` arq hands every job (``ctx["redis"]``, redis-py's
asyncio client)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import func

from benchmarks._common import (
    ENV_URL,
    INCR_KEY,
    PAD_PEER,
    env_concurrency,
    env_options,
    recorder,
)

NAME = "arq"
BACKEND = "asyncio"
PACKAGES = ("arq", "redis", "hiredis")


async def noop(ctx: dict[str, Any], sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold and ctx["job_try"] == 1:
        await asyncio.sleep(hold)


async def noop_result(
    ctx: dict[str, Any], sent_at: float, due_at: float, hold: float, pad: str
) -> dict[str, float]:
    """The same handler I/O as ``noop``, returning a small result."""
    return {"ran_at": recorder().record(sent_at, due_at)}


async def incr(ctx: dict[str, Any], sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip on arq's own client, recorded once it is done."""
    await ctx["redis"].incr(INCR_KEY)
    recorder().record(sent_at, due_at)


async def blob(ctx: dict[str, Any], data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


class WorkerSettings:
    functions = [noop, incr, blob, func(noop_result, keep_result=3600)]
    redis_settings = RedisSettings.from_dsn(os.environ.get(ENV_URL, "redis://127.0.0.1:1"))
    max_jobs = env_concurrency(10)
    keep_result = 0
    poll_delay = env_options().get("poll_delay", 0.5)  # arq's default
    on_startup = None


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [[f"{venv_bin}/arq", "benchmarks.peers.arq_bench.WorkerSettings"]] * processes


class Producer:
    bulk = False  # arq has no batch enqueue

    async def open(self, url: str) -> None:
        self.redis = await create_pool(RedisSettings.from_dsn(url))

    async def close(self) -> None:
        await self.redis.aclose()

    async def enqueue(
        self, sent_at: float, due_at: float = 0.0, *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        defer = dt.datetime.fromtimestamp(due_at, dt.UTC) if due_at else None
        await self.redis.enqueue_job(kind, sent_at, due_at, hold, PAD_PEER, _defer_until=defer)

    async def enqueue_data(self, data: str, delay: float) -> None:
        """A job of ``blob`` due ``delay`` s from now (``_defer_by``)."""
        await self.redis.enqueue_job("blob", data, _defer_by=delay)

    async def round_trip(self, sent_at: float, poll: float | None, timeout: float) -> Any:
        """``enqueue_job`` then ``job.result()`` (polling every ``poll`` s;
        None: arq's default 0.5 s)."""
        job = await self.redis.enqueue_job("noop_result", sent_at, 0.0, 0.0, PAD_PEER)
        assert job is not None  # None only for a job ID already taken
        if poll is None:
            return await job.result(timeout=timeout)
        return await job.result(timeout=timeout, poll_delay=poll)


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): ``await redis.enqueue_job(...)`` on
    an ``ArqRedis`` from ``create_pool``, one job per call; arq has no batch
    call."""

    one_label = "await enqueue_job(...)"
    many_label = None

    async def open(self, url: str) -> None:
        self.redis = await create_pool(RedisSettings.from_dsn(url))
        self.args = (time.time(), 0.0, 0.0, PAD_PEER)

    async def close(self) -> None:
        await self.redis.aclose()

    async def one(self) -> None:
        await self.redis.enqueue_job("noop", *self.args)


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"asyncio": Caller}
