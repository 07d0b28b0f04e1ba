"""arq: ``arq benchmarks.peers.arq_bench.WorkerSettings`` (one process per worker;
arq has no multi-process flag). Settings: ``max_jobs`` = concurrency, and
``keep_result = 0`` (no result stored, like chronos_trio); the rest default
(``poll_delay`` 0.5 s, pickle)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from benchmarks._common import ENV_URL, PAD_PEER, env_concurrency, recorder

NAME = "arq"
BACKEND = "asyncio"
PACKAGES = ("arq", "redis", "hiredis")


async def noop(ctx: dict[str, Any], sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold and ctx["job_try"] == 1:
        await asyncio.sleep(hold)


class WorkerSettings:
    functions = [noop]
    redis_settings = RedisSettings.from_dsn(os.environ.get(ENV_URL, "redis://127.0.0.1:1"))
    max_jobs = env_concurrency(10)
    keep_result = 0
    on_startup = None


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [[f"{venv_bin}/arq", "benchmarks.peers.arq_bench.WorkerSettings"]] * processes


class Producer:
    bulk = False  # arq has no batch enqueue

    async def open(self, url: str) -> None:
        self.redis = await create_pool(RedisSettings.from_dsn(url))

    async def close(self) -> None:
        await self.redis.aclose()

    async def enqueue(self, sent_at: float, due_at: float = 0.0) -> None:
        defer = dt.datetime.fromtimestamp(due_at, dt.UTC) if due_at else None
        await self.redis.enqueue_job("noop", sent_at, due_at, 0.0, PAD_PEER, _defer_until=defer)


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))
