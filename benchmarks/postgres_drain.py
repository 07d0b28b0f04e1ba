"""The PostgreSQL store's worker path, measured on a private server:
enqueue one at a time (``task.enqueue``), enqueue in bulk, and the drain of
one worker process (in this process) with a no-op handler.

``python -m benchmarks.postgres_drain [--jobs N] [--concurrency C]``
prints one line per figure. A private cluster is started (and removed) for
the run; nothing touches the shared server on 5432.
"""

from __future__ import annotations

import argparse
import time

import trio

import chronos_trio
from chronos_trio.testing.postgres_server import PostgresServer


async def run(url: str, jobs: int, singles: int, concurrency: int, batch: int) -> None:
    app = chronos_trio.App(url)
    done = 0
    target = singles
    all_done = trio.Event()

    @app.task("bench.noop")
    async def noop(n: int) -> None:
        nonlocal done
        done += 1
        if done >= target:
            all_done.set()

    # enqueue one at a time
    started = time.perf_counter()
    for i in range(singles):
        await noop.enqueue(i)
    single_rate = singles / (time.perf_counter() - started)
    print(f"enqueue one at a time: {single_rate:,.0f} jobs/s ({singles} jobs)")

    # drain what is there: the singles first
    async with app.open_worker(concurrency=concurrency, batch_size=batch):
        with trio.fail_after(120):
            await all_done.wait()
    done, target, all_done = 0, jobs, trio.Event()

    # enqueue in bulk, then drain with one worker
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        await noop.enqueue_many(list(range(start, min(jobs, start + 1000))))
    bulk_rate = jobs / (time.perf_counter() - started)
    print(f"enqueue in bulk (1000 a call): {bulk_rate:,.0f} jobs/s ({jobs} jobs)")

    started = time.perf_counter()
    async with app.open_worker(concurrency=concurrency, batch_size=batch):
        with trio.fail_after(600):
            await all_done.wait()
        drained = time.perf_counter() - started
    print(
        f"drain, one worker process, no-op handler, concurrency={concurrency}, "
        f"batch_size={batch}: {jobs / drained:,.0f} jobs/s ({jobs} jobs in {drained:.2f} s)"
    )
    await app.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--singles", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    with PostgresServer() as server:
        trio.run(run, server.url, args.jobs, args.singles, args.concurrency, args.batch)


if __name__ == "__main__":
    main()
