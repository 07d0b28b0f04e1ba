"""``python -m benchmarks.peers PEER WORKLOAD [options]``: one run, one JSON line.

Run with the peer's own interpreter (``benchmarks/.venv/PEER/bin/python``).
Workloads: ``callers`` (one round of ``benchmarks.enqueue_callers`` with
the peer's ``PEER_CALLERS[--caller]``), ``drain`` (``--kind incr``: handlers
make one Redis round trip; ``--hold S``: they sleep S seconds), ``enqueue``,
``lateness``, ``startup``, ``memory`` (only enqueues: the orchestrator reads
Redis's memory around it) and (arq, SAQ) ``roundtrip`` (the same method as chronos_trio's, see
``benchmarks.chronos_bench``). A peer module's ``BACKEND`` is ``asyncio``,
``trio`` or ``threads``; a thread peer's ``Producer`` is synchronous and its
concurrent producers are threads.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import _common as common
from benchmarks._proc import WorkerGroup

BULK_BATCH = 1000
#: Concurrent one-at-a-time producers (tasks, or threads for a thread peer).
PRODUCERS = 32


def load(peer: str) -> Any:
    return importlib.import_module(f"benchmarks.peers.{peer}_bench")


async def _spawn(backend: str, producers: int, body: Callable[[], Awaitable[None]]) -> None:
    if backend == "trio":
        import trio

        async with trio.open_nursery() as nursery:
            for _ in range(producers):
                nursery.start_soon(body)
    else:
        await asyncio.gather(*(body() for _ in range(producers)))


async def produce(
    mod: Any, url: str, items: list[tuple[float, float]], how: str, kind: str, hold: float
) -> float:
    """Enqueue ``items`` ((sent_at, due_at); sent_at None = now) of task
    ``kind`` (handlers sleep ``hold`` s) ``how``: ``single``, ``concurrent``
    (:data:`PRODUCERS` producers) or ``bulk``; returns seconds."""
    producer = mod.Producer()
    await producer.open(url)
    try:
        # connect, load scripts; counts as a warm-up job (of the same kind)
        await producer.enqueue(0.0, kind=kind, hold=hold)
        t = time.perf_counter()
        if how == "bulk":
            for i in range(0, len(items), BULK_BATCH):
                await producer.enqueue_bulk(items[i : i + BULK_BATCH], kind=kind, hold=hold)
        elif how == "single":
            for sent_at, due_at in items:
                await producer.enqueue(sent_at or time.time(), due_at, kind=kind, hold=hold)
        else:
            it = iter(items)

            async def body() -> None:
                for sent_at, due_at in it:
                    await producer.enqueue(sent_at or time.time(), due_at, kind=kind, hold=hold)

            await _spawn(mod.BACKEND, PRODUCERS, body)
        return time.perf_counter() - t
    finally:
        await producer.close()


def produce_threads(
    mod: Any, url: str, items: list[tuple[float, float]], how: str, kind: str, hold: float
) -> float:
    """:func:`produce` for a thread peer: its synchronous enqueue calls, and
    threads for the concurrent producers (no bulk API among them)."""
    producer = mod.Producer()
    producer.open(url)
    try:
        producer.enqueue(0.0, kind=kind, hold=hold)
        t = time.perf_counter()
        if how == "single":
            for sent_at, due_at in items:
                producer.enqueue(sent_at or time.time(), due_at, kind=kind, hold=hold)
        else:
            it, lock = iter(items), threading.Lock()

            def body() -> None:
                while True:
                    with lock:
                        item = next(it, None)
                    if item is None:
                        return
                    producer.enqueue(item[0] or time.time(), item[1], kind=kind, hold=hold)

            with ThreadPoolExecutor(PRODUCERS) as pool:
                for future in [pool.submit(body) for _ in range(PRODUCERS)]:
                    future.result()  # a producer's exception, raised here
        return time.perf_counter() - t
    finally:
        producer.close()


def enqueue_items(
    mod: Any,
    url: str,
    items: list[tuple[float, float]],
    how: str,
    *,
    kind: str = "noop",
    hold: float = 0.0,
) -> float:
    """Enqueue ``items`` plus one warm-up job (see :func:`produce`); seconds."""
    if mod.BACKEND == "threads":
        return produce_threads(mod, url, items, how, kind, hold)
    took: float = mod.run(produce, mod, url, items, how, kind, hold)
    return took


def _fastest_preload(mod: Any) -> str:
    return "bulk" if mod.Producer.bulk else "concurrent"


class Workers:
    def __init__(self, mod: Any, url: str, out: Path, **options: Any) -> None:
        self.mod, self.url, self.out = mod, url, out
        self.options = options  # worker settings the peer module reads (env_options)
        self.bin = str(Path(sys.executable).parent)
        self.groups: list[WorkerGroup] = []

    def env(self, concurrency: int) -> dict[str, str]:
        return {
            common.ENV_URL: self.url,
            common.ENV_DIR: str(self.out),
            common.ENV_CONCURRENCY: str(concurrency),
            common.ENV_OPTIONS: json.dumps(self.options),
        }

    def start(self, concurrency: int, processes: int) -> None:
        for argv in self.mod.worker_commands(self.bin, concurrency, processes):
            self.groups.append(WorkerGroup(argv, self.env(concurrency), self.out / "worker.log"))

    def start_argv(self, argv: list[str]) -> None:
        self.groups.append(WorkerGroup(argv, self.env(1), self.out / "worker.log"))

    def wait(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while common.total_count(self.out) < n:
            if time.monotonic() > deadline:
                return False
            if any(not g.alive() for g in self.groups):
                raise RuntimeError(f"a worker exited: {self.log_tail()}")
            time.sleep(0.02)
        return True

    def log_tail(self) -> str:
        path = self.out / "worker.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def stop(self) -> None:
        for g in self.groups:
            g.stop()


def drain(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    n = args.n
    items = [(0.0, 0.0)] * (n - 1)
    enqueue_items(mod, args.url, items, _fastest_preload(mod), kind=args.kind, hold=args.hold)
    workers = Workers(mod, args.url, out)
    try:
        workers.start(args.concurrency, args.processes)
        ok = workers.wait(n, args.timeout)
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    span = rec["last"] - rec["first"]
    return {
        "jobs_per_s": (rec["count"] - 1) / span if span > 0 else math.nan,
        "completed": rec["count"],
        "expected": n,
        "ok": ok,
    }


def enqueue(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"ok": True}
    n_single, n_conc, n_bulk = args.n_single, args.n, args.n
    result["single_per_s"] = n_single / enqueue_items(
        mod, args.url, [(0.0, 0.0)] * n_single, "single"
    )
    result["concurrent_per_s"] = n_conc / enqueue_items(
        mod, args.url, [(0.0, 0.0)] * n_conc, "concurrent"
    )
    if mod.Producer.bulk:
        result["bulk_per_s"] = n_bulk / enqueue_items(mod, args.url, [(0.0, 0.0)] * n_bulk, "bulk")
    else:
        result["bulk_per_s"] = None  # not supported: reported as such
    return result


def lateness(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    n = args.n
    workers = Workers(mod, args.url, out)
    try:
        workers.start(args.concurrency, 1)
        if hasattr(mod, "scheduler_command"):
            workers.start_argv(mod.scheduler_command(workers.bin))
        enqueue_items(mod, args.url, [], "single")  # the warm-up job
        if not workers.wait(1, 60):
            raise RuntimeError(f"warm-up job did not run: {workers.log_tail()}")
        time.sleep(1.0)
        t0 = time.time() + args.delay
        items = [(0.0, t0 + (i * args.spread / n if args.spread else 0.0)) for i in range(n)]
        enqueue_items(mod, args.url, items, _fastest_preload(mod))
        ok = workers.wait(n + 2, args.delay + args.spread + args.timeout)
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    return {**common.latency_summary(rec["late"]), "ok": ok and len(rec["late"]) >= n}


def startup(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Seconds from spawning the peer's worker command (one process, at
    ``--concurrency``) to its first handler start, with one job already
    waiting in the queue: interpreter start, imports, connecting, the
    first fetch."""
    enqueue_items(mod, args.url, [], "single")  # the one waiting job
    workers = Workers(mod, args.url, out)
    try:
        spawned = time.time()
        workers.start(args.concurrency, 1)
        ok = workers.wait(1, args.timeout)
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    return {"startup_s": rec["first"] - spawned if rec["count"] else math.nan, "ok": ok}


