"""oban, the Python port (psycopg 3; needs Python 3.12): one worker class
in queue ``bench`` (four attempts, as our task's three retries), an ``Oban``
instance with ``queues={"bench": concurrency}`` on its own pool
(``Oban.create_pool`` defaults: 1 to 10 connections) and the defaults
otherwise (insert trigger + LISTEN/NOTIFY, the stager making scheduled jobs
available every second). Enqueue is ``Oban.enqueue``, bulk
``Oban.enqueue_many``, from a client-mode instance (no queues).

Recovery: oban's lifeline (run by the leader) makes ``executing`` jobs
attempted more than ``rescue_after`` s ago available again (by age, not by
heartbeat); by default every 60 s after 300 s. With a lease of L s it runs
every second with ``rescue_after`` = L, and the worker holding the jobs runs
without leadership (``leadership=False``), so the survivor leads from the
start and no leader election is in the measured time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from typing import Any

from oban import Oban, worker
from oban.schema import install as install_schema

from benchmarks._common import ENV_URL, env_concurrency
from benchmarks.pg_systems import _aio

BACKEND = "asyncio"
PACKAGES = ("oban", "psycopg", "psycopg-pool")
run, sleep = _aio.run, _aio.sleep


@worker(queue="bench", max_attempts=4)
class Handle:
    async def process(self, job: Any) -> None:
        await _aio.body(job.args, job.attempt)


async def install(url: str) -> None:
    pool = await Oban.create_pool(url)
    try:
        await install_schema(pool)
    finally:
        await pool.close()


def _new(job: dict[str, Any]) -> Any:
    if job["due_at"]:
        at = dt.datetime.fromtimestamp(job["due_at"], dt.UTC)
        return Handle.new(_aio.fields(job), scheduled_at=at)
    return Handle.new(_aio.fields(job))


class Producer:
    bulk = True

    async def open(self, url: str) -> None:
        self.pool = await Oban.create_pool(url)
        self.oban = Oban(pool=self.pool)

    async def close(self) -> None:
        await self.pool.close()

    async def enqueue(self, job: dict[str, Any]) -> None:
        await self.oban.enqueue(_new(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        await self.oban.enqueue_many([_new(j) for j in jobs])


async def _serve(options: dict[str, Any]) -> None:
    pool = await Oban.create_pool(os.environ[ENV_URL])
    c = env_concurrency()
    kwargs: dict[str, Any] = {"queues": {"bench": c}}
    if options.get("lease"):
        kwargs["lifeline"] = {"interval": 1.0, "rescue_after": float(options["lease"])}
        # the victim (started first, with the jobs' concurrency) does not lead
        kwargs["leadership"] = not options.get("victim", False)
    try:
        async with Oban(pool=pool, **kwargs):
            await asyncio.Event().wait()
    finally:
        await pool.close()


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.pg_systems.oban"]


if __name__ == "__main__":
    asyncio.run(_aio.worker_main(_serve))
