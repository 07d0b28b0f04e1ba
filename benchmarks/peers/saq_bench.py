"""SAQ: ``saq benchmarks.peers.saq_bench.settings --workers N --quiet`` (its
CLI, as its README shows). Settings: ``concurrency`` = concurrency; the rest
default (``dequeue_timeout`` 0, ``timers.schedule`` 1 s, job ttl 600 s).
Scheduled jobs take whole epoch seconds (``scheduled: int``), rounded up here.
``noop_result`` (the round trip) returns a small result, awaited with
``Queue.apply`` (which polls every ``poll_interval``, 0.5 s by default).
The queue's redis-py pool holds max(100, C + 16) connections (redis-py 8's
default, 100, failed jobs at concurrency 256).
``incr`` makes its one Redis round trip on a redis-py asyncio client that
the worker's ``startup`` hook puts in the context, as SAQ's docs do for a
job's resources."""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

import redis.asyncio
from saq import Queue
from saq.queue.redis import RedisQueue

from benchmarks._common import ENV_URL, INCR_KEY, PAD_PEER, env_concurrency, recorder

NAME = "saq"
BACKEND = "asyncio"
PACKAGES = ("saq", "redis", "hiredis")


async def noop(ctx: Any, *, sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold and ctx["job"].attempts <= 1:
        await asyncio.sleep(hold)


async def noop_result(
    ctx: Any, *, sent_at: float, due_at: float, hold: float, pad: str
) -> dict[str, float]:
    """The same handler I/O as ``noop``, returning a small result."""
    return {"ran_at": recorder().record(sent_at, due_at)}


async def incr(ctx: Any, *, sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip on the worker's own client, recorded once done."""
    await ctx["redis"].incr(INCR_KEY)
    recorder().record(sent_at, due_at)


async def blob(ctx: Any, *, data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


async def startup(ctx: Any) -> None:
    ctx["redis"] = redis.asyncio.Redis.from_url(_url)


async def shutdown(ctx: Any) -> None:
    await ctx["redis"].aclose()


_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
#: The queue's connections: redis-py 8 caps a pool at 100 unless told, and at
#: concurrency 256 jobs failed (MaxConnectionsError while finishing them).
POOL_SIZE = max(100, env_concurrency(1) + 16)
settings = {
    # Queue.from_url(url), with the pool sized for the concurrency
    "queue": RedisQueue(redis.asyncio.Redis.from_url(_url, max_connections=POOL_SIZE)),
    "functions": [noop, noop_result, incr, blob],
    "concurrency": env_concurrency(10),
    "startup": startup,
    "shutdown": shutdown,
}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    argv = [f"{venv_bin}/saq", "benchmarks.peers.saq_bench.settings", "--quiet"]
    return [[*argv, "--workers", str(processes)]]


class Producer:
    bulk = False  # no batch enqueue (Queue.map waits for results)

    async def open(self, url: str) -> None:
        self.queue = Queue.from_url(url)
        await self.queue.connect()

    async def close(self) -> None:
        await self.queue.disconnect()

    async def enqueue(
        self, sent_at: float, due_at: float = 0.0, *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        await self.queue.enqueue(
            kind,
            sent_at=sent_at,
            due_at=due_at,
            hold=hold,
            pad=PAD_PEER,
            scheduled=math.ceil(due_at) if due_at else 0,
        )

    async def enqueue_data(self, data: str, delay: float) -> None:
        """A job of ``blob`` due ``delay`` s from now (``scheduled``, whole seconds)."""
        await self.queue.enqueue("blob", data=data, scheduled=math.ceil(time.time() + delay))

    async def round_trip(self, sent_at: float, poll: float | None, timeout: float) -> Any:
        """``Queue.apply`` (polling every ``poll`` s; None: SAQ's default 0.5 s)."""
        kwargs = {"sent_at": sent_at, "due_at": 0.0, "hold": 0.0, "pad": PAD_PEER}
        if poll is not None:
            kwargs["poll_interval"] = poll
        return await self.queue.apply("noop_result", timeout=timeout, **kwargs)


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): ``await queue.enqueue("noop", ...)``
    on ``Queue.from_url``, one job per call; SAQ has no batch call that
    does not wait for results (``Queue.map``)."""

    one_label = "await queue.enqueue(...)"
    many_label = None

    async def open(self, url: str) -> None:
        self.queue = Queue.from_url(url)
        await self.queue.connect()
        self.kwargs = {"sent_at": time.time(), "due_at": 0.0, "hold": 0.0, "pad": PAD_PEER}

    async def close(self) -> None:
        await self.queue.disconnect()

    async def one(self) -> None:
        await self.queue.enqueue("noop", **self.kwargs)


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"asyncio": Caller}
