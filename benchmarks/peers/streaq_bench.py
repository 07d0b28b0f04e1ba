"""streaQ on its Trio backend: ``streaq run benchmarks.peers.streaq_bench:worker
--workers N``. Settings: ``Worker(concurrency=C, anyio_backend="trio")`` and
the task with ``ttl=0`` (no result stored, like chronos_trio); the rest
default (prefetch = concurrency, pickle). ``incr`` makes its one Redis round
trip on the worker's own coredis client (``worker.redis``, which runs on
Trio), as a streaQ user on Trio would."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import trio
from streaq import Worker

from benchmarks._common import ENV_URL, INCR_KEY, PAD_PEER, env_concurrency, recorder

NAME = "streaq"
BACKEND = "trio"
PACKAGES = ("streaq", "coredis", "trio", "anyio")

worker: Worker[Any] = Worker(
    redis_url=os.environ.get(ENV_URL, "redis://127.0.0.1:1"),
    concurrency=env_concurrency(16),
    anyio_backend="trio",
)


@worker.task(ttl=0)
async def noop(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold:
        await trio.sleep(hold)


@worker.task(ttl=0)
async def incr(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip on streaQ's own client, recorded once done."""
    await worker.redis.incr(INCR_KEY)
    recorder().record(sent_at, due_at)


@worker.task(ttl=0)
async def blob(data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


TASKS = {"noop": noop, "incr": incr, "blob": blob}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    argv = [f"{venv_bin}/streaq", "run", "benchmarks.peers.streaq_bench:worker"]
    return [[*argv, "--workers", str(processes)]]


class Producer:
    bulk = True  # Worker.enqueue_many: one pipeline

    async def open(self, url: str) -> None:
        await worker.__aenter__()

    async def close(self) -> None:
        await worker.__aexit__(None, None, None)

    async def enqueue(
        self, sent_at: float, due_at: float = 0.0, *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        task = TASKS[kind].enqueue(sent_at, due_at, hold, PAD_PEER)
        if due_at:
            task = task.start(schedule=dt.datetime.fromtimestamp(due_at, dt.UTC))
        await task

    async def enqueue_bulk(
        self, items: list[tuple[float, float]], *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        tasks = []
        for sent_at, due_at in items:
            task = TASKS[kind].enqueue(sent_at, due_at, hold, PAD_PEER)
            if due_at:
                task = task.start(schedule=dt.datetime.fromtimestamp(due_at, dt.UTC))
            tasks.append(task)
        await worker.enqueue_many(tasks)

    async def enqueue_data(self, data: str, delay: float) -> None:
        """A job of ``blob`` due ``delay`` s from now (``.start(delay=...)``)."""
        await blob.enqueue(data).start(delay=dt.timedelta(seconds=delay))

    async def enqueue_data_bulk(self, data: list[str], delay: float) -> None:
        """Jobs of ``blob`` due ``delay`` s from now in one ``enqueue_many``."""
        when = dt.timedelta(seconds=delay)
        await worker.enqueue_many([blob.enqueue(d).start(delay=when) for d in data])


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): ``await task.enqueue(...)`` inside
    ``async with worker`` (its client side: no worker loop runs), and
    ``await worker.enqueue_many([...])`` (one pipeline) for a batch. streaQ
    runs on anyio, so the same caller serves Trio and asyncio."""

    one_label = "await task.enqueue(...)"
    many_label = "await worker.enqueue_many(...)"

    async def open(self, url: str) -> None:
        await worker.__aenter__()
        self.args = (time.time(), 0.0, 0.0, PAD_PEER)

    async def close(self) -> None:
        await worker.__aexit__(None, None, None)

    async def one(self) -> None:
        await noop.enqueue(*self.args)

    async def many(self, k: int) -> None:
        args = self.args
        await worker.enqueue_many([noop.enqueue(*args) for _ in range(k)])


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"trio": Caller, "asyncio": Caller}
