"""The producer's side of a workflow start (issue 29): ``C`` sequential
``app.enqueue_workflow`` calls of one 10-link chain (the chains workload of
``benchmarks.workflows``), with no worker, on a private redis-server;
counted, not timed by the clock:

* round trips per start (``RedisStore.statistics``);
* CPU per start (``time.process_time`` of the process, median of the
  blocks of 100 starts), and the same for ``result()`` of finished chains
  is left to ``benchmarks.workflow_trips``.

``--profile`` prints a cProfile of the starts instead::

    python -m benchmarks.workflow_start [--starts 2000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import trio

from chronos_trio import App, JobContext, chain
from chronos_trio.store.redis import RedisStore

from ._redis import open_redis
from .workflows import LINKS

BLOCK = 100


async def starts(url: str, n: int, profile: bool) -> dict[str, float]:
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
    await store.aclose()
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return {
        "round trips per start": trips / (len(per_block) * BLOCK),
        "CPU us per start (median block)": statistics.median(per_block) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with open_redis() as redis:
        got = trio.run(starts, redis.url, args.starts, args.profile)
    for name, value in got.items():
        print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
