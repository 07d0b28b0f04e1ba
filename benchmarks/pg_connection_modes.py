"""How the PostgreSQL store should drive psycopg from Trio: measured.

psycopg 3's async API is asyncio-only. Two ways remain, both measured here
on one private PostgreSQL (``python -m benchmarks.pg_connection_modes``):

* **threads**: a pool of sync ``psycopg.Connection``; each operation (a
  whole transaction) runs in ``trio.to_thread.run_sync`` (what the store
  does: ``store/postgres/_database.py``);
* **trio-native**: libpq's non-blocking API (``psycopg.pq.PGconn``) on the
  Trio loop: ``send_query_params``, then ``trio.lowlevel.wait_readable`` on
  the socket until the result is in (no thread hop; type adaptation by
  hand, which a real driver on it would have to rebuild from psycopg's
  internals).

Each does the same work: ``ops`` transactions of the given shape, first one
at a time (latency), then from ``tasks`` concurrent Trio tasks, each task
with its own connection (throughput). Prints a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import psycopg_pool
import trio
from psycopg import pq

from chronos_trio.testing.postgres_server import PostgresServer

#: The shape of one operation: a short transaction as a claim or settle is.
STATEMENTS = (
    "BEGIN",
    "UPDATE bench SET n = n + 1 WHERE id = $1",
    "SELECT n FROM bench WHERE id = $1",
    "COMMIT",
)


def _setup(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench")
        conn.execute("CREATE TABLE bench (id int PRIMARY KEY, n bigint NOT NULL)")
        conn.execute("INSERT INTO bench SELECT g, 0 FROM generate_series(1, %s) g", (rows,))


# -- threads ------------------------------------------------------------------------
class Threads:
    name = "threads (sync psycopg, to_thread)"

    def __init__(self, url: str, size: int) -> None:
        self._pool = psycopg_pool.ConnectionPool(url, min_size=size, max_size=size, open=True)
        self._pool.wait()
        self._limiter = trio.CapacityLimiter(size)

    def _op(self, key: int) -> int:
        with self._pool.connection() as conn:
            conn.execute("UPDATE bench SET n = n + 1 WHERE id = %s", (key,))
            row = conn.execute("SELECT n FROM bench WHERE id = %s", (key,)).fetchone()
            assert row is not None
            return int(row[0])

    async def op(self, key: int) -> int:
        return await trio.to_thread.run_sync(self._op, key, limiter=self._limiter)

    def close(self) -> None:
        self._pool.close()


# -- trio-native libpq -------------------------------------------------------------
class _NativeConn:
    def __init__(self, url: str) -> None:
        self.pg = pq.PGconn.connect(url.encode())
        if self.pg.status != pq.ConnStatus.OK:
            raise RuntimeError(self.pg.get_error_message())
        self.pg.nonblocking = 1
        self.lock = trio.Lock()

    async def _result(self) -> list[pq.abc.PGresult]:
        fd = self.pg.socket
        while self.pg.flush() == 1:
            await trio.lowlevel.wait_writable(fd)
        results = []
        while True:
            self.pg.consume_input()
            while not self.pg.is_busy():
                res = self.pg.get_result()
                if res is None:
                    return results
                if res.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
                    raise RuntimeError(res.error_message.decode())
                results.append(res)
            await trio.lowlevel.wait_readable(fd)

    async def execute(self, query: bytes, params: list[bytes] | None = None) -> pq.abc.PGresult:
        if params is None:
            self.pg.send_query(query)
        else:
            self.pg.send_query_params(query, params)
        results = await self._result()
        return results[-1]


class Native:
    name = "trio-native libpq (wait_readable)"

    def __init__(self, url: str, size: int) -> None:
        self._free = [_NativeConn(url) for _ in range(size)]
        self._available = trio.Semaphore(size)

    async def op(self, key: int) -> int:
        async with self._available:
            conn = self._free.pop()
            try:
                arg = [str(key).encode()]
                await conn.execute(b"BEGIN")
                await conn.execute(STATEMENTS[1].encode(), arg)
                res = await conn.execute(STATEMENTS[2].encode(), arg)
                await conn.execute(b"COMMIT")
                value = res.get_value(0, 0)
                assert value is not None
                return int(value)
            finally:
                self._free.append(conn)

    def close(self) -> None:
        for conn in self._free:
            conn.pg.finish()


# -- the run -----------------------------------------------------------------------
async def _sequential(op: Callable[[int], Awaitable[int]], ops: int, rows: int) -> list[float]:
    took = []
    for i in range(ops):
        start = time.perf_counter()
        await op(i % rows + 1)
        took.append(time.perf_counter() - start)
    return took


async def _concurrent(
    op: Callable[[int], Awaitable[int]], ops: int, tasks: int, rows: int
) -> float:
    per_task = ops // tasks

    async def worker(offset: int) -> None:
        for i in range(per_task):
            await op((offset * per_task + i) % rows + 1)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for t in range(tasks):
            nursery.start_soon(worker, t)
    return per_task * tasks / (time.perf_counter() - start)


def measure(url: str, *, ops: int, tasks: int, rows: int = 10_000) -> list[dict[str, Any]]:
    """One row per driver: sequential latency (p50/p99 µs) and ops/s with
    ``tasks`` concurrent tasks."""
    _setup(url, rows)
    out = []
    for make in (Threads, Native):
        driver = make(url, tasks)
        try:
            took = trio.run(_sequential, driver.op, ops, rows)
            rate = trio.run(_concurrent, driver.op, ops * 2, tasks, rows)
        finally:
            driver.close()
        took.sort()
        out.append(
            {
                "driver": driver.name,
                "p50_us": statistics.median(took) * 1e6,
                "p99_us": took[int(len(took) * 0.99)] * 1e6,
                "seq_ops_s": len(took) / sum(took),
                "concurrent_ops_s": rate,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--tasks", type=int, default=16)
    args = parser.parse_args()
    with PostgresServer() as server:
        rows = measure(server.url, ops=args.ops, tasks=args.tasks)
    load = os.getloadavg()[0]
    print(
        f"\none transaction = {len(STATEMENTS)} statements; {args.ops} sequential, "
        f"{args.ops * 2} over {args.tasks} tasks; load {load:.2f}"
    )
    print(f"{'driver':38} {'p50 µs':>8} {'p99 µs':>8} {'seq op/s':>9} {'conc op/s':>10}")
    for row in rows:
        print(
            f"{row['driver']:38} {row['p50_us']:8.0f} {row['p99_us']:8.0f} "
            f"{row['seq_ops_s']:9.0f} {row['concurrent_ops_s']:10.0f}"
        )


if __name__ == "__main__":
    main()
