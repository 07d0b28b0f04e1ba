"""chronos_trio's side of each workload (Trio; run in the orchestrating process).

Every function here is one run of one workload and returns a flat dict of
figures; the orchestrator repeats it (FLUSHDB in between) and takes medians.
Workers run in their own processes (``benchmarks.chronos_worker``, or the
``python -m chronos_trio worker --processes N`` manager when it exists) and
report through the recorder files described in ``benchmarks._common``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from benchmarks import _common as common
from benchmarks import _memory
from benchmarks._plain import plain_python
from benchmarks._proc import REPO, WorkerGroup
from benchmarks._redis import BenchRedis, own_ports
from benchmarks.chronos_app import (
    BLOB_KIND,
    INCR_KIND,
    MIXED_KINDS,
    Bench,
    Blob,
    Done,
    make_app,
    result_task,
)
from chronos_trio import JobState, MemoryStore, NewJob
from chronos_trio.store import QueueWeight, SettleKind, Settlement

#: Jobs per ``enqueue_many`` call when pre-loading queues and in "bulk" enqueue.
BULK_BATCH = 1000


# -- worker processes ---------------------------------------------------------------------


def cli_available() -> bool:
    """Whether ``python -m chronos_trio worker`` (the process manager) exists."""
    probe = subprocess.run(
        [sys.executable, "-m", "chronos_trio", "worker", "--help"],
        capture_output=True,
        cwd=str(REPO),
        timeout=60,
        check=False,
    )
    return probe.returncode == 0 and b"--processes" in probe.stdout


def worker_argv(
    concurrency: int, processes: int, *, cli: bool = False, python: str | None = None
) -> list[str]:
    """The worker command: ``benchmarks.chronos_worker`` for one process, the
    ``python -m chronos_trio worker`` CLI for several (or with ``cli``), run
    by ``python`` (this interpreter unless given)."""
    python = python or sys.executable
    if processes > 1 or cli:
        return [
            python, "-m", "chronos_trio", "worker", "benchmarks.chronos_app:app",
            "--processes", str(processes), "--concurrency", str(concurrency),
        ]  # fmt: skip
    return [python, "-m", "benchmarks.chronos_worker"]


class Workers:
    """Worker processes recording into ``out_dir``."""

    def __init__(self, url: str, out_dir: Path) -> None:
        self.url = url
        self.out_dir = out_dir
        self.groups: list[WorkerGroup] = []

    def start(
        self,
        concurrency: int,
        processes: int = 1,
        *,
        cli: bool = False,
        python: str | None = None,
        **options: Any,
    ) -> WorkerGroup:
        env = {
            common.ENV_URL: self.url,
            common.ENV_DIR: str(self.out_dir),
            common.ENV_CONCURRENCY: str(concurrency),
            common.ENV_OPTIONS: json.dumps(options),
        }
        argv = worker_argv(concurrency, processes, cli=cli, python=python)
        if processes > 1 and not cli_available():
            # No process manager yet: start the processes ourselves.
            groups = [
                WorkerGroup(worker_argv(concurrency, 1), env, self.out_dir / "worker.log")
                for _ in range(processes)
            ]
            self.groups += groups
            return groups[0]
        group = WorkerGroup(argv, env, self.out_dir / "worker.log")
        self.groups.append(group)
        return group

    def count(self) -> int:
        return common.total_count(self.out_dir)

    async def wait_total(self, n: int, timeout: float) -> bool:
        deadline = trio.current_time() + timeout
        while self.count() < n:
            if trio.current_time() > deadline:
                return False
            for g in self.groups:
                if not g.alive() and g.proc.returncode not in (None, -9):
                    raise RuntimeError(f"worker exited with {g.proc.returncode}: see {g.argv}")
            await trio.sleep(0.02)
        return True

    async def wait_processes(self, n: int, timeout: float = 30) -> None:
        """Until ``n`` worker processes have imported the app."""
        deadline = trio.current_time() + timeout
        while len(common.read_progress(self.out_dir)) < n:
            if trio.current_time() > deadline:
                raise RuntimeError("worker processes did not start in time")
            await trio.sleep(0.05)

    def collect(self) -> dict[str, Any]:
        return common.merge(common.collect(self.out_dir))

    def stop(self) -> None:
        for g in self.groups:
            g.stop()


@asynccontextmanager
async def open_workers(url: str) -> AsyncIterator[Workers]:
    with tempfile.TemporaryDirectory(prefix="chronos-bench-") as tmp:
        workers = Workers(url, Path(tmp))
        try:
            yield workers
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(workers.stop)


async def warm_up(app_task: Any, workers: Workers, timeout: float = 30) -> None:
    """One job through the worker, so it is surely running (not in samples)."""
    before = workers.count()
    await app_task.enqueue(Bench(sent_at=0.0))
    if not await workers.wait_total(before + 1, timeout):
        raise RuntimeError("warm-up job did not run")


async def preload(app_task: Any, n: int, **fields: float) -> list[Any]:
    """``n`` jobs of ``app_task`` in batches of :data:`BULK_BATCH`; the last
    batch's handles."""
    handles: list[Any] = []
    for start in range(0, n, BULK_BATCH):
        count = min(BULK_BATCH, n - start)
        handles = await app_task.enqueue_many([Bench(sent_at=0.0, **fields) for _ in range(count)])
    return handles


