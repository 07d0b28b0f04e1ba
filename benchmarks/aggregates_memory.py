"""What the per-minute aggregates cost in memory (issue 30 item 3).

``python -m benchmarks.aggregates_memory``: on a private redis-server, a
RedisStore adds a busy minute's counts for K kinds of one queue (each kind:
succeeded, failed and retried non-zero, its runs in 3 run-time buckets:
``add_aggregates`` as the aggregator sends it), and ``MEMORY USAGE`` of the
minute's hash is read (``SAMPLES 0``: every field). A quiet kind (succeeded
only, one bucket) is measured too. Per (queue, kind, minute): the hash's
bytes / K; a day at the default ``aggregate_keep`` is 1,440 such minutes.
On SQLite, the same rows are written into a fresh store file and the
``aggregates`` table's and its index's pages counted (``dbstat``).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile

import trio

from chronos_trio.records._aggregates import BUCKETS, KindCounts
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing.redis_server import RedisServer

KEEP = 86400.0
MINUTES = int(KEEP // 60)


def busy(queue: str, kind: str) -> KindCounts:
    h = [0] * BUCKETS
    h[4], h[5], h[6] = 120, 30, 2
    return KindCounts(queue, kind, 140, 4, 8, tuple(h))


def quiet(queue: str, kind: str) -> KindCounts:
    h = [0] * BUCKETS
    h[5] = 3
    return KindCounts(queue, kind, 3, 0, 0, tuple(h))


async def redis_bytes(url: str, kinds: int, make: object) -> int:
    store = RedisStore.from_url(url, namespace=f"m{kinds}{id(make)}")
    try:
        counts = [make(f"queue-{kinds}", f"app.tasks.kind_{i:03d}") for i in range(kinds)]  # type: ignore[operator]
        await store.add_aggregates(counts, keep=KEEP)
        rows = await store.aggregates([f"queue-{kinds}"], 0.0)
        minute = rows[0].minute
        key = store._ctx.keys.aggregates(f"queue-{kinds}") + str(minute)
        from chronos_trio.store.redis._scripts import Op

        (used,) = await store._adapter.execute(
            [Op.command(key, "MEMORY", "USAGE", key, "SAMPLES", "0")]
        )
        return int(used)
    finally:
        await store.aclose()


def sqlite_bytes(kinds: int, minutes: int) -> int:
    from chronos_trio.store._sql_aggregates import COUNT_COLUMNS, table_sql

    with tempfile.NamedTemporaryFile(suffix=".db") as f:
        conn = sqlite3.connect(f.name)
        for stmt in table_sql("INTEGER", " STRICT"):
            conn.execute(stmt)
        cols = ", ".join(COUNT_COLUMNS)
        marks = ", ".join("?" * (3 + len(COUNT_COLUMNS)))
        rows = []
        for m in range(minutes):
            for i in range(kinds):
                c = busy("queue", f"app.tasks.kind_{i:03d}")
                rows.append(
                    (
                        "queue",
                        c.kind,
                        1_800_000_000 + 60 * m,
                        c.succeeded,
                        c.failed,
                        c.retried,
                        *c.latency,
                    )
                )
        conn.executemany(
            f"INSERT INTO aggregates (queue, kind, minute, {cols}) VALUES ({marks})", rows
        )
        conn.commit()
        try:
            (size,) = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN ('aggregates', 'aggregates_minute',"
                " 'sqlite_autoindex_aggregates_1')"
            ).fetchone()
        except sqlite3.OperationalError:  # no dbstat in this build: the file's pages
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (page,) = conn.execute("PRAGMA page_size").fetchone()
            size = pages * page
        conn.close()
        return int(size)


async def main(kinds_list: list[int]) -> None:
    with RedisServer() as server:
        print("Redis: MEMORY USAGE of one (queue, minute) hash")
        head = ("kinds", "busy bytes", "per kind", "quiet bytes", "per kind", "day/queue")
        print("{:>6} {:>11} {:>9} {:>12} {:>9} {:>11}".format(*head))
        for k in kinds_list:
            b = await redis_bytes(server.url, k, busy)
            q = await redis_bytes(server.url, k, quiet)
            day = b * MINUTES / 1e6
            print(f"{k:>6} {b:>11} {b / k:>9.0f} {q:>12} {q / k:>9.0f} {day:>9.2f}MB")
    print("SQLite: table + indexes, one row per (queue, kind, minute)")
    for k in kinds_list:
        n = 120
        size = sqlite_bytes(k, n)
        per_row, day = size / (k * n), size / n * MINUTES / 1e6
        print(f"{k:>6} kinds x {n} min: {size} bytes = {per_row:.0f}/row; day/queue {day:.2f}MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kinds", default="1,10,50")
    args = parser.parse_args()
    trio.run(main, [int(k) for k in args.kinds.split(",")])
