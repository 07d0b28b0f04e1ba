"""PgQueuer (asyncpg): one entrypoint, payloads JSON bytes; the worker is
``QueueManager.run`` with ``max_concurrent_tasks`` = the concurrency and
``batch_size`` its default (10), or half the concurrency when that is less
(it must be at most half), the rest default (LISTEN/NOTIFY, a 30 s dequeue
timeout). Enqueue is ``Queries.enqueue`` (its list form for bulk); delayed
jobs take ``execute_after``. The one-query handlers use an asyncpg pool, as
PgQueuer's users would.

Recovery: a picked job whose heartbeat is older than ``heartbeat_timeout``
is picked again by the next dequeue; with a lease of L s,
``heartbeat_timeout`` = L (beats every L/2 s), the rest default.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from typing import Any

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from benchmarks._common import env_concurrency
from benchmarks.pg_systems import _aio

BACKEND = "asyncio"
PACKAGES = ("pgqueuer", "asyncpg")
run, sleep = _aio.run, _aio.sleep
_aio.QUERIES.driver = "asyncpg"
ENTRYPOINT = "pgbench_job"


async def install(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


def _payload(job: dict[str, Any]) -> bytes:
    return json.dumps(_aio.fields(job)).encode()


def _after(job: dict[str, Any]) -> dt.timedelta | None:
    return dt.timedelta(seconds=max(0.0, job["due_at"] - time.time())) if job["due_at"] else None


class Producer:
    bulk = True

    async def open(self, url: str) -> None:
        self.conn = await asyncpg.connect(url)
        self.queries = Queries(AsyncpgDriver(self.conn))

    async def close(self) -> None:
        await self.conn.close()

    async def enqueue(self, job: dict[str, Any]) -> None:
        await self.queries.enqueue(ENTRYPOINT, _payload(job), 0, _after(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        await self.queries.enqueue(
            [ENTRYPOINT] * len(jobs),
            [_payload(j) for j in jobs],
            [0] * len(jobs),
            [_after(j) for j in jobs],
        )


async def _serve(options: dict[str, Any]) -> None:
    conn = await asyncpg.connect(options.get("url") or _url())
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint(ENTRYPOINT)
    async def handle(job: Any) -> None:
        await _aio.body(json.loads(job.payload), job.attempts + 1)

    c = env_concurrency()
    kwargs: dict[str, Any] = {"max_concurrent_tasks": c, "batch_size": min(10, c // 2)}
    if options.get("lease"):
        kwargs["heartbeat_timeout"] = dt.timedelta(seconds=float(options["lease"]))
    try:
        await qm.run(**kwargs)
    finally:
        qm.shutdown.set()
        await conn.close()


def _url() -> str:
    import os

    from benchmarks._common import ENV_URL

    return os.environ[ENV_URL]


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.pg_systems.pgqueuer"]


if __name__ == "__main__":
    asyncio.run(_aio.worker_main(_serve))