# -- 1. store lifecycle --------------------------------------------------------------------


async def lifecycle(url: str | None, n: int, batch: int) -> dict[str, Any]:
    """enqueue -> promote -> lease -> renew -> complete, ``batch`` jobs per call,
    against the store directly; microseconds per job, per stage and in all.

    Jobs are enqueued 2 ms in the future so promote really moves them; the
    10 ms wait for them to come due is not timed."""
    store: Any = MemoryStore() if url is None else make_app(url)[0].store
    queues = [QueueWeight("default")]
    stages = dict.fromkeys(("enqueue", "promote", "lease", "renew", "complete"), 0.0)
    done = 0
    payload = b"x" * 100
    try:
        while done < n:
            size = min(batch, n - done)
            jobs = [
                NewJob(id=f"lc-{done + i}", queue="default", kind="bench.noop",
                       payload=payload, delay=0.002)
                for i in range(size)
            ]  # fmt: skip
            t = time.perf_counter()
            await store.enqueue_many(jobs)
            stages["enqueue"] += time.perf_counter() - t
            # Untimed: let every partition's jobs come due (each partition's
            # script reads Redis TIME when it runs, so the last one is later).
            await trio.sleep(0.01)
            promoted = 0
            give_up = trio.current_time() + 1.0
            # A job the store already judged due at enqueue went straight to
            # ready; promote finds fewer then, so this loop is bounded.
            while promoted < size and trio.current_time() < give_up:
                t = time.perf_counter()
                result = await store.promote_due(["default"], 4096)
                stages["promote"] += time.perf_counter() - t
                promoted += result.promoted
                if promoted < size:
                    await trio.sleep(0.001)
            t = time.perf_counter()
            leased = (await store.lease(queues, size, worker_id="bench", lease_duration=30)).jobs
            stages["lease"] += time.perf_counter() - t
            if len(leased) != size:
                raise RuntimeError(f"leased {len(leased)} of {size}")
            refs = [lj.ref for lj in leased]
            t = time.perf_counter()
            held = await store.renew(refs, 30)
            stages["renew"] += time.perf_counter() - t
            t = time.perf_counter()
            applied = await store.settle([Settlement(r, SettleKind.SUCCEEDED) for r in refs])
            stages["complete"] += time.perf_counter() - t
            if not (all(held.renewed) and all(applied.settled)):
                raise RuntimeError("a lease was lost in the lifecycle benchmark")
            done += size
    finally:
        await store.aclose()
    out: dict[str, Any] = {f"{k}_us": v / n * 1e6 for k, v in stages.items()}
    out["cycle_us"] = sum(stages.values()) / n * 1e6
    out["jobs_per_s"] = 1e6 / out["cycle_us"]
    out["completed"] = done
    return out


# -- 2. drain ---------------------------------------------------------------------------


async def drain(
    url: str,
    n: int,
    concurrency: int,
    processes: int,
    timeout: float,
    *,
    results: bool = False,
    cpu_of: bool = False,
    cpu_servers: Sequence[str] | None = None,
    incr: bool = False,
    hold: float = 0.0,
    **options: Any,
) -> dict[str, Any]:
    """``n`` jobs enqueued first, then the worker(s) start; jobs/s from the
    first job's start to the last one's. ``results``: the jobs are of the
    task that returns a small attrs result (stored by the worker); a few of
    the last jobs' results are read back to check they were. ``incr``: the
    jobs are of the task that makes one Redis round trip (``INCR``, then
    recorded), and the counter must show every one of them. ``hold``: each
    handler sleeps that long (``trio.sleep``; the I/O-bound workload). With
    ``cpu_of`` (one worker process), also the CPU time per job of that
    worker and of redis-server while it drained (:class:`CpuMeter`; of
    every server in ``cpu_servers`` when given, e.g. a Cluster's masters)."""
    app, task = make_app(url)
    kind = result_task(app) if results else app.tasks[INCR_KIND] if incr else task
    handles = await preload(kind, n, hold=hold)
    cpu: dict[str, Any] = {}
    async with open_workers(url) as workers:
        spawned = time.time()
        group = workers.start(concurrency, processes, **options)
        if cpu_of:
            meter = await CpuMeter.once_started(url, group.pid, workers, cpu_servers)
        ok = await workers.wait_total(n, timeout)
        if cpu_of:
            cpu = meter.per_job(workers.count())
        rec = workers.collect()
    # A job that returned None is not kept once done (nothing to read): only
    # the stored results can be read back.
    for handle in handles[-10:] if results else ():
        value = await handle.result(timeout=10)
        if not isinstance(value, Done):
            raise RuntimeError(f"job {handle.job_id} returned {value!r}")
    await app.aclose()
    extra: dict[str, Any] = {"wall_s": rec["last"] - spawned, **cpu}
    if incr:
        extra["incr_count"] = incr_count(url)
        ok = ok and extra["incr_count"] >= rec["count"]
    return _throughput(rec, n, ok, extra=extra)


