"""Metrics benchmark (issue 16): the cost of ``App(metrics=...)``, beside a
drain with none in the same run.

* none: ``N`` pre-enqueued jobs drained by one embedded worker (c=64) with
  no metrics object (the store is handed no observer, no event is built);
* no-op: the same with a :class:`~chronos_trio.MetricsBase` (every method,
  the store's round-trip observer included, does nothing): the seam's own
  cost;
* prometheus: the same with a
  :class:`~chronos_trio.integrations.prometheus.PrometheusMetrics`.

Handlers wait 1 ms (``trio.sleep(0.001)``, an I/O call's shape) and return.
The variants run interleaved, each from an empty private redis-server; the
median of ``--runs`` is shown with its ratio to ``none``, the median of
the ratios within each round (robust to a machine whose speed drifts
between rounds), and this process's CPU time per job (Python and hiredis;
Redis is another process)::

    python -m benchmarks.metrics [--jobs 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import trio

from chronos_trio import App, JobContext, MetricsBase
from chronos_trio.integrations.prometheus import PrometheusMetrics
from chronos_trio.store.redis import RedisStore

from ._proc import REPO
from ._redis import open_redis
from .workflows import loadavg, log

RESULTS = REPO / "benchmarks" / "results" / "metrics.json"
VARIANTS = ("none", "no-op", "prometheus")


async def drain(url: str, n: int, variant: str) -> tuple[float, float]:
    """Jobs/s of one worker (c=64) draining ``n`` pre-enqueued jobs, and
    this process's CPU seconds per job while it did."""
    done = trio.Event()
    count = 0
    metrics: Any = {"none": None, "no-op": MetricsBase(), "prometheus": PrometheusMetrics()}[
        variant
    ]
    app = App(RedisStore.from_url(url), metrics=metrics)

    @app.task("bench")
    async def bench(payload: int, job: JobContext) -> None:
        nonlocal count
        await trio.sleep(0.001)
        count += 1
        if count == n:
            done.set()

    for start in range(0, n, 1000):
        await bench.enqueue_many(list(range(start, min(n, start + 1000))))
    t0, cpu0 = time.perf_counter(), time.process_time()
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        with trio.fail_after(300):
            await done.wait()
        took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await app.store.aclose()
    if variant == "prometheus":
        got = metrics.registry.get_sample_value(
            "chronos_jobs_total", {"queue": "default", "kind": "bench", "outcome": "succeeded"}
        )
        # the last settles may still be in the notifier when `done` is set
        assert got is not None and got >= n - 64 * 2, got
    return n / took, cpu / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = loadavg()
    started = time.monotonic()
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpus: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with open_redis() as redis:
        version = redis.version()
        for i in range(args.runs):
            # interleaved, a different order each run: drift lands on every variant alike
            order = list(VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)])
            for variant in order:
                redis.flush()
                rate, cpu = trio.run(drain, redis.url, args.jobs, variant)
                rates[variant].append(rate)
                cpus[variant].append(cpu)
                log(
                    f"run {i + 1}/{args.runs} {variant}: {rate:,.0f} jobs/s, "
                    f"{cpu * 1e6:.1f} us CPU/job (load {loadavg()})"
                )
    load_end = loadavg()
    medians = {v: statistics.median(r) for v, r in rates.items()}
    cpu_medians = {v: statistics.median(c) for v, c in cpus.items()}
    doc = {
        "jobs": args.jobs,
        "runs": args.runs,
        "redis": version,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "seconds": round(time.monotonic() - started, 1),
        "rates": rates,
        "cpu_per_job": cpus,
        "medians": medians,
        "cpu_medians": cpu_medians,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"\n{args.jobs} jobs per drain, c=64, handlers sleep 1 ms; median of {args.runs} "
        f"runs; redis-server {version}; load {load_start} -> {load_end} "
        f"({os.cpu_count()} CPUs); {doc['seconds']} s"
    )
    paired = {
        v: statistics.median(r / n for r, n in zip(rates[v], rates["none"], strict=True))
        for v in VARIANTS
    }
    doc["paired_ratios"] = paired
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"{'metrics':<12} {'jobs/s':>10} {'vs none':>8} {'paired':>7} "
        f"{'CPU us/job':>11} {'+us/job':>8}"
    )
    for v in VARIANTS:
        ratio = medians[v] / medians["none"]
        extra = (cpu_medians[v] - cpu_medians["none"]) * 1e6
        print(
            f"{v:<12} {medians[v]:>10,.0f} {ratio:>7.2f}x {paired[v]:>6.2f}x "
            f"{cpu_medians[v] * 1e6:>11.1f} {extra:>+8.1f}"
        )
    worst = min(medians["prometheus"] / medians["none"], paired["prometheus"])
    print(f"prometheus within 10% of none: {'yes' if worst >= 0.9 else 'NO'} ({worst:.3f}x)")


if __name__ == "__main__":
    main()
