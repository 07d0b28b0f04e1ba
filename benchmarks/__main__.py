"""``python -m benchmarks``: every workload, chronos_trio and its peers, one run.

Starts a private redis-server, runs each workload ``--runs`` times (FLUSHDB,
SCRIPT FLUSH and CONFIG RESETSTAT between runs), keeps the median of each
figure, prints tables with chronos_trio/peer ratios, writes JSON (and, with
``--publish``, the JSON, Markdown tables and PNG charts under docs/benchmarks/).

``--quick``: small N, one run, no peers, well under 2 minutes (the CI smoke
test). ``--setup-peers``: create each peer's virtual environment
(benchmarks/.venv/PEER) from benchmarks/peers/requirements-PEER.txt.
``--postgres``: the PostgreSQL benchmark instead (``benchmarks.postgres``;
its own options, e.g. ``--postgres --setup-peers``, ``--postgres --full``).
``--sqlite``: the SQLite benchmark instead (``benchmarks.sqlite``; its own
options, e.g. ``--sqlite --setup-peers``, ``--sqlite --full``).
``--enqueue-callers``: enqueue per caller (sync, Trio, asyncio) against the
peers' own calls instead (``benchmarks.enqueue_callers``; its own options).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import _common as common
from benchmarks import _memory as mem
from benchmarks import chronos_bench as cb
from benchmarks import report
from benchmarks._proc import REPO
from benchmarks._redis import BenchRedis, open_redis
from benchmarks.peers import PEERS, ROUNDTRIP_PEERS

VENVS = REPO / "benchmarks" / ".venv"
RESULTS = REPO / "benchmarks" / "results"
PUBLISH = REPO / "docs" / "benchmarks"
WORKLOADS = (
    "lifecycle",
    "drain",
    "saturation",
    "enqueue",
    "replicas",
    "pickup",
    "lateness",
    "recovery",
    "idle",
    "results",
    "roundtrip",
    "waiters",
    "incr",
    "io",
    "startup",
    "memory",
    "scale",
)
#: Run only when named in ``--workloads`` (they start servers of their own).
OPTIONAL_WORKLOADS = ("cluster",)


class Sizes:
    """Workload sizes: the issue's figures, or small ones for ``--quick``."""

    def __init__(self, quick: bool) -> None:
        q = quick
        self.lifecycle_single = 100 if q else 300
        self.lifecycle_batch = 640 if q else 6_400
        self.drain = 2_000 if q else 20_000
        self.drain_concurrency = (1, 16, 64)
        self.saturation = 2_000 if q else 20_000
        self.enqueue_single = 300 if q else 2_000
        self.enqueue_many = 2_000 if q else 20_000
        self.pickup_jobs = 50 if q else 500
        self.pickup_rate = 100.0
        self.late_jobs = 200 if q else 1_000
        self.late_delay = 1.0 if q else 2.0
        self.recovery_jobs = 16 if q else 64
        self.lease = 2.0 if q else 5.0
        self.idle_seconds = 3.0 if q else 10.0
        self.results_drain = 2_000 if q else 20_000
        self.results_blocks = 4 if q else 10  # of results_drain jobs each, alternating
        self.roundtrip_rate = 100.0
        self.roundtrip_jobs = 50 if q else 1_000  # 10 s at 100/s
        self.waiters = 100 if q else 1_000
        self.waiters_delay = 1.0 if q else 2.0
        self.incr_drain = 2_000 if q else 10_000
        self.incr_concurrency = 64
        self.io_drain = 2_000 if q else 10_000
        self.io_concurrency = (64, 256)
        self.startup_concurrency = 16
        self.timeout = 60.0 if q else 120.0
        #: A peer's drain run stops after this; its rate is then taken from the
        #: jobs it did (marked incomplete), so a slow peer cannot stall the suite.
        self.peer_timeout = 60.0
        # memory: delayed jobs stored per run (--memory-jobs); a peer's enqueue
        # stops after memory_timeout s, its figures then over the jobs it did
        self.memory_jobs = (1_000, 5_000) if q else (10_000, 300_000)
        self.memory_timeout = 300.0
        # scale: delayed jobs scheduled behind the measured ones (--scale-jobs)
        self.scale_scheduled = (1_000, 20_000) if q else (10_000, 1_000_000)
        self.scale_drain = 2_000 if q else 10_000
        self.scale_lifecycle = 640 if q else 6_400


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def repeat(runs: int, redis: BenchRedis, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn`` ``runs`` times with a clean Redis before each; medians of figures."""
    results = []
    for _ in range(runs):
        redis.flush()
        try:
            results.append(fn())
        except Exception as exc:  # a failed run is reported, not hidden
            log(f"   run failed: {type(exc).__name__}: {exc}")
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    out = common.median_of(results)
    out["ok"] = all(r.get("ok", True) for r in results)
    out["all_runs"] = results
    return out


# -- peers ------------------------------------------------------------------------------------


def peer_python(peer: str) -> Path:
    return VENVS / peer / "bin" / "python"


def setup_peers(peers: list[str]) -> None:
    for peer in peers:
        venv = VENVS / peer
        if not peer_python(peer).exists():
            log(f"creating {venv}")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        req = REPO / "benchmarks" / "peers" / f"requirements-{peer}.txt"
        subprocess.run([str(peer_python(peer)), "-m", "pip", "install", "-q", "-r", str(req)],
                       check=True)  # fmt: skip


def run_peer(peer: str, workload: str, url: str, limit: float, **opts: Any) -> dict[str, Any]:
    """One run of ``workload`` by ``peer`` in its own venv, killed after ``limit`` s."""
    python = peer_python(peer)
    if not python.exists():
        raise RuntimeError("not installed (python -m benchmarks --setup-peers)")
    argv = [str(python), "-m", "benchmarks.peers", peer, workload, "--url", url]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=limit, cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {last[:160]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def compile_bytecode(peers: list[str]) -> None:
    """Write the bytecode of everything a start-up run imports: our package
    and the benchmark's modules, and each peer's virtual environment. A
    warm-up launch writes none when PYTHONDONTWRITEBYTECODE is set (it is in
    some sandboxes, and pip then installs the peers without any), and every
    launch would compile its sources again: a pip-installed package has its
    bytecode written at install."""
    bench = [str(REPO / "benchmarks"), str(REPO / "benchmarks" / "peers")]  # not the venvs
    commands = [
        [sys.executable, "-m", "compileall", "-q", str(REPO / "chronos_trio")],
        [sys.executable, "-m", "compileall", "-q", "-l", *bench],
    ]
    commands += [[str(peer_python(p)), "-m", "compileall", "-q", str(VENVS / p / "lib")]
                 for p in peers if peer_python(p).exists()]  # fmt: skip
    for argv in commands:
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)


def peer_versions(peers: list[str]) -> dict[str, Any]:
    out = {}
    for peer in peers:
        try:
            out[peer] = run_peer(peer, "versions", "", 60)
        except Exception as exc:
            out[peer] = {"error": str(exc)}
    return out


# -- the suite -----------------------------------------------------------------------------------


def suite(args: argparse.Namespace, redis: BenchRedis) -> dict[str, list[dict[str, Any]]]:
    s = Sizes(args.quick)
    if args.idle_seconds is not None:
        s.idle_seconds = args.idle_seconds
    url = redis.url
    runs = args.runs
    peers = [] if args.quick or args.no_peers else args.peers
    wanted = args.workloads
    out: dict[str, list[dict[str, Any]]] = {w: [] for w in (*WORKLOADS, *OPTIONAL_WORKLOADS)}

    def ours(workload: str, setting: str, fn: Callable[[], dict[str, Any]]) -> None:
        log(f"-- {workload}: chronos_trio {setting}")
        row = repeat(runs, redis, fn)
        out[workload].append({"system": report.OURS, "setting": setting, **row})
        _save_partial(args.out, out)

    def theirs(
        workload: str,
        setting: str,
        peer: str,
        limit: float,
        *,
        as_: str | None = None,
        then: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **opts: Any,
    ) -> None:
        """``peer``'s run of its workload ``as_`` (default ``workload``),
        each run's figures passed through ``then`` (read right after it)."""

        def once() -> dict[str, Any]:
            result = run_peer(peer, as_ or workload, url, limit, **opts)
            return then(result) if then else result

        log(f"-- {workload}: {peer} {setting}")
        row = repeat(runs, redis, once)
        out[workload].append({"system": peer, "setting": setting, **row})
        _save_partial(args.out, out)

    def counted(result: dict[str, Any]) -> dict[str, Any]:
        """A peer's INCR drain: Redis must hold a count for every job done."""
        count = redis.counter(common.INCR_KEY)
        ok = result.get("ok", True) and count >= result["completed"]
        return {**result, "incr_count": count, "ok": ok}

    def of_ideal(concurrency: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The I/O workload's ideal: ``concurrency`` handlers each done in 1 ms."""
        ideal = concurrency / common.IO_WAIT

        def add(result: dict[str, Any]) -> dict[str, Any]:
            return {**result, "ideal_per_s": ideal, "of_ideal": result["jobs_per_s"] / ideal}

        return add

    if "lifecycle" in wanted:
        configs: list[tuple[str, str | None]] = [
            ("memory", None),
            ("redis p1", url + "?partitions=1"),
            ("redis p8", url + "?partitions=8"),
        ]
        for name, store_url in configs:
            n1 = s.lifecycle_single * (5 if store_url is None else 1)
            ours("lifecycle", f"{name}, 1 job/call",
                 lambda u=store_url, n=n1: cb.run(cb.lifecycle, u, n, 1))  # fmt: skip
            ours("lifecycle", f"{name}, 64 jobs/call",
                 lambda u=store_url: cb.run(cb.lifecycle, u, s.lifecycle_batch, 64))  # fmt: skip

    if "drain" in wanted:
        settings = [(f"c={c}", c, 1) for c in s.drain_concurrency] + [("2 procs x c=64", 64, 2)]
        for label, c, p in settings:
            ours("drain", label, lambda c=c, p=p: cb.run(cb.drain, url, s.drain, c, p, s.timeout))
            for peer in peers:
                theirs("drain", label, peer, s.peer_timeout + 120, n=s.drain, concurrency=c,
                       processes=p, timeout=s.peer_timeout)  # fmt: skip

    if "cluster" in wanted:
        # A local 3-master Cluster of the benchmark's own, the queue in 8
        # partitions (--cluster-partitions; spread over the masters' slots),
        # against the one node with 1 partition; both drains in every run,
        # the order alternating.
        from chronos_trio.testing.redis_server import RedisCluster

        with RedisCluster() as cluster:
            nodes = [n.url for n in cluster.nodes]
            for parts, p in itertools.product(args.cluster_partitions, args.cluster_processes):
                cluster_url = f"{cluster.url}?partitions={parts}"
                order = itertools.count()
                procs = f"{p} proc{'s' if p > 1 else ''}"
                setting = f"{s.drain:,} jobs, c=64, {procs}: p{parts} on 3 masters / p1 on 1 node"
                ours("cluster", setting, lambda u=cluster_url, p=p, order=order: cb.run(
                    cb.cluster_drain, url, u, nodes, cluster.flushall, s.drain, 64, p,
                    s.timeout, next(order) % 2))  # fmt: skip

    if "saturation" in wanted:
        ours("saturation", "4 producers, c=64",
             lambda: cb.run(cb.saturation, url, s.saturation, 4, 64, s.timeout))  # fmt: skip

    if "enqueue" in wanted:
        ours("enqueue", "no worker", lambda: cb.run(
            cb.enqueue, url, s.enqueue_single, s.enqueue_many, 32, s.enqueue_many))  # fmt: skip
        for peer in peers:
            theirs("enqueue", "no worker", peer, 600, n=s.enqueue_many, n_single=s.enqueue_single)

    if "replicas" in wanted:
        # A master with one replica of its own (asynchronous replication, as
        # in production), to price wait_replicas=1: WAIT after each enqueue
        # round trip until the replica acknowledged it.
        from chronos_trio.testing.redis_server import RedisReplicaSet

        with RedisReplicaSet(replicas=1) as replicated:
            ours("replicas", "master + 1 replica", lambda: cb.run(
                cb.replicated_enqueue, replicated.url, s.enqueue_single, s.enqueue_many,
                replicated.flushall))  # fmt: skip

    if "pickup" in wanted:
        ours("pickup", f"{s.pickup_rate:.0f} jobs/s, c=16", lambda: cb.run(
            cb.pickup, url, s.pickup_rate, s.pickup_jobs, 16, s.timeout))  # fmt: skip

    if "lateness" in wanted:
        for label, spread in (("due over 1 s", 1.0), ("all due at once", 0.0)):
            setting = f"{s.late_jobs} jobs, {label}"
            ours("lateness", setting, lambda spread=spread: cb.run(
                cb.lateness, url, s.late_jobs, s.late_delay, spread, 16, 30))  # fmt: skip
            for peer in peers:
                theirs("lateness", setting, peer, 240, n=s.late_jobs, delay=s.late_delay,
                       spread=spread, concurrency=16, timeout=30)  # fmt: skip

    if "recovery" in wanted:
        ours("recovery", f"{s.recovery_jobs} leases, lease {s.lease:g} s", lambda: cb.run(
            cb.recovery, url, s.recovery_jobs, s.lease, s.timeout))  # fmt: skip

    if "idle" in wanted:
        # --partitions: the queue's partition count (several: one row each);
        # without it the store's default (1), labelled as before.
        for parts in args.partitions or [None]:
            idle_url = url if parts is None else f"{url}?partitions={parts}"
            label = f"c=16, {s.idle_seconds:g} s" + ("" if parts is None else f", p{parts}")
            ours("idle", label, lambda u=idle_url: cb.run(
                cb.idle, u, s.idle_seconds, 16, redis.commandstats, redis.reset_stats))  # fmt: skip

    if "results" in wanted:
        # Both drains in every run, the order alternating from run to run.
        order = itertools.count()
        ours("results", f"{s.results_drain:,} jobs, c=64", lambda: cb.run(
            cb.drain_results, url, s.results_drain, s.results_blocks, 64, s.timeout,
            next(order) % 2))  # fmt: skip

    if "roundtrip" in wanted:
        setting = f"{s.roundtrip_rate:.0f}/s for {s.roundtrip_jobs / s.roundtrip_rate:g} s, c=16"
        ours("roundtrip", setting, lambda: cb.run(
            cb.roundtrip, url, s.roundtrip_rate, s.roundtrip_jobs, 16, 30))  # fmt: skip
        for peer in [p for p in peers if p in ROUNDTRIP_PEERS]:
            opts = {"n": s.roundtrip_jobs, "rate": s.roundtrip_rate, "concurrency": 16,
                    "timeout": 30}  # fmt: skip
            theirs("roundtrip", setting, peer, 240, **opts)
            # The same with the peer's result polling (and arq's queue
            # polling) at 10 ms instead of its default 0.5 s: not a default.
            theirs("roundtrip", f"{setting}, polls 10 ms", peer, 240, poll=0.01, **opts)

    if "waiters" in wanted:
        ours("waiters", f"{s.waiters:,} waiters, due together, c=64", lambda: cb.run(
            cb.waiters, url, s.waiters, s.waiters_delay, 64, 30))  # fmt: skip

    if "incr" in wanted:
        c = s.incr_concurrency
        ours("incr", f"c={c}", lambda: cb.run(
            partial(cb.drain, incr=True), url, s.incr_drain, c, 1, s.timeout))  # fmt: skip
        for peer in peers:
            theirs("incr", f"c={c}", peer, s.peer_timeout + 120, as_="drain", then=counted,
                   n=s.incr_drain, concurrency=c, processes=1, timeout=s.peer_timeout,
                   kind="incr")  # fmt: skip

    if "io" in wanted:
        sleepy = partial(cb.drain, hold=common.IO_WAIT)
        for c in s.io_concurrency:
            setting = f"c={c}, {common.IO_WAIT * 1e3:g} ms"
            ours("io", setting, lambda c=c: of_ideal(c)(
                cb.run(sleepy, url, s.io_drain, c, 1, s.timeout)))  # fmt: skip
            for peer in peers:
                theirs("io", setting, peer, s.peer_timeout + 120, as_="drain", then=of_ideal(c),
                       n=s.io_drain, concurrency=c, processes=1, timeout=s.peer_timeout,
                       hold=common.IO_WAIT)  # fmt: skip

    if "startup" in wanted:
        # One launch first, not counted, so every system's runs find its
        # bytecode compiled and its files in the page cache.
        c = s.startup_concurrency
        log("-- startup: warming up")
        compile_bytecode(peers)
        redis.flush()
        cb.run(cb.startup, url, c, 60)
        ours("startup", f"c={c}", lambda: cb.run(cb.startup, url, c, 60))
        for peer in peers:
            redis.flush()
            with contextlib.suppress(Exception):  # a failure shows in the counted runs
                run_peer(peer, "startup", url, 120, concurrency=c, timeout=60)
            theirs("startup", f"c={c}", peer, 120, concurrency=c, timeout=60)

    if "memory" in wanted:
        for n in args.memory_jobs or s.memory_jobs:
            setting = f"{n:,} jobs due in 1 h"
            ours("memory", setting, lambda n=n: mem.measure(redis.client, lambda: cb.run(
                cb.memory_enqueue, url, n, common.MEMORY_DELAY)))  # fmt: skip
            for peer in peers:
                once = partial(run_peer, peer, "memory", url, s.memory_timeout + 120, n=n,
                               delay=common.MEMORY_DELAY, timeout=s.memory_timeout)  # fmt: skip
                log(f"-- memory: {peer} {setting}")
                row = repeat(runs, redis, partial(mem.measure, redis.client, once))
                out["memory"].append({"system": peer, "setting": setting, **row})
                _save_partial(args.out, out)

    if "scale" in wanted:
        # The sizes' runs interleaved (S1, S2, S1, S2, ...), so load that drifts
        # over the minutes they take falls on every size alike; medians per size.
        sizes = args.scale_jobs or s.scale_scheduled
        done: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
        for n in itertools.chain.from_iterable(itertools.repeat(sizes, runs)):
            log(f"-- scale: chronos_trio {n:,} scheduled")
            done[n].append(repeat(1, redis, lambda n=n: cb.run(
                cb.scale, url, n, s.pickup_rate, s.pickup_jobs, s.scale_drain, s.late_jobs,
                s.late_delay, s.scale_lifecycle, s.timeout, limit=2 * cb.RUN_LIMIT)))  # fmt: skip
        for n, rows in done.items():
            row = next((r for r in rows if r.get("error")), None)
            if row is None:
                row = common.median_of(rows)
                row["ok"] = all(r["ok"] for r in rows)
                row["all_runs"] = [r["all_runs"][0] for r in rows]
            out["scale"].append({"system": report.OURS, "setting": f"{n:,} scheduled", **row})
        _save_partial(args.out, out)
    return out


def meta(args: argparse.Namespace, redis: BenchRedis, peers: list[str]) -> dict[str, Any]:
    import redis as redis_py
    import trio

    import chronos_trio

    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "tree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "chronos_trio")),
        "runs": args.runs,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_start": os.getloadavg(),
        },
        "versions": {
            "chronos_trio": chronos_trio.__version__,
            "trio": trio.__version__,
            "redis-py": redis_py.__version__,
            "redis-server": redis.version(),
            "peers": peer_versions(peers) if peers else {},
        },
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--postgres" in argv:
        # The PostgreSQL benchmark: its own cluster, contestants and options.
        from benchmarks import postgres

        return postgres.main([a for a in argv if a != "--postgres"])
    if "--sqlite" in argv:
        # The SQLite benchmark: its own files, contestants and options.
        from benchmarks import sqlite

        return sqlite.main([a for a in argv if a != "--sqlite"])
    if "--enqueue-callers" in argv:
        # Enqueue per caller class, rounds interleaved: its own options.
        from benchmarks import enqueue_callers

        return enqueue_callers.main([a for a in argv if a != "--enqueue-callers"])
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small N, 1 run, no peers")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default 3)")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument(
        "--cluster-partitions",
        default="8",
        help="comma-separated partition counts of the cluster workload's queue (a row each)",
    )
    parser.add_argument(
        "--cluster-processes",
        default="1",
        help="comma-separated worker process counts for the cluster workload (a row each)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=None,
        help="the idle workload's window (default 10 s; 60 s covers the 30 s idle waits)",
    )
    parser.add_argument(
        "--partitions",
        default="",
        help="comma-separated partition counts for the idle workload (a row each; "
        "default: the store's default, 1)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--publish", action="store_true", help="also write docs/benchmarks/")
    parser.add_argument("--setup-peers", action="store_true", help="create the peers' venvs")
    parser.add_argument("--memory-jobs", type=_counts, help="memory: N, e.g. 10000,300000")
    parser.add_argument("--scale-jobs", type=_counts, help="scale: S, e.g. 10000,1000000")
    args = parser.parse_args(argv)
    args.peers = [p for p in args.peers.split(",") if p]
    args.workloads = [w for w in args.workloads.split(",") if w]
    try:
        args.partitions = [int(p) for p in args.partitions.split(",") if p]
    except ValueError:
        parser.error(f"--partitions takes comma-separated counts, got {args.partitions!r}")
    if any(p < 1 for p in args.partitions):
        parser.error("--partitions: every count must be >= 1")
    for name in ("cluster_partitions", "cluster_processes"):
        try:
            setattr(args, name, [int(p) for p in getattr(args, name).split(",") if p])
        except ValueError:
            parser.error(f"--{name.replace('_', '-')}: comma-separated counts")
    unknown = set(args.workloads) - {*WORKLOADS, *OPTIONAL_WORKLOADS} | set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown workload(s)/peer(s): {', '.join(sorted(unknown))}")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.setup_peers:
        setup_peers(args.peers)
        return 0
    load = os.getloadavg()[0]
    if load > 1.0:
        log(f"warning: load average {load:.2f} on {os.cpu_count()} CPUs: figures will be low")
    started = time.monotonic()
    loads: list[float] = []
    sampler = threading.Thread(target=_sample_load, args=(loads,), daemon=True)
    sampler.start()
    with open_redis() as redis:
        peers = [] if args.quick or args.no_peers else args.peers
        doc: dict[str, Any] = {"meta": meta(args, redis, peers)}
        doc["workloads"] = suite(args, redis)
    doc["meta"]["seconds"] = round(time.monotonic() - started, 1)
    doc["meta"]["machine"]["loadavg_end"] = os.getloadavg()
    doc["meta"]["machine"]["loadavg1_during"] = {
        "min": min(loads, default=math.nan),
        "median": statistics.median(loads) if loads else math.nan,
        "max": max(loads, default=math.nan),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_clean(doc), indent=1, default=_json_default))
    print(report.render(doc, report.text_table))
    print(f"results: {args.out} ({doc['meta']['seconds']} s)")
    pngs = report.charts(doc, PUBLISH if args.publish else args.out.parent)
    if args.publish:
        (PUBLISH / "latest.json").write_text(
            json.dumps(_clean(doc), indent=1, default=_json_default)
        )
        (PUBLISH / "latest.md").write_text(report.render(doc, report.markdown_table))
    for png in pngs:
        print(f"chart: {png}")
    failed = [
        f"{name}/{row['system']}/{row['setting']}"
        for name, rows in doc["workloads"].items()
        for row in rows
        if row["system"] == report.OURS and not row.get("ok", True)
    ]
    if failed:
        print(f"chronos_trio workloads that did not complete: {', '.join(failed)}")
        return 1
    return 0


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(x.replace("_", "")) for x in text.split(",") if x)


def _git(*argv: str) -> str:
    proc = subprocess.run(["git", *argv], capture_output=True, text=True, cwd=REPO, check=False)
    return proc.stdout.strip()


def _save_partial(path: Path, workloads: dict[str, Any]) -> None:
    """What is measured so far, so an interrupted run loses nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.json")
    partial.write_text(json.dumps(_clean({"workloads": workloads}), default=_json_default))


def _sample_load(out: list[float]) -> None:
    """1-minute load average every 10 s, to judge how quiet the machine was."""
    while True:
        out.append(os.getloadavg()[0])
        time.sleep(10)


def _json_default(value: Any) -> Any:
    return str(value)


def _clean(value: Any) -> Any:
    """NaN (a figure that could not be measured) as JSON null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