def incr_count(url: str) -> int:
    """What the ``INCR`` handlers counted (``common.INCR_KEY``)."""
    redis = BenchRedis(url)
    try:
        return redis.counter(common.INCR_KEY)
    finally:
        redis.client.close()


class CpuMeter:
    """CPU time (user + system) of one worker process (``/proc/PID/stat``,
    clock ticks) and of redis-server (``INFO cpu``) from once the worker
    started its first job (its start-up is not counted) until :meth:`per_job`."""

    def __init__(self, url: str, pid: int, jobs: int, servers: Sequence[str] | None = None) -> None:
        #: Every server whose CPU counts: ``url``'s, or ``servers`` (plain
        #: ``redis://`` URLs, e.g. each master of a Cluster).
        self._servers = [BenchRedis(u) for u in (servers or [url])]
        self._pid = pid
        self._jobs = jobs
        self._worker = self._worker_cpu()
        self._server = self._server_cpu()

    @classmethod
    async def once_started(
        cls, url: str, pid: int, workers: Workers, servers: Sequence[str] | None = None
    ) -> CpuMeter:
        await workers.wait_total(1, 60)
        return cls(url, pid, workers.count(), servers)

    def _worker_cpu(self) -> float:
        # utime and stime are fields 14 and 15; the name (2) may hold spaces
        fields = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _server_cpu(self) -> float:
        total = 0.0
        for server in self._servers:
            info = server.client.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return total

    def per_job(self, jobs: int) -> dict[str, float]:
        """Microseconds of CPU per job started since the meter started (the
        servers' summed)."""
        done = max(1, jobs - self._jobs)
        worker, server = self._worker_cpu() - self._worker, self._server_cpu() - self._server
        for s in self._servers:
            s.client.close()
        return {"worker_cpu_us": worker / done * 1e6, "redis_cpu_us": server / done * 1e6}


# -- 2b. drain on a Redis Cluster, against one node ---------------------------------------


async def cluster_drain(
    single_url: str,
    cluster_url: str,
    cluster_nodes: Sequence[str],
    flush_cluster: Callable[[], None],
    n: int,
    concurrency: int,
    processes: int,
    timeout: float,
    cluster_first: int,
) -> dict[str, Any]:
    """The same drain (``n`` no-op jobs, one worker process at
    ``concurrency``, or ``processes`` under the CLI's process manager) on
    one node (``single_url``) and on a Cluster (``cluster_url``, whose
    masters' plain URLs are ``cluster_nodes``), back to back in one run
    (``cluster_first``: the Cluster goes first); jobs/s of each, their
    ratio, and CPU per job of the worker process and of Redis (the masters'
    summed). Each drain starts on an empty store (FLUSHDB / FLUSHALL)."""
    rows: dict[bool, dict[str, Any]] = {}
    for on_cluster in (True, False) if cluster_first else (False, True):
        if on_cluster:
            flush_cluster()
            rows[True] = await drain(
                cluster_url, n, concurrency, processes, timeout,
                cpu_of=processes == 1, cpu_servers=cluster_nodes,
            )  # fmt: skip
        else:
            flush_db(single_url)
            rows[False] = await drain(
                single_url, n, concurrency, processes, timeout, cpu_of=processes == 1
            )
    single, cluster = rows[False], rows[True]
    out = {
        "single_per_s": single["jobs_per_s"],
        "cluster_per_s": cluster["jobs_per_s"],
        "ratio": cluster["jobs_per_s"] / single["jobs_per_s"],
        "ok": single["ok"] and cluster["ok"],
        "loadavg1": os.getloadavg()[0],
    }
    for key in ("worker_cpu_us", "redis_cpu_us"):
        if key in single:
            out[f"single_{key}"], out[f"cluster_{key}"] = single[key], cluster[key]
    return out


