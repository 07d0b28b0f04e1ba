"""SAQ on its PostgreSQL queue (``PostgresQueue``, psycopg 3): one function,
a ``Worker`` with ``concurrency`` and the defaults otherwise (LISTEN/NOTIFY,
schedule timer 1 s, the queue's pool of 4 to 20 connections). SAQ has no
batch enqueue (``Queue.map`` waits for the results): bulk is one
``enqueue`` call per job. Scheduled jobs take whole epoch seconds
(``scheduled``), rounded up here.

Recovery: a job is swept (retried) once stuck: past its ``timeout`` (10 s by
default, and the only check then) or without a heartbeat for ``heartbeat``
s. With a lease of L s, jobs have ``heartbeat`` = ceil(L), ``timeout`` 0,
the handler beats every 0.5 s while it holds, and the sweep timer is 1 s
(60 s by default). Jobs get four attempts (``retries=4``, as our task's
three retries; SAQ's default, one, would finish a swept job as aborted).
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any

from saq import Queue, Worker

from benchmarks._common import ENV_URL, env_concurrency
from benchmarks.pg_systems import _aio

BACKEND = "asyncio"
PACKAGES = ("saq", "psycopg", "psycopg-pool")
run, sleep = _aio.run, _aio.sleep


async def handle(ctx: Any, **args: Any) -> None:
    job = ctx["job"]
    await _aio.body(args, job.attempts, job.update if job.heartbeat else None)


async def install(url: str) -> None:
    queue = Queue.from_url(url)
    await queue.connect()
    await queue.disconnect()


def _options(job: dict[str, Any]) -> dict[str, Any]:
    # four attempts, as our task's max_retries=3 (SAQ's default: one)
    out: dict[str, Any] = {**_aio.fields(job), "retries": 4}
    if job["due_at"]:
        out["scheduled"] = math.ceil(job["due_at"])
    if job.get("lease"):
        out.update(heartbeat=math.ceil(job["lease"]), timeout=0)
    return out


class Producer:
    bulk = False

    async def open(self, url: str) -> None:
        self.queue = Queue.from_url(url)
        await self.queue.connect()

    async def close(self) -> None:
        await self.queue.disconnect()

    async def enqueue(self, job: dict[str, Any]) -> None:
        await self.queue.enqueue("handle", **_options(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            await self.enqueue(job)


async def _serve(options: dict[str, Any]) -> None:
    queue = Queue.from_url(os.environ[ENV_URL])
    await queue.connect()
    timers: dict[str, Any] = {"sweep": 1} if options.get("lease") else {}
    worker = Worker(queue, functions=[handle], concurrency=env_concurrency(), timers=timers)
    try:
        await worker.start()
    finally:
        await queue.disconnect()


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.pg_systems.saq_pg"]


if __name__ == "__main__":
    asyncio.run(_aio.worker_main(_serve))
