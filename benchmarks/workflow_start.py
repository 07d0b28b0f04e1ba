"""The producer's side of a workflow start (issue 29): ``C`` sequential
``app.enqueue_workflow`` calls of one 10-link chain (the chains workload of
``benchmarks.workflows``), with no worker, on a private redis-server;
counted, not timed by the clock:

* round trips per start (``RedisStore.statistics``);
* CPU per start (``time.process_time`` of the process, median of the
  blocks of 100 starts);
* with ``--results N``: round trips and CPU per ``result()`` of a
  finished chain (``N`` chains run by an embedded worker first).

``--profile`` prints a cProfile of the starts instead::

    python -m benchmarks.workflow_start [--starts 2000] [--results 500] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from typing import Any

import trio

from chronos_trio import App, JobContext, chain
from chronos_trio.store.redis import RedisStore

from ._redis import open_redis
from .workflows import LINKS

BLOCK = 100


async def starts(url: str, n: int, profile: bool, results: int = 0) -> dict[str, float]:
    store = RedisStore.from_url(url)
    app = App(store)

    @app.task("link")
    async def link(payload: int, job: JobContext) -> int:
        return payload + 1

    task = app.tasks["link"]
    flow = chain(task.s(0), *(task.s() for _ in range(LINKS - 1)))
    for _ in range(20):  # warm: scripts loaded, topology cached
        await app.enqueue_workflow(flow)
    trips0 = store.statistics().round_trips
    per_block: list[float] = []
    prof = cProfile.Profile() if profile else None
    for _ in range(0, n, BLOCK):
        t0 = time.process_time()
        if prof is not None:
            prof.enable()
        for _ in range(BLOCK):
            await app.enqueue_workflow(flow)
        if prof is not None:
            prof.disable()
        per_block.append((time.process_time() - t0) / BLOCK)
    trips = store.statistics().round_trips - trips0
    got = {
        "round trips per start": trips / (len(per_block) * BLOCK),
        "CPU us per start (median block)": statistics.median(per_block) * 1e6,
    }
    if results:
        got.update(await _results(app, flow, results))
    await store.aclose()
    if prof is not None:
        pstats.Stats(prof).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(40)
    return got


async def _results(app: App, flow: Any, n: int) -> dict[str, float]:
    """``result()`` of ``n`` finished chains (the worker stopped first)."""
    store = app.store
    assert isinstance(store, RedisStore)
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        started = [await app.enqueue_workflow(flow) for _ in range(n)]
        with trio.fail_after(300):
            for wf in started:
                await wf.result(timeout=120)
    trips0 = store.statistics().round_trips
    t0 = time.process_time()
    for wf in started:
        assert await wf.result(timeout=10) == LINKS
    took = time.process_time() - t0
    return {
        "round trips per result() of a finished chain": (store.statistics().round_trips - trips0)
        / n,
        "CPU us per result() of a finished chain": took / n * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--results", type=int, default=0, help="then time result() of this many finished chains"
    )
    args = parser.parse_args()
    with open_redis() as redis:
        got = trio.run(starts, redis.url, args.starts, args.profile, args.results)
    for name, value in got.items():
        print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
