"""Workflow benchmarks (issue 14), beside a plain drain in the same run:

* plain: ``N`` pre-enqueued jobs drained by one embedded worker (c=64);
* chains: ``C`` 10-link chains started at once, each link passing its
  result on: links/s, and its ratio to the plain drain's jobs/s;
* fan-out: one group of ``M`` members and a callback (a chord): the
  callback's start after the last member finished (latency), and members/s.

Handlers do nothing but return (the cost measured is the queue's). Each row
starts from an empty private redis-server (never a shared one)::

    python -m benchmarks.workflows [--jobs 20000] [--chains 500] [--members 1000] [--runs 3]

Peers (Celery's chain/chord, Dramatiq's pipeline/group) are not run here yet.
"""

from __future__ import annotations

import argparse
import statistics
import time

import trio

from chronos_trio import App, JobContext, chain, group
from chronos_trio.store.redis import RedisStore

from ._redis import open_redis

LINKS = 10


def _app(url: str, marks: dict[str, float]) -> App:
    app = App(RedisStore.from_url(url))

    @app.task("link")
    async def link(payload: int, job: JobContext) -> int:
        return payload + 1

    @app.task("member")
    async def member(payload: int, job: JobContext) -> int:
        marks["last_member"] = time.perf_counter()
        return payload

    @app.task("callback")
    async def callback(payload: list[int], job: JobContext) -> int:
        marks["callback"] = time.perf_counter()
        return len(payload)

    return app


async def plain(url: str, n: int) -> float:
    done = trio.Event()
    count = 0
    app = App(RedisStore.from_url(url))

    @app.task("plain")
    async def plain_job(payload: int, job: JobContext) -> int:
        nonlocal count
        count += 1
        if count == n:
            done.set()
        return payload + 1

    task = app.tasks["plain"]
    for start in range(0, n, 1000):
        await task.enqueue_many(list(range(start, min(n, start + 1000))))
    t0 = time.perf_counter()
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        with trio.fail_after(300):
            await done.wait()
        took = time.perf_counter() - t0
    await app.store.aclose()
    return n / took


async def chains(url: str, c: int) -> float:
    marks: dict[str, float] = {}
    app = _app(url, marks)
    link = app.tasks["link"]
    flow = chain(link.s(0), *(link.s() for _ in range(LINKS - 1)))
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        t0 = time.perf_counter()
        started = [await app.enqueue_workflow(flow) for _ in range(c)]
        with trio.fail_after(600):
            for wf in started:
                assert await wf.result(timeout=300) == LINKS
        took = time.perf_counter() - t0
    await app.store.aclose()
    return c * LINKS / took


async def fan_out(url: str, m: int) -> tuple[float, float]:
    marks: dict[str, float] = {}
    app = _app(url, marks)
    member, callback = app.tasks["member"], app.tasks["callback"]
    flow = chain(group(*(member.s(k) for k in range(m))), callback.s())
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        t0 = time.perf_counter()
        wf = await app.enqueue_workflow(flow)
        with trio.fail_after(600):
            assert await wf.result(timeout=300) == m
    await app.store.aclose()
    return (marks["callback"] - marks["last_member"]) * 1000, m / (marks["last_member"] - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {"plain": [], "links": [], "latency": [], "members": []}
    with open_redis() as redis:
        for _ in range(args.runs):
            redis.flush()
            rows["plain"].append(trio.run(plain, redis.url, args.jobs))
            redis.flush()
            rows["links"].append(trio.run(chains, redis.url, args.chains))
            redis.flush()
            latency, per_s = trio.run(fan_out, redis.url, args.members)
            rows["latency"].append(latency)
            rows["members"].append(per_s)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"runs: {args.runs} (median shown; all: {rows})")
    print("| workload | figure | vs plain drain |")
    print("|---|---|---|")
    print(f"| plain drain, {args.jobs:,} jobs, c=64 | {med['plain']:,.0f} jobs/s | 1.00x |")
    print(
        f"| {args.chains} chains of {LINKS} links at once | {med['links']:,.0f} links/s "
        f"| {med['links'] / med['plain']:.2f}x |"
    )
    print(
        f"| group of {args.members:,} + callback | callback {med['latency']:.1f} ms after the "
        f"last member; members {med['members']:,.0f}/s | {med['members'] / med['plain']:.2f}x |"
    )


if __name__ == "__main__":
    main()
