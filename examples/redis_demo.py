"""Producer and worker on Redis, logging each job's queue version and partition.

    python examples/redis_demo.py redis://127.0.0.1:6379/0 --jobs 200

Run several copies at once to watch workers share the queue. Pair it with
``examples/redis_migration.py`` to promote a new topology version mid-run:
new jobs go to the new version while old ones drain.
"""

from __future__ import annotations

import argparse
import logging
import random

import attrs
import trio

import chronos_trio


@attrs.frozen
class Resize:
    image: str
    width: int


def build_app(url: str) -> chronos_trio.App:
    app = chronos_trio.App(url)

    @app.task("image.resize", max_retries=2)
    async def resize(args: Resize, job: chronos_trio.JobContext) -> None:
        await trio.sleep(random.uniform(0.01, 0.1))
        # where the job lived: its queue's topology version and partition
        version, partition = app.store.locate(job.job.placement) or (0, 0)
        print(
            f"{job.worker_id} ran {job.id[:8]} {args.image}@{args.width} "
            f"queue={job.queue} v{version} p{partition} "
            f"attempt={job.attempt}"
        )

    return app


async def main(url: str, jobs: int, delay: float, concurrency: int) -> None:
    app = build_app(url)
    task = app.tasks["image.resize"]
    async with app.open_worker(concurrency=concurrency, lease_duration=10) as worker:
        results = await task.enqueue_many(
            [Resize(f"img-{i}.png", random.choice([64, 128, 256])) for i in range(jobs)]
        )
        later = await task.enqueue(Resize("later.png", 512), delay=delay)
        print(f"enqueued {len(results) + 1} jobs (one due in {delay:g}s): {later}")
        await worker.wait_idle()
        print(worker.statistics())
    await app.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="redis://, rediss:// or redis+cluster:// URL")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    trio.run(main, args.url, args.jobs, args.delay, args.concurrency)
