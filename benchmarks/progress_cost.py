"""Progress cost (issue 28): what ``await job.progress(...)`` costs at 1,000
updates a second per job, beside the same jobs without it, in one run.

Each job runs ``--seconds`` and paces itself to ``--rate`` steps a second
(it sleeps until each step's time). At each step it either reports its
progress (``await job.progress(i / n, "step i of n")``, variant
``progress``; ``progress+log`` also logs a line every 100 steps) or only
passes a checkpoint (variant ``none``, the baseline: the same loop and
sleeps). ``--jobs`` jobs run at once on one embedded worker with the
default ``notes_interval`` (0.5 s), on the memory store and on a private
redis-server. Shown per variant: this process's CPU time per job-second
(Python and hiredis), the extra CPU per progress update over the baseline,
the ``write_notes`` calls the worker made (one batch for every job per
interval, plus each job's final flush), and on Redis the server's CPU per
job-second (``INFO cpu``)::

    python -m benchmarks.progress_cost [--jobs 8] [--seconds 3] [--rate 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import trio

from chronos_trio import App, JobContext, MemoryStore
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import FaultyStore

from ._redis import BenchRedis, open_redis

VARIANTS = ("none", "progress", "progress+log")


def _server_cpu(redis: BenchRedis | None) -> float:
    if redis is None:
        return 0.0
    info = redis.client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def run_once(
    make_store: Callable[[], Any],
    redis: BenchRedis | None,
    variant: str,
    jobs: int,
    seconds: float,
    rate: int,
) -> dict[str, float]:
    """One run of ``jobs`` jobs of ``variant``: CPU seconds (this process,
    and the server), ``write_notes`` calls, progress updates made."""
    store = FaultyStore(make_store())  # counts the store calls (faults never injected)
    app = App(store)
    steps = int(seconds * rate)
    report = variant != "none"
    log_lines = variant == "progress+log"
    finished = 0
    all_done = trio.Event()

    @app.task("paced")
    async def paced(payload: int, job: JobContext) -> None:
        nonlocal finished
        start = trio.current_time()
        for i in range(steps):
            if report:
                await job.progress(i / steps, f"step {i} of {steps}")
                if log_lines and i % 100 == 0:
                    job.log(f"passed step {i}")
            else:
                await trio.lowlevel.checkpoint()
            await trio.sleep_until(start + (i + 1) / rate)
        finished += 1
        if finished == jobs:
            all_done.set()

    await paced.enqueue_many(list(range(jobs)))
    server0 = _server_cpu(redis)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with app.open_worker(concurrency=jobs, poll_interval=0.05):
        with trio.fail_after(seconds * 10 + 60):
            await all_done.wait()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    server = _server_cpu(redis) - server0
    await store.aclose()
    return {
        "cpu": cpu,
        "server": server,
        "wall": wall,
        "writes": float(store.calls["write_notes"]),
        "updates": float(jobs * steps if report else 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backends", default="memory,redis")
    args = parser.parse_args()
    job_seconds = args.jobs * args.seconds
    rows = []
    with open_redis() as redis:
        backends: dict[str, tuple[Callable[[], Any], BenchRedis | None]] = {
            "memory": (MemoryStore, None),
            "redis": (lambda: RedisStore.from_url(redis.url), redis),
        }
        for name in args.backends.split(","):
            make, server = backends[name]
            got: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
            for i in range(args.runs):
                order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]  # drift lands on each alike
                for variant in order:
                    if server is not None:
                        server.flush()
                    one = trio.run(
                        run_once, make, server, variant, args.jobs, args.seconds, args.rate
                    )
                    got[variant].append(one)
            base = statistics.median(r["cpu"] for r in got["none"]) / job_seconds
            base_server = statistics.median(r["server"] for r in got["none"]) / job_seconds
            for variant in VARIANTS:
                runs = got[variant]
                cpu = statistics.median(r["cpu"] for r in runs) / job_seconds
                server_cpu = statistics.median(r["server"] for r in runs) / job_seconds
                updates = runs[0]["updates"]
                per_update = (cpu - base) * job_seconds / updates * 1e6 if updates else float("nan")
                writes = statistics.median(r["writes"] for r in runs)
                rows.append(
                    (name, variant, cpu * 1e3, per_update, writes, server_cpu * 1e3, base_server)
                )
    print(
        f"\n{args.jobs} jobs at once, {args.seconds:g} s each, {args.rate} steps/s per job "
        f"(so {args.jobs * args.rate:,} progress updates/s), notes_interval 0.5 s; "
        f"median of {args.runs} runs; {os.cpu_count()} CPUs"
    )
    print(
        f"{'store':<7} {'variant':<13} {'CPU ms/job-s':>12} {'+us/update':>11} "
        f"{'write_notes':>11} {'server ms/job-s':>15}"
    )
    for name, variant, cpu_ms, per_update, writes, server_ms, _ in rows:
        shown = "-" if per_update != per_update else f"{per_update:.2f}"
        server_shown = f"{server_ms:.2f}" if name == "redis" else "-"
        print(
            f"{name:<7} {variant:<13} {cpu_ms:>12.1f} {shown:>11} {writes:>11.0f} "
            f"{server_shown:>15}"
        )


if __name__ == "__main__":
    main()