def _throughput(
    rec: dict[str, Any], n: int, ok: bool, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    span = rec["last"] - rec["first"]
    return {
        "jobs_per_s": (rec["count"] - 1) / span if span > 0 else math.nan,
        "completed": rec["count"],
        "expected": n,
        "ok": ok and rec["count"] >= n,
        **(extra or {}),
    }


# -- 3. saturation --------------------------------------------------------------------------


async def saturation(
    url: str, n: int, producers: int, concurrency: int, timeout: float
) -> dict[str, Any]:
    """``producers`` tasks enqueue ``n`` jobs one at a time (awaited) while one
    worker consumes; jobs/s from the first enqueue to the last start, and
    enqueue->start latency."""
    app, task = make_app(url)
    async with open_workers(url) as workers:
        workers.start(concurrency)
        await warm_up(task, workers)
        per = n // producers

        async def produce() -> None:
            for _ in range(per):
                await task.enqueue(Bench(sent_at=time.time()))

        t0 = time.time()
        async with trio.open_nursery() as nursery:
            for _ in range(producers):
                nursery.start_soon(produce)
        enqueued = time.time()
        ok = await workers.wait_total(per * producers + 1, timeout)
        rec = workers.collect()
    await app.aclose()
    span = rec["last"] - t0
    return {
        "jobs_per_s": len(rec["pickup"]) / span if span > 0 else math.nan,
        "enqueue_per_s": per * producers / (enqueued - t0),
        **common.latency_summary(rec["pickup"]),
        "completed": len(rec["pickup"]),
        "ok": ok,
    }


# -- 4. enqueue -----------------------------------------------------------------------------


async def enqueue(
    url: str, n_single: int, n_concurrent: int, producers: int, n_bulk: int
) -> dict[str, Any]:
    """No worker: one-at-a-time awaited, ``producers`` concurrent one-at-a-time
    producers, and bulk (``enqueue_many`` of 1,000)."""
    app, task = make_app(url)
    await task.enqueue(Bench(sent_at=0.0))  # connect, load scripts
    t = time.perf_counter()
    for _ in range(n_single):
        await task.enqueue(Bench(sent_at=time.time()))
    single = n_single / (time.perf_counter() - t)

    per = n_concurrent // producers

    async def produce() -> None:
        for _ in range(per):
            await task.enqueue(Bench(sent_at=time.time()))

    t = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(producers):
            nursery.start_soon(produce)
    concurrent = per * producers / (time.perf_counter() - t)

    t = time.perf_counter()
    await preload(task, n_bulk)
    bulk = n_bulk / (time.perf_counter() - t)
    await app.aclose()
    return {"single_per_s": single, "concurrent_per_s": concurrent, "bulk_per_s": bulk, "ok": True}


# -- 4b. enqueue with a replica, with and without WAIT --------------------------------------


async def replicated_enqueue(
    url: str, n_single: int, n_bulk: int, flush: Callable[[], None], chunks: int = 10
) -> dict[str, Any]:
    """The cost of ``wait_replicas=1`` against a master with one replica at
    ``url``: one-at-a-time awaited enqueues and bulk (``enqueue_many`` of
    1,000), with and without WAIT, in ``chunks`` alternating slices of each
    (which variant goes first alternates too), so load that drifts during
    the run falls on both alike. Rates come from the total time, latencies
    are the median call (one job, or one batch of 1,000); the cost of WAIT
    is the difference of the medians."""
    flush()
    plain_app, plain = make_app(url)
    wait_app, waiting = make_app(url + "?wait_replicas=1&wait_timeout=1")
    for task in (plain, waiting):
        await task.enqueue(Bench(sent_at=0.0))  # connect, load scripts
    calls: dict[str, dict[str, list[float]]] = {
        mode: {"plain": [], "wait": []} for mode in ("single", "bulk")
    }
    per_single, per_bulk = n_single // chunks, max(1, n_bulk // chunks // BULK_BATCH)

    for chunk in range(chunks):
        order = [("plain", plain), ("wait", waiting)]
        for name, task in order if chunk % 2 == 0 else order[::-1]:
            for _ in range(per_single):
                t = time.perf_counter()
                await task.enqueue(Bench(sent_at=time.time()))
                calls["single"][name].append(time.perf_counter() - t)
            for _ in range(per_bulk):
                payloads = [Bench(sent_at=time.time()) for _ in range(BULK_BATCH)]
                t = time.perf_counter()
                await task.enqueue_many(payloads)
                calls["bulk"][name].append(time.perf_counter() - t)
    await plain_app.aclose()
    await wait_app.aclose()

    row: dict[str, Any] = {"ok": True}
    for mode, jobs_per_call in (("single", 1), ("bulk", BULK_BATCH)):
        for name in ("plain", "wait"):
            took = calls[mode][name]
            suffix = "" if name == "plain" else "_wait"
            row[f"{mode}{suffix}_per_s"] = len(took) * jobs_per_call / sum(took)
            row[f"{mode}{suffix}_p50_us"] = statistics.median(took) * 1e6
        row[f"{mode}_wait_cost_us"] = row[f"{mode}_wait_p50_us"] - row[f"{mode}_p50_us"]
    return row


# -- 5. pickup latency --------------------------------------------------------------------


async def pickup(url: str, rate: float, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    """Immediate jobs one at a time at ``rate`` per second into an idle worker."""
    app, task = make_app(url)
    async with open_workers(url) as workers:
        workers.start(concurrency)
        await warm_up(task, workers)
        await trio.sleep(0.5)
        start = trio.current_time()
        for i in range(n):
            await trio.sleep_until(start + i / rate)
            await task.enqueue(Bench(sent_at=time.time()))
        ok = await workers.wait_total(n + 1, timeout)
        rec = workers.collect()
    await app.aclose()
    return {**common.latency_summary(rec["pickup"]), "ok": ok and len(rec["pickup"]) >= n}


# -- 6. delayed-job lateness -------------------------------------------------------------


def due_times(n: int, delay: float, spread: float) -> list[float]:
    """``n`` due times starting ``delay`` s from now, evenly over ``spread`` s."""
    t0 = time.time() + delay
    return [t0 + (i * spread / n if spread else 0.0) for i in range(n)]


async def lateness(
    url: str, n: int, delay: float, spread: float, concurrency: int, timeout: float
) -> dict[str, Any]:
    """``n`` jobs due ``delay`` s from now (spread evenly over ``spread`` s),
    enqueued in bulk; start minus due time."""
    app, task = make_app(url)
    async with open_workers(url) as workers:
        workers.start(concurrency)
        await warm_up(task, workers)
        dues = due_times(n, delay, spread)
        for start in range(0, n, BULK_BATCH):
            await app.enqueue_jobs(
                [
                    task.new_job(Bench(sent_at=0.0, due_at=d), run_at=d)
                    for d in dues[start : start + BULK_BATCH]
                ]
            )
        ok = await workers.wait_total(n + 1, delay + spread + timeout)
        rec = workers.collect()
    await app.aclose()
    return {**common.latency_summary(rec["late"]), "ok": ok and len(rec["late"]) >= n}


# -- 7. recovery after kill -9 ---------------------------------------------------------------


async def recovery(url: str, jobs: int, lease_duration: float, timeout: float) -> dict[str, Any]:
    """A worker holding ``jobs`` leases (handlers asleep) is killed with
    SIGKILL; a second worker is running. Seconds from the kill until each job
    started again."""
    app, task = make_app(url)
    async with open_workers(url) as workers:
        opts = {"lease_duration": lease_duration, "max_in_flight": jobs}
        victim = workers.start(jobs, **opts)
        await warm_up(task, workers)
        await task.enqueue_many([Bench(sent_at=0.0, hold=3600.0) for _ in range(jobs)])
        if not await workers.wait_total(jobs + 1, 30):
            raise RuntimeError("the victim worker did not take every job")
        workers.start(16, **opts)
        await workers.wait_processes(2)
        await trio.sleep(0.5)
        killed = time.time()
        victim.kill9()
        ok = await workers.wait_total(2 * jobs + 1, lease_duration + timeout)
        rec = workers.collect()
    await app.aclose()
    again = [s - killed for s in rec["starts"] if s > killed]
    return {
        "first_s": min(again, default=math.nan),
        "p50_s": common.percentile(again, 50),
        "all_s": max(again, default=math.nan),
        "recovered": len(again),
        "lease_duration_s": lease_duration,
        "ok": ok and len(again) >= jobs,
    }


# -- 8. idle cost ------------------------------------------------------------------------------


async def idle(
    url: str,
    seconds: float,
    concurrency: int,
    stats: Callable[[], dict[str, int]],
    reset: Callable[[], None],
) -> dict[str, Any]:
    """Redis commands per second issued by one idle worker (INFO commandstats
    deltas; our own INFO/CONFIG calls excluded)."""
    app, task = make_app(url)
    async with open_workers(url) as workers:
        workers.start(concurrency)
        await warm_up(task, workers)
        await app.aclose()
        await trio.sleep(2.0)
        reset()
        await trio.sleep(seconds)
        calls = stats()
    ours = {"info", "config|resetstat", "config"}
    by_cmd = {k: v for k, v in calls.items() if k not in ours}
    total = sum(by_cmd.values())
    return {"commands_per_s": total / seconds, "by_command": by_cmd, "seconds": seconds, "ok": True}


# -- 9. drain with results stored, against without ------------------------------------------


async def drain_results(
    url: str, n: int, blocks: int, concurrency: int, timeout: float, result_first: int
) -> dict[str, Any]:
    """The cost of storing a small attrs result, measured two ways in one run
    (``result_first``: the jobs with results go first in both).

    Separate drains: ``n`` jobs returning None and ``n`` returning a result,
    each drained by a fresh worker process, back to back (FLUSHDB between);
    jobs/s of each, their ratio, and CPU per job of the worker and of Redis.

    One drain of ``blocks`` alternating blocks of ``n`` jobs each (no result,
    result, ...) by one worker: each block's time runs from its first start
    to the next block's first start (the first block, start-up, and the
    last, with no next one, are not timed). Machine noise lasting longer
    than a block falls on both kinds alike; the jobs still in flight at a
    block's end (up to concurrency + 2 x batch_size) carry a little of one
    kind's cost into the next block, which narrows the difference slightly."""
    rows = {}
    for results in (True, False) if result_first else (False, True):
        if rows:
            flush_db(url)
        rows[results] = await drain(url, n, concurrency, 1, timeout, results=results, cpu_of=True)
    plain, stored = rows[False], rows[True]
    flush_db(url)
    mixed = await drain_mixed(url, n, blocks, concurrency, timeout, int(bool(result_first)))
    mixed_ok = mixed.pop("ok")
    return {
        "plain_per_s": plain["jobs_per_s"],
        "result_per_s": stored["jobs_per_s"],
        "ratio": stored["jobs_per_s"] / plain["jobs_per_s"],
        **{f"plain_{k}": plain[k] for k in ("worker_cpu_us", "redis_cpu_us")},
        **{f"result_{k}": stored[k] for k in ("worker_cpu_us", "redis_cpu_us")},
        **mixed,
        "completed": min(plain["completed"], stored["completed"]),
        "result_first": bool(result_first),
        "ok": plain["ok"] and stored["ok"] and mixed_ok,
    }


async def drain_mixed(
    url: str, n: int, blocks: int, concurrency: int, timeout: float, first: int
) -> dict[str, Any]:
    """``blocks`` alternating blocks of ``n`` jobs (tag ``first`` first: 0
    returns None, 1 a small attrs result), enqueued in order, then one
    worker drains them; jobs/s of each kind from the timed blocks (see
    :func:`drain_results`)."""
    app, _ = make_app(url)
    tasks = [app.tasks[kind] for kind in MIXED_KINDS]
    for block in range(blocks):
        await preload(tasks[(first + block) % 2], n)
    total = n * blocks
    async with open_workers(url) as workers:
        workers.start(concurrency)
        ok = await workers.wait_total(total, timeout)
        [final] = common.collect(workers.out_dir)  # one process: starts in order
    await app.aclose()
    starts, marks = final["starts"], final["marks"]
    firsts = [i for i in range(len(marks)) if i == 0 or marks[i] != marks[i - 1]]
    took, jobs = [0.0, 0.0], [0, 0]
    for this, after in itertools.pairwise(firsts[1:]):
        took[marks[this]] += starts[after] - starts[this]
        jobs[marks[this]] += after - this
    return {
        "mixed_plain_per_s": jobs[0] / took[0] if took[0] else math.nan,
        "mixed_result_per_s": jobs[1] / took[1] if took[1] else math.nan,
        "mixed_ratio": (jobs[1] / took[1]) / (jobs[0] / took[0]) if all(took) else math.nan,
        "mixed_blocks": len(firsts),
        # more runs of one kind than blocks: starts interleaved at a boundary
        "ok": ok and len(starts) >= total and len(firsts) == blocks,
    }


def flush_db(url: str) -> None:
    """What the orchestrator does between runs (FLUSHDB, SCRIPT FLUSH,
    CONFIG RESETSTAT), for a workload that measures twice in one run."""
    redis = BenchRedis(url)
    try:
        redis.flush()
    finally:
        redis.client.close()


# -- 10. result round trip at a light steady rate ----------------------------------------------


async def roundtrip(
    url: str, rate: float, n: int, concurrency: int, timeout: float
) -> dict[str, Any]:
    """``n`` round trips started at ``rate`` per second, each in its own
    task (a slow one does not hold up the schedule): enqueue a job whose
    handler returns a small attrs result, then ``await handle.result()``;
    milliseconds from before the enqueue to the decoded result in hand. The
    worker (``concurrency``) runs in its own process; the producer's one
    subscription is made by a warm-up round trip, not counted."""
    app, _ = make_app(url)
    task = result_task(app)
    took: list[float] = []

    async def one() -> None:
        t = time.perf_counter()
        handle = await task.enqueue(Bench(sent_at=time.time()))
        value = await handle.result(timeout=timeout)
        took.append(time.perf_counter() - t)
        if not isinstance(value, Done):
            raise RuntimeError(f"job {handle.job_id} returned {value!r}")

    async with open_workers(url) as workers:
        workers.start(concurrency)
        await one()  # warm-up: the worker is running, the subscription confirmed
        took.clear()
        await trio.sleep(0.5)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                await trio.sleep_until(start + i / rate)
                nursery.start_soon(one)
    await app.aclose()
    return {**common.latency_summary(took), "ok": len(took) >= n}


# -- 11. many concurrent waiters in one process --------------------------------------------------


class _ClientCount:
    """Samples ``INFO clients`` (connected_clients: every process's) every
    5 ms in a thread (the sync client waits on its socket without the GIL)
    and keeps the highest count since :meth:`reset`."""

    def __init__(self, url: str) -> None:
        self._redis = BenchRedis(url)
        self._stop = threading.Event()
        # one call at a time, so redis-py's pool never opens a second connection
        self._lock = threading.Lock()
        self.peak = self.count()  # connects now: its connection is in every sample
        self._thread = threading.Thread(target=self._run, name="bench-clients", daemon=True)
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return int(self._redis.client.info("clients")["connected_clients"])

    def reset(self) -> int:
        """Start over from the count now (returned)."""
        self.peak = now = self.count()
        return now

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._redis.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.count())
            self._stop.wait(0.005)


def _own_clients(redis: BenchRedis, exclude: set[int]) -> list[dict[str, Any]] | None:
    """The server's clients that are connections of this process (by local
    port), without those in ``exclude`` (the admin clients' ports); None
    when this process's connections changed while the list was read."""
    before = own_ports(redis.port)
    clients = redis.clients()
    if own_ports(redis.port) != before:
        return None
    mine = before - exclude
    return [c for c in clients if int(c["addr"].rsplit(":", 1)[1]) in mine]


async def waiters(
    url: str, n: int, delay: float, concurrency: int, timeout: float
) -> dict[str, Any]:
    """``n`` jobs (returning a small attrs result) enqueued in one batch,
    due ``delay`` s later; ``n`` concurrent ``result()`` waits start at once,
    in this one process. Once every waiter is blocked (registered with the
    store's one subscription, its first read done: this process's
    connections stopped changing), the server's client list is read: this
    process's connections, and how many of them are subscribed. Then the
    jobs come due (worker at ``concurrency`` in its own process): the time
    from the due time until every result is back, and per job the time from
    its handler's run to its result in the waiter's hands. Also counted over
    the whole phase: the connections the server accepted (every process)
    and the most connected at once (sampled every 5 ms)."""
    redis = BenchRedis(url)
    redis.clients()  # connected, so its connection is among the admin ones below
    sampler = _ClientCount(url)
    # This process's connections before the App has any (it connects lazily):
    # the orchestrator's, this function's and the sampler's admin clients.
    admin = own_ports(redis.port)
    app, _ = make_app(url)
    task = result_task(app)
    back: list[tuple[float, float]] = []  # (wall time a result came back, its ran_at)

    async def wait(handle: Any) -> None:
        value = await handle.result(timeout=delay + timeout)
        back.append((time.time(), value.ran_at))

    try:
        async with open_workers(url) as workers:
            workers.start(concurrency)
            await one_result(task)  # the worker runs; this store's subscription is made
            handles = await task.enqueue_many([Bench(sent_at=0.0)] * n, delay=delay)
            due = max(h.run_at for h in handles)
            accepted_before = redis.connections_received()
            clients_before = sampler.reset()
            t0 = time.time()
            async with trio.open_nursery() as nursery:
                for handle in handles:
                    nursery.start_soon(wait, handle)
                listener = app.store._done  # the store's one subscription and its waiters
                while listener.waiting() < n:  # (polled: the store has no event for it)
                    if time.time() >= due:
                        break
                    await trio.sleep(0.005)
                registered, all_registered = listener.waiting(), time.time()
                # Registered waiters are still reading their jobs (one round
                # trip each, replies in flight): read the client list once
                # this process's connections have not changed for 250 ms.
                ports, steady_since = own_ports(redis.port), time.time()
                while True:
                    await trio.sleep(0.02)
                    if time.time() >= due:
                        raise RuntimeError("the jobs came due before every waiter was blocked")
                    now_ports = await trio.to_thread.run_sync(own_ports, redis.port)
                    if now_ports != ports:
                        ports, steady_since = now_ports, time.time()
                    elif time.time() - steady_since >= 0.25:
                        while_waiting = await trio.to_thread.run_sync(_own_clients, redis, admin)
                        if while_waiting is not None:
                            break
            accepted = redis.connections_received() - accepted_before
            peak = sampler.peak - clients_before
    finally:
        await app.aclose()
        sampler.close()
        redis.client.close()
    last = max(t for t, _ in back)
    return {
        "waiters": registered,
        "register_ms": (all_registered - t0) * 1e3,
        "blocked_ms": (steady_since - t0) * 1e3,  # their first reads done
        "all_back_ms": (last - due) * 1e3,
        **{f"wake_{k}": v for k, v in common.latency_summary([t - r for t, r in back]).items()},
        "conns_waiting": len(while_waiting),
        "conns_subscribed": sum(1 for c in while_waiting if int(c.get("sub", 0)) > 0),
        "peak_extra_clients": peak,
        "accepted": accepted,
        "ok": len(back) >= n and registered >= n,
    }


async def one_result(task: Any, timeout: float = 30) -> None:
    """One job of ``task`` enqueued and its result awaited (a warm-up)."""
    handle = await task.enqueue(Bench(sent_at=0.0))
    await handle.result(timeout=timeout)


# -- 14. start-up ---------------------------------------------------------------------------------


async def startup(url: str, concurrency: int, timeout: float) -> dict[str, Any]:
    """Seconds from spawning ``python -m chronos_trio worker APP`` (the
    CLI, one process) to its first handler start, with one job waiting in
    the queue before the process starts: interpreter start, imports, the
    first connection and lease. The worker runs on :func:`plain_python`
    (this checkout as a regular install would import it, no editable
    finder), as the peers run from regular installs."""
    python = plain_python()
    app, task = make_app(url)
    await task.enqueue(Bench(sent_at=0.0))
    await app.aclose()
    async with open_workers(url) as workers:
        spawned = time.time()
        workers.start(concurrency, cli=True, python=python)
        ok = await workers.wait_total(1, timeout)
        rec = workers.collect()
    return {"startup_s": rec["first"] - spawned if rec["count"] else math.nan, "ok": ok}


# -- 15. memory per job ---------------------------------------------------------------------------


async def memory_enqueue(url: str, n: int, delay: float) -> dict[str, Any]:
    """``n`` jobs of the :class:`Blob` task (one 100-character str), due
    ``delay`` s from now, in ``enqueue_many`` batches of :data:`BULK_BATCH`;
    no worker. The memory itself is read by the caller
    (:func:`benchmarks._memory.measure`), once this App has closed."""
    app, _ = make_app(url)
    task = app.tasks[BLOB_KIND]
    payload = Blob(common.MEMORY_DATA)
    t = time.perf_counter()
    for start in range(0, n, BULK_BATCH):
        await task.enqueue_many([payload] * min(BULK_BATCH, n - start), delay=delay)
    took = time.perf_counter() - t
    await app.aclose()
    return {"enqueued": n, "expected": n, "enqueue_s": took, "enqueue_per_s": n / took,
            "how": f"enqueue_many of {BULK_BATCH:,}", "ok": True}  # fmt: skip


# -- 16. costs against the size of the schedule ----------------------------------------------


#: How far ahead the scale workload's schedule lies (none of it comes due).
SCALE_AHEAD = 30 * 86_400.0


async def load_schedule(url: str, n: int, producers: int = 4) -> float:
    """``n`` :class:`Blob` jobs due from :data:`SCALE_AHEAD` on (each batch
    of :data:`BULK_BATCH` one second later than the one before, so the
    schedule spans many due times), by ``producers`` concurrent
    ``enqueue_many`` callers of one App; seconds taken."""
    app, _ = make_app(url)
    task = app.tasks[BLOB_KIND]
    payload = Blob(common.MEMORY_DATA)
    batches = iter(range(0, n, BULK_BATCH))

    async def produce() -> None:
        for start in batches:
            count = min(BULK_BATCH, n - start)
            await task.enqueue_many([payload] * count, delay=SCALE_AHEAD + start / BULK_BATCH)

    t = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(producers):
            nursery.start_soon(produce)
    took = time.perf_counter() - t
    await app.aclose()
    return took


async def scheduled_count(url: str) -> int:
    """Jobs in the scheduled state of the default queue (the inspector's count)."""
    app, _ = make_app(url)
    try:
        info = await app.inspector().queue("default")
        return info.counts.get(JobState.SCHEDULED, 0)
    finally:
        await app.aclose()


async def scale(
    url: str,
    scheduled: int,
    pickup_rate: float,
    pickup_jobs: int,
    drain_jobs: int,
    late_jobs: int,
    late_delay: float,
    lifecycle_jobs: int,
    timeout: float,
) -> dict[str, Any]:
    """With ``scheduled`` delayed jobs (due a month ahead) in the default
    queue, the costs that must not grow with them, each by its own
    workload's code: idle pickup (:func:`pickup`, c=16), a drain of
    ``drain_jobs`` immediate jobs (:func:`drain`, c=64, one process: lease
    and settle; also the CPU per job of redis-server and of the worker,
    which the machine's other load moves far less than the rate),
    ``late_jobs`` due over 1 s (:func:`lateness`, c=16: promote), and the
    store calls themselves (:func:`lifecycle`, 64 jobs per call: promote,
    lease, renew, complete). Also the load rate and the schedule's
    bytes/job (``used_memory`` delta); the schedule must be whole at the
    end (none of it ran or was lost)."""
    admin = BenchRedis(url)
    try:
        _memory.flushall(admin.client)
        # the connections open now (ours, the suite's): the loader's must go
        # before used_memory is read (their buffers are not the schedule's)
        base = int(admin.client.info("clients")["connected_clients"])
        before = _memory.memory_info(admin.client)["used_memory"]
        load_s = await load_schedule(url, scheduled)
        _memory.wait_clients(admin.client, base)
        loaded = _memory.memory_info(admin.client)["used_memory"] - before
    finally:
        admin.client.close()
    if await scheduled_count(url) != scheduled:
        raise RuntimeError("the schedule did not load whole")
    up = await pickup(url, pickup_rate, pickup_jobs, 16, timeout)
    dr = await drain(url, drain_jobs, 64, 1, timeout, cpu_of=True)
    late = await lateness(url, late_jobs, late_delay, 1.0, 16, 30)
    lc = await lifecycle(url, lifecycle_jobs, 64)
    left = await scheduled_count(url)
    return {
        "scheduled": scheduled,
        "pickup_jobs": pickup_jobs,
        "drain_jobs": drain_jobs,
        "late_jobs": late_jobs,
        "load_s": load_s,
        "load_per_s": scheduled / load_s,
        "bytes_per_job": loaded / scheduled,
        **{f"pickup_{k}": up[k] for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")},
        "drain_per_s": dr["jobs_per_s"],
        "drain_redis_cpu_us": dr["redis_cpu_us"],
        "drain_worker_cpu_us": dr["worker_cpu_us"],
        **{f"late_{k}": late[k] for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")},
        **{k: lc[k] for k in ("promote_us", "lease_us", "renew_us", "complete_us", "cycle_us")},
        "scheduled_after": left,
        "ok": all(r["ok"] for r in (up, dr, late)) and left == scheduled,
    }


#: No single run may take longer than this (seconds): every run is bounded.
RUN_LIMIT = 300.0


def run(fn: Callable[..., Any], *args: Any, limit: float = RUN_LIMIT) -> dict[str, Any]:
    """One run in a fresh ``trio.run``, failing after ``limit`` seconds."""

    async def bounded() -> dict[str, Any]:
        with trio.fail_after(limit):
            result: dict[str, Any] = await fn(*args)
            return result

    return trio.run(bounded)


__all__: Sequence[str] = [
    "cluster_drain", "drain", "drain_results", "enqueue", "idle", "lateness", "lifecycle",
    "memory_enqueue", "pickup", "recovery", "roundtrip", "saturation", "scale", "startup",
    "waiters",
]  # fmt: skip