async def round_trips(
    mod: Any, url: str, rate: float, n: int, poll: float | None, timeout: float
) -> list[float]:
    """``n`` round trips (enqueue, then the peer's own wait for the result)
    started at ``rate`` per second, each in its own task; seconds each.
    First (not counted) round trips until one succeeds: the worker is up."""
    producer = mod.Producer()
    await producer.open(url)
    took: list[float] = []

    async def one(limit: float) -> None:
        t = time.perf_counter()
        value = await producer.round_trip(time.time(), poll, limit)
        took.append(time.perf_counter() - t)
        if not (isinstance(value, dict) and "ran_at" in value):
            raise RuntimeError(f"unexpected result {value!r}")

    try:
        for attempt in range(1, 7):
            try:
                await one(10.0)
                break
            except Exception:
                # SAQ's sweep at worker start-up aborts ("swept") a job it
                # catches between dequeue and start: try again.
                if attempt == 6:
                    raise
        took.clear()
        await asyncio.sleep(0.5)
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for i in range(n):
            await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
            tasks.append(asyncio.create_task(one(timeout)))
        await asyncio.gather(*tasks)
    finally:
        await producer.close()
    return took


def roundtrip(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Enqueue a job whose handler returns a small result, then wait for it
    the peer's way (arq ``job.result()``, SAQ ``Queue.apply``); ``--poll``:
    the peer's polling intervals in seconds (default: its own)."""
    options = {} if args.poll is None else {"poll_delay": args.poll}
    workers = Workers(mod, args.url, out, **options)
    try:
        workers.start(args.concurrency, 1)
        took = mod.run(round_trips, mod, args.url, args.rate, args.n, args.poll, args.timeout)
    finally:
        workers.stop()
    return {**common.latency_summary(took), "ok": len(took) >= args.n}


def memory(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """``--n`` jobs due ``--delay`` s from now, each with one argument, the
    100-character str ``common.MEMORY_DATA`` (the peer's ``enqueue_data``);
    no worker runs. In batches of 1,000 where the peer has a bulk enqueue,
    else by :data:`PRODUCERS` concurrent producers; enqueueing stops after
    ``--timeout`` s, and the jobs done by then are the ones counted."""
    deadline = time.monotonic() + args.timeout
    if mod.BACKEND == "threads":
        done, took = _memory_threads(mod, args.url, args.n, args.delay, deadline)
    else:
        done, took = mod.run(_memory_async, mod, args.url, args.n, args.delay, deadline)
    how = f"bulk of {BULK_BATCH:,}" if mod.Producer.bulk else f"{PRODUCERS} producers"
    return {
        "enqueued": done,
        "expected": args.n,
        "enqueue_s": took,
        "enqueue_per_s": done / took if took > 0 else math.nan,
        "how": how,
        "ok": done >= args.n,
    }


async def _memory_async(
    mod: Any, url: str, n: int, delay: float, deadline: float
) -> tuple[int, float]:
    producer = mod.Producer()
    await producer.open(url)
    counts = {"started": 0, "done": 0}
    try:
        t = time.perf_counter()
        if mod.Producer.bulk:
            while counts["done"] < n and time.monotonic() < deadline:
                batch = min(BULK_BATCH, n - counts["done"])
                await producer.enqueue_data_bulk([common.MEMORY_DATA] * batch, delay)
                counts["done"] += batch
        else:

            async def body() -> None:
                while counts["started"] < n and time.monotonic() < deadline:
                    counts["started"] += 1
                    await producer.enqueue_data(common.MEMORY_DATA, delay)
                    counts["done"] += 1

            await _spawn(mod.BACKEND, PRODUCERS, body)
        return counts["done"], time.perf_counter() - t
    finally:
        await producer.close()


def _memory_threads(mod: Any, url: str, n: int, delay: float, deadline: float) -> tuple[int, float]:
    producer = mod.Producer()
    producer.open(url)
    lock = threading.Lock()
    counts = {"started": 0, "done": 0}

    def body() -> None:
        while True:
            with lock:
                if counts["started"] >= n or time.monotonic() >= deadline:
                    return
                counts["started"] += 1
            producer.enqueue_data(common.MEMORY_DATA, delay)
            with lock:
                counts["done"] += 1

    try:
        t = time.perf_counter()
        with ThreadPoolExecutor(PRODUCERS) as pool:
            for future in [pool.submit(body) for _ in range(PRODUCERS)]:
                future.result()
        return counts["done"], time.perf_counter() - t
    finally:
        producer.close()


def callers(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One round of the caller benchmark (``benchmarks.enqueue_callers``):
    the peer's own caller in class ``--caller`` (its ``PEER_CALLERS``),
    ``--n-single`` single calls then ``--n`` jobs in batches of ``--batch``
    where it has a batch call (``benchmarks._common.run_caller``). Raises
    KeyError for a caller class the peer has no caller in."""
    caller = mod.PEER_CALLERS[args.caller]
    return {
        **common.run_caller(
            caller, args.caller, args.url, args.n_single, args.n, args.batch, args.warmup
        ),
        "ok": True,
    }


def versions(mod: Any) -> dict[str, str]:
    out = {}
    for name in mod.PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "?"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    parser.add_argument("peer")
    workloads = ("callers", "drain", "enqueue", "lateness", "memory", "roundtrip", "startup")
    parser.add_argument("workload", choices=(*workloads, "versions"))
    parser.add_argument("--url", default="")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--n-single", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--poll", type=float, default=None)
    parser.add_argument("--kind", choices=("noop", "incr"), default="noop")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--caller", choices=common.CALLER_CLASSES, default="sync")
    parser.add_argument("--batch", type=int, default=common.CALLER_BATCH)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    # Peer modules build their clients at import: give them a URL even for
    # "versions" (nothing connects then).
    os.environ[common.ENV_URL] = args.url or "redis://127.0.0.1:1/0"
    mod = load(args.peer)
    if args.workload == "versions":
        print(json.dumps(versions(mod)))
        return
    fn = {
        "callers": callers,
        "drain": drain,
        "enqueue": enqueue,
        "lateness": lateness,
        "memory": memory,
        "roundtrip": roundtrip,
        "startup": startup,
    }[args.workload]
    with tempfile.TemporaryDirectory(prefix=f"bench-{args.peer}-") as tmp:
        result = fn(mod, args, Path(tmp))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
