"""Job search on a big store (issue 30 item 1): how long the first page of a
search takes with ``--jobs`` jobs (default 1,000,000) in a private
redis-server (with ``--sqlite`` in a SQLite file, with ``--postgres`` in a
private PostgreSQL; ``--no-redis`` skips Redis), and how fast a
search reads records when it has to walk them all.

The store is filled through its own ``enqueue_many`` (batches of 5,000):
``--jobs`` jobs of ten kinds in queue ``bench`` (payload
``{"user_id": N, "plan": "..."}``), of which ``--dead`` (default 20%) are
leased and dead-lettered with an error: 1 in 100 ``TimeoutError: smtp
relay did not answer``, the others ``ValueError: upstream said 422``.

Each search is timed as ``Inspector.search`` answers it (page of 50, the
default scan bound of 10,000 records per call), best of ``--runs``:

* ``kind+state``: kind ``kind-3``, state dead (10% of the dead match);
* ``error (common)``: ``upstream said`` (most dead jobs);
* ``error (rare)``: ``smtp relay`` (1% of the dead);
* ``payload``: ``"user_id": 4242,`` (one job in the store);
* ``payload, followed``: the same search followed by cursor to its end:
  every record read once (the O(jobs) worst case, and the scan rate).

::

    python -m benchmarks.search [--jobs 1000000] [--dead 0.2] [--partitions 1] [--runs 3]
                               [--sqlite] [--postgres] [--no-redis]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from chronos_trio import Inspector, JobQuery, NewJob, QueueWeight
from chronos_trio.store import SettleKind, Settlement, Store
from chronos_trio.store.redis import RedisStore

from ._redis import open_redis

BATCH = 5000
QUEUE = "bench"
KINDS = [f"kind-{i}" for i in range(10)]

SEARCHES: dict[str, JobQuery] = {
    "kind+state": JobQuery(kind="kind-3", states=("dead",)),
    "error (common)": JobQuery(error="upstream said"),
    "error (rare)": JobQuery(error="smtp relay"),
    "payload": JobQuery(payload='"user_id": 4242,'),
}


async def fill(store: Store, jobs: int, dead_share: float) -> dict[str, float]:
    """Enqueue ``jobs`` jobs and dead-letter ``dead_share`` of them; timings."""
    t0 = time.perf_counter()
    for start in range(0, jobs, BATCH):
        await store.enqueue_many(
            [
                NewJob(
                    id=f"j{n:08d}",
                    queue=QUEUE,
                    kind=KINDS[n % len(KINDS)],
                    payload=b'{"user_id": %d, "plan": "pro"}' % n,
                    max_retries=0,
                )
                for n in range(start, min(jobs, start + BATCH))
            ]
        )
    enqueued = time.perf_counter()
    dead = int(jobs * dead_share)
    n = 0
    while n < dead:
        got = await store.lease(
            [QueueWeight(QUEUE)], min(1000, dead - n), worker_id="bench:1:0", lease_duration=600
        )
        settle = []
        for lj in got.jobs:
            error = (
                "TimeoutError: smtp relay did not answer"
                if n % 100 == 0
                else "ValueError: upstream said 422"
            )
            settle.append(Settlement(lj.ref, SettleKind.DEAD, error=error))
            n += 1
        await store.settle(settle)
        if not got.jobs:
            break
    return {"enqueue_s": enqueued - t0, "dead_letter_s": time.perf_counter() - enqueued, "dead": n}


async def _best(runs: int, one: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = await one()
        best = min(best, time.perf_counter() - t0)
    return best, result


async def measure(store: Store, runs: int) -> dict[str, Any]:
    insp = Inspector(store)
    out: dict[str, Any] = {}
    for name, query in SEARCHES.items():
        seconds, page = await _best(runs, lambda q=query: insp.search(q, limit=50))
        out[name] = {
            "first_page_ms": round(seconds * 1000, 1),
            "found": len(page.jobs),
            "scanned": page.scanned,
            "partial": page.partial,
        }

    async def follow() -> tuple[int, int, int]:
        cursor, found, scanned, calls = None, 0, 0, 0
        while True:
            page = await insp.search(SEARCHES["payload"], cursor=cursor, limit=50)
            found, scanned, calls = found + len(page.jobs), scanned + page.scanned, calls + 1
            if page.cursor is None:
                return found, scanned, calls
            cursor = page.cursor

    seconds, (found, scanned, calls) = await _best(1, follow)
    out["payload, followed"] = {
        "all_pages_s": round(seconds, 2),
        "found": found,
        "scanned": scanned,
        "calls": calls,
        "ms_per_call": round(seconds * 1000 / calls, 1),
        "records_per_s": round(scanned / seconds),
    }
    return out


def redis_part(args: argparse.Namespace, result: dict[str, Any]) -> None:
    with open_redis() as redis:
        result["redis_version"] = redis.version()

        async def on_redis() -> None:
            store = RedisStore.from_url(
                redis.url, namespace="search-bench", default_partitions=args.partitions
            )
            try:
                result["redis_fill"] = await fill(store, args.jobs, args.dead)
                result["redis_memory_mb"] = round(
                    redis.client.info("memory")["used_memory"] / 2**20
                )
                result["redis"] = await measure(store, args.runs)
            finally:
                await store.aclose()

        trio.run(on_redis)


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"jobs": args.jobs, "dead_share": args.dead}
    if not args.no_redis:
        redis_part(args, result)
    if args.sqlite:
        from chronos_trio.store.sqlite import SqliteStore

        with tempfile.TemporaryDirectory() as tmp:

            async def on_sqlite() -> None:
                store = SqliteStore.from_url(f"sqlite:///{os.path.join(tmp, 'bench.db')}")
                try:
                    result["sqlite_fill"] = await fill(store, args.jobs, args.dead)
                    result["sqlite"] = await measure(store, args.runs)
                finally:
                    await store.aclose()

            trio.run(on_sqlite)
    if args.postgres:
        from chronos_trio.store.postgres import PostgresStore
        from chronos_trio.testing.postgres_server import PostgresServer

        with PostgresServer() as pg:

            async def on_postgres() -> None:
                store = PostgresStore.from_url(pg.url)
                try:
                    result["postgres_fill"] = await fill(store, args.jobs, args.dead)
                    result["postgres"] = await measure(store, args.runs)
                finally:
                    await store.aclose()

            trio.run(on_postgres)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead", type=float, default=0.2, help="share dead-lettered (0.2)")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true", help="the same on a SQLite file")
    parser.add_argument("--postgres", action="store_true", help="the same on a private PostgreSQL")
    parser.add_argument("--no-redis", action="store_true", help="skip Redis")
    args = parser.parse_args()
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
