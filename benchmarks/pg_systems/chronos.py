"""chronos_trio in the PostgreSQL benchmark: our PostgreSQL store
(``postgresql://`` URLs) or our Redis store (``redis://``), one App with one
task whose handler records its start (``benchmarks._common``), makes one
``SELECT 1`` first when the job's kind is ``query``, and sleeps ``hold``
seconds on its first attempt when asked.

The one query runs the way a Trio user of a blocking driver makes it: a
psycopg ``ConnectionPool`` of :data:`~benchmarks.pg_systems.QUERY_POOL`
connections, the call in a Trio worker thread.

``python -m benchmarks.pg_systems.chronos``: one worker process (options
from the environment), until SIGTERM.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import attrs
import trio

import chronos_trio
from benchmarks._common import ENV_URL, PAD, env_concurrency, env_options, recorder
from benchmarks.pg_systems import QUERY_POOL

BACKEND = "trio"
PACKAGES = ("chronos_trio", "trio", "psycopg", "psycopg-pool", "redis")
KIND = "pgbench.job"


@attrs.frozen
class Job:
    """About 100 bytes as JSON, like the other benchmarks' payloads."""

    sent_at: float
    due_at: float = 0.0
    hold: float = 0.0
    tag: int = 0
    query: bool = False
    pad: str = PAD


class _QueryPool:
    """The handlers' own connections, all opened before the worker starts
    (as every system's are), so no drain waits for them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None

    def open(self) -> None:
        from psycopg_pool import ConnectionPool

        self._pool = ConnectionPool(self.url, min_size=QUERY_POOL, max_size=QUERY_POOL)
        self._pool.wait(30)

    def _select_1(self) -> None:
        with self._pool.connection() as conn:
            conn.execute("SELECT 1").fetchone()

    async def select_1(self) -> None:
        await trio.to_thread.run_sync(self._select_1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


_queries = _QueryPool(env_options().get("query_url", ""))


async def handle(args: Job, ctx: chronos_trio.JobContext) -> None:
    if args.query:
        await _queries.select_1()
    recorder().record_tagged(args.sent_at, args.due_at, args.tag)
    if args.hold and ctx.attempt == 1:
        await trio.sleep(args.hold)


def make_app(url: str) -> tuple[chronos_trio.App, Any]:
    app = chronos_trio.App(url, name="pgbench")
    task = app.task(KIND, max_retries=3, timeout=3600)(handle)
    return app, task


def _payload(job: dict[str, Any]) -> Job:
    return Job(
        sent_at=job["sent_at"],
        due_at=job["due_at"],
        hold=job["hold"],
        tag=job["tag"],
        query=job["kind"] == "query",
    )


async def _connect(app: chronos_trio.App) -> None:
    """Connect (and on PostgreSQL migrate) before anything is timed."""
    store: Any = app.store
    db = getattr(store, "_db", None)
    if db is not None:  # PostgreSQL: one empty transaction
        await db.run(lambda conn: None, what="connect")


async def install(url: str) -> None:
    app, _ = make_app(url)
    try:
        await _connect(app)
    finally:
        await app.aclose()


class Producer:
    bulk = True

    async def open(self, url: str) -> None:
        self.app, self.task = make_app(url)
        await _connect(self.app)

    async def close(self) -> None:
        await self.app.aclose()

    async def enqueue(self, job: dict[str, Any]) -> None:
        if job["due_at"]:
            await self.task.enqueue(_payload(job), run_at=job["due_at"])
        else:
            await self.task.enqueue(_payload(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        if any(j["due_at"] for j in jobs):
            new = self.task.new_job
            await self.app.enqueue_jobs(
                [
                    new(_payload(j), run_at=j["due_at"]) if j["due_at"] else new(_payload(j))
                    for j in jobs
                ]
            )
        else:
            await self.task.enqueue_many([_payload(j) for j in jobs])


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.pg_systems.chronos"]


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


async def sleep(seconds: float) -> None:
    await trio.sleep(seconds)


class _RedisIdleMeter:
    """Redis commands per second (``INFO commandstats``; our INFO excluded)."""

    def __init__(self, url: str) -> None:
        import time

        import redis

        self._time = time
        self._client = redis.Redis.from_url(url)
        self._calls = self._read()
        self._t = time.monotonic()

    def _read(self) -> dict[str, int]:
        info = self._client.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}

    def read(self) -> dict[str, Any]:
        seconds = self._time.monotonic() - self._t
        calls = self._read()
        delta = {k: v - self._calls.get(k, 0) for k, v in calls.items() if k != "info"}
        delta = {k: v for k, v in delta.items() if v > 0}
        self._client.close()
        top = sorted(delta.items(), key=lambda kv: -kv[1])[:6]
        return {
            "queries_per_s": sum(delta.values()) / seconds,
            "seconds": seconds,
            "top_statements": [[v, k] for k, v in top],
            "unit": "Redis commands",
        }


def idle_meter(url: str) -> _RedisIdleMeter | None:
    """On Redis, its commands; on PostgreSQL None (the driver's own meter)."""
    return _RedisIdleMeter(url) if url.startswith(("redis://", "rediss://")) else None


async def _worker() -> None:
    options = env_options()
    config: dict[str, Any] = {"concurrency": env_concurrency()}
    if options.get("lease"):
        lease = float(options["lease"])
        config.update(lease_duration=lease, max_in_flight=env_concurrency())
    app, _ = make_app(os.environ[ENV_URL])
    if _queries.url:
        await trio.to_thread.run_sync(_queries.open)
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with app.open_worker(**config):
                async for _ in signals:
                    break
    finally:
        await app.aclose()
        _queries.close()


if __name__ == "__main__":
    recorder()  # a progress file at once, before any job runs
    trio.run(_worker)
