"""What the asyncio peers of the PostgreSQL benchmark share: ``run``,
``sleep``, the handlers' own query pools (psycopg or asyncpg, whichever the
peer's users have), the handler's body and the worker process's frame (its
recorder started at once, SIGTERM handled, the pool opened before the
worker starts)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks._common import PAD_PEER, env_options, recorder
from benchmarks.pg_systems import QUERY_POOL


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def fields(job: dict[str, Any]) -> dict[str, Any]:
    """A job's arguments as the peers' handlers take them (about 100 bytes)."""
    return {**job, "pad": PAD_PEER}


class Queries:
    """The one-query handlers' pool: psycopg's ``AsyncConnectionPool``, or
    an asyncpg pool (``driver="asyncpg"``), all connections opened first."""

    def __init__(self, driver: str = "psycopg") -> None:
        self.driver = driver
        self.pool: Any = None

    async def open(self, url: str) -> None:
        if self.driver == "asyncpg":
            import asyncpg

            self.pool = await asyncpg.create_pool(url, min_size=QUERY_POOL, max_size=QUERY_POOL)
        else:
            from psycopg_pool import AsyncConnectionPool

            self.pool = AsyncConnectionPool(
                url, min_size=QUERY_POOL, max_size=QUERY_POOL, open=False
            )
            await self.pool.open(wait=True)

    async def select_1(self) -> None:
        if self.driver == "asyncpg":
            async with self.pool.acquire() as conn:
                await conn.fetchval("SELECT 1")
        else:
            async with self.pool.connection() as conn:
                await (await conn.execute("SELECT 1")).fetchone()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()


QUERIES = Queries()


async def body(
    args: dict[str, Any], attempt: int, heartbeat: Callable[[], Awaitable[None]] | None = None
) -> None:
    """The handler of every asyncio peer: the query first (kind ``query``),
    then the start recorded, then (first attempt) ``hold`` seconds asleep,
    calling ``heartbeat`` every half second when the peer needs one."""
    if args.get("kind") == "query":
        await QUERIES.select_1()
    recorder().record_tagged(args["sent_at"], args["due_at"], args["tag"])
    hold = args.get("hold") or 0.0
    if hold and attempt <= 1:
        if heartbeat is None:
            await asyncio.sleep(hold)
        else:
            loop = asyncio.get_running_loop()
            end = loop.time() + hold
            while loop.time() < end:
                await asyncio.sleep(0.5)
                await heartbeat()


async def worker_main(serve: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """A worker process: the query pool opened, then ``serve(options)`` until
    SIGTERM or SIGINT (the task cancelled, unless the peer handles them)."""
    recorder()
    options = env_options()
    if options.get("query_url"):
        await QUERIES.open(options["query_url"])
    task = asyncio.ensure_future(serve(options))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass
    finally:
        await QUERIES.close()
