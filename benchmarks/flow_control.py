"""Flow-control benchmarks (issue 15), each beside a plain drain in the same run:

* plain: ``N`` pre-enqueued jobs drained by one embedded worker (c=64);
* priorities: the same, every job with a priority from -5 to 5;
* rate limit: the same, every job under one rate limit far above the drain
  rate (10,000,000/s, burst 100,000): the cost of judging it in the lease;
* concurrency limit: the same, every job under one concurrency limit far
  above the worker's concurrency (100,000): the cost of taking and giving
  back its slots;
* strict order: two queues (``high`` and ``low``) with ``N/10`` ready jobs
  each, one worker with ``strict_priority`` over ``high,low``: the order the
  handlers saw must be every ``high`` job before any ``low`` one (verified,
  not timed).

Handlers wait 1 ms (``trio.sleep(0.001)``, an I/O call's shape) and return.
The variants run interleaved, each from an empty private redis-server, and
the median of ``--runs`` is shown with its ratio to the plain drain::

    python -m benchmarks.flow_control [--jobs 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import trio

from chronos_trio import App, ConcurrencyLimit, JobContext, RateLimit
from chronos_trio.store.redis import RedisStore

from ._proc import REPO
from ._redis import open_redis
from .workflows import loadavg, log

RESULTS = REPO / "benchmarks" / "results" / "flow_control.json"
VARIANTS = ("plain", "priorities", "rate limit", "concurrency limit")


async def drain(url: str, n: int, variant: str) -> float:
    """Jobs/s of one worker (c=64) draining ``n`` pre-enqueued jobs."""
    done = trio.Event()
    count = 0
    app = App(RedisStore.from_url(url))
    options: dict[str, Any] = {}
    if variant == "rate limit":
        options["rate_limit"] = RateLimit(10_000_000, per=1.0, burst=100_000)
    elif variant == "concurrency limit":
        options["concurrency_limit"] = ConcurrencyLimit(100_000)

    @app.task("bench", **options)
    async def bench(payload: int, job: JobContext) -> None:
        nonlocal count
        await trio.sleep(0.001)
        count += 1
        if count == n:
            done.set()

    rng = random.Random(n)
    for start in range(0, n, 1000):
        payloads = range(start, min(n, start + 1000))
        if variant == "priorities":
            jobs = [bench.new_job(p, priority=rng.randint(-5, 5)) for p in payloads]
            await app.enqueue_jobs(jobs)
        else:
            await bench.enqueue_many(list(payloads))
    t0 = time.perf_counter()
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        with trio.fail_after(300):
            await done.wait()
        took = time.perf_counter() - t0
    await app.store.aclose()
    return n / took


async def strict_order(url: str, n: int) -> dict[str, Any]:
    """Whether a strict-priority worker ran every ``high`` job before any ``low``."""
    seen: list[str] = []
    app = App(RedisStore.from_url(url))

    @app.task("high", queue="high")
    async def high(payload: int, job: JobContext) -> None:
        seen.append("high")

    @app.task("low", queue="low")
    async def low(payload: int, job: JobContext) -> None:
        seen.append("low")

    await low.enqueue_many(list(range(n)))
    await high.enqueue_many(list(range(n)))
    async with app.open_worker(
        concurrency=64, poll_interval=0.05, queues="high,low", strict_priority=True
    ) as worker:
        with trio.fail_after(300):
            await worker.wait_idle()
    await app.store.aclose()
    first_low = seen.index("low") if "low" in seen else len(seen)
    in_order = all(s == "high" for s in seen[:first_low]) and "high" not in seen[first_low:]
    return {"jobs": len(seen), "in_order": in_order, "high_before_first_low": first_low}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = loadavg()
    started = time.monotonic()
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    orders: list[dict[str, Any]] = []
    with open_redis() as redis:
        version = redis.version()
        for i in range(args.runs):
            # interleaved, a different order each run: the machine's drift
            # lands on every variant alike
            order = list(VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)])
            for variant in order:
                redis.flush()
                rate = trio.run(drain, redis.url, args.jobs, variant)
                rates[variant].append(rate)
                log(f"run {i + 1}/{args.runs} {variant}: {rate:,.0f} jobs/s (load {loadavg()})")
            redis.flush()
            orders.append(trio.run(strict_order, redis.url, max(100, args.jobs // 10)))
            log(f"run {i + 1}/{args.runs} strict order: {orders[-1]}")
    load_end = loadavg()
    medians = {v: statistics.median(r) for v, r in rates.items()}
    doc = {
        "jobs": args.jobs,
        "runs": args.runs,
        "redis": version,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "seconds": round(time.monotonic() - started, 1),
        "rates": rates,
        "medians": medians,
        "strict_order": orders,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"\n{args.jobs} jobs per drain, c=64, handlers sleep 1 ms; median of {args.runs} "
        f"runs; redis-server {version}; load {load_start} -> {load_end} "
        f"({os.cpu_count()} CPUs); {doc['seconds']} s"
    )
    print(f"{'variant':<20} {'jobs/s':>10} {'vs plain':>9}")
    for variant in VARIANTS:
        ratio = medians[variant] / medians["plain"]
        print(f"{variant:<20} {medians[variant]:>10,.0f} {ratio:>8.2f}x")
    ok = all(o["in_order"] for o in orders)
    print(
        f"strict priority (high,low): every high job before any low one in "
        f"{sum(o['in_order'] for o in orders)}/{len(orders)} runs"
        + ("" if ok else f" -- ORDER BROKEN: {orders}")
    )


if __name__ == "__main__":
    main()
