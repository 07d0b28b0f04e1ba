"""``python -m benchmarks.sqlite_driver SYSTEM PHASE [options]``: one run, one JSON line.

Run with the system's own interpreter (``benchmarks/.venv/PEER/bin/python``
for a peer, the project's for ``chronos``), on a fresh directory the
orchestrator (``benchmarks.sqlite``) made for this run (``--url``: each
system keeps its SQLite file in it). Phases, every one with the same
handler in every system (``benchmarks.sqlite_systems``):

* ``enqueue``: ``--n-single`` jobs one at a time, each call awaited, then
  ``--n`` in batches of 1,000 (the system's batch call; one at a time when
  it has none); no worker runs (as ``benchmarks.pg_driver``).
* ``drain``: ``--processes`` worker processes at ``--concurrency`` each
  start on the empty file and take one warm-up job; then ``--n`` jobs of
  ``--kind`` are stored in one transaction (``Producer.fill``); jobs/s
  from the first start to the last, and how many jobs started more than
  once (``duplicates``).
* ``pickup`` and ``lateness``: as ``benchmarks.pg_driver`` (an idle worker
  at c=16; a producer in this process); lateness only for systems with
  delayed jobs.
* ``recovery``: a worker holding ``--n`` jobs (handlers asleep; our lease
  ``--lease`` s) is killed with SIGKILL while a second worker runs (and, for
  a system that recovers on restart, a replacement starts right after the
  kill); seconds from the kill until each job started again. A system
  whose jobs are gone is watched ``--lease`` + 5 s only.
* ``idle``: one idle worker (c=16) after a warm-up job: the CPU time its
  process uses per second over ``--seconds`` s (``/proc/PID/stat``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from typing import Any

from benchmarks import _common as common
from benchmarks import pg_driver as pg
from benchmarks.pg_driver import job, workers_of

#: Tags of the drain's jobs: their sequence numbers from here on.
SEQ0 = 1_000


def load(system: str) -> Any:
    return importlib.import_module(f"benchmarks.sqlite_systems.{system}")


def fill(mod: Any, url: str, jobs: list[dict[str, Any]]) -> float:
    """``jobs`` stored by ``Producer.fill``; seconds it took."""

    async def go() -> float:
        producer = mod.Producer()
        await producer.open(url)
        try:
            t = time.perf_counter()
            await producer.fill(jobs)
            return time.perf_counter() - t
        finally:
            await producer.close()

    took: float = mod.run(go)
    return took


# -- phases ------------------------------------------------------------------------------


def drain(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    jobs = [job(SEQ0 + i, kind=args.kind) for i in range(args.n)]
    with workers_of(mod, args) as workers:
        for _ in range(args.processes):
            workers.start(args.concurrency)
        workers.wait_processes(args.processes)
        workers.warm_up()
        time.sleep(1.0)
        filled = fill(mod, args.url, jobs)
        workers.expected += args.n
        ok = workers.settle(args.timeout)
        finals = common.collect(workers.out)
        tail = "" if ok else workers.log_tail()
    rec = common.merge(finals)
    by_process = sorted(sum(1 for g, _, _ in f["tagged"] if g >= SEQ0) for f in finals)
    tags = [g for g, _, _ in rec["tagged"] if g >= SEQ0]
    starts = sorted(t for g, t, _ in rec["tagged"] if g >= SEQ0)
    distinct = len(set(tags))
    return {
        "jobs_per_s": pg.rate_of(starts),
        "completed": distinct,
        "expected": args.n,
        "duplicates": len(tags) - distinct,
        "processes": args.processes,
        "concurrency": args.concurrency,
        "kind": args.kind,
        "fill_s": filled,
        "by_process": by_process,
        "ok": ok and distinct >= args.n,
        **({"log": tail[-600:]} if tail else {}),
    }


def lateness(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    if not mod.DELAYED:
        return {"ok": True, "skipped": "no delayed jobs"}
    return pg.lateness(mod, args)


def recovery(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    n = args.n
    gone = mod.RECOVERY == "none"
    with workers_of(mod, args) as workers:
        victim = workers.start(n, victim=True, resume=True)
        workers.wait_processes(1)
        workers.warm_up()
        # the lease goes with the jobs too, for systems that set it per job
        workers.submit([{**job(SEQ0 + i, hold=3600.0), "lease": args.lease} for i in range(n)])
        if not workers.settle(60):
            raise RuntimeError(f"the victim did not take every job: {workers.log_tail()}")
        workers.start(16, resume=False)
        workers.wait_processes(2)
        time.sleep(0.5)
        killed = time.time()
        victim.kill9()
        if mod.RECOVERY == "restart":
            workers.start(16, resume=True)
        workers.expected += n
        ok = workers.settle(args.lease + 5 if gone else args.lease + args.timeout)
        rec = workers.collect()
        tail = "" if ok or gone else workers.log_tail()
    after = [(g, t - killed) for g, t, _ in rec["tagged"] if g >= SEQ0 and t > killed]
    first: dict[int, float] = {}
    for g, t in sorted(after, key=lambda x: x[1]):
        first.setdefault(g, t)
    again = sorted(first.values())
    return {
        "first_s": min(again, default=math.nan),
        "p50_s": common.percentile(again, 50),
        "all_s": max(again, default=math.nan) if len(again) >= n else math.nan,
        "recovered": len(again),
        "expected": n,
        "duplicates": len(after) - len(again),
        "lease_s": args.lease,
        "mechanism": mod.RECOVERY,
        "watched_s": args.lease + 5 if gone else args.lease + args.timeout,
        # a system that loses a dead worker's jobs completes the phase: the
        # figure is what it recovered (none)
        "ok": gone or (ok and len(again) >= n),
        **({"log": tail[-600:]} if tail else {}),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    with workers_of(mod, args) as workers:
        group = workers.start(16)
        workers.warm_up()
        time.sleep(2.0)
        cpu, t = _cpu_seconds(group.pid), time.monotonic()
        time.sleep(args.seconds)
        used, seconds = _cpu_seconds(group.pid) - cpu, time.monotonic() - t
    return {"cpu_ms_per_s": used / seconds * 1e3, "seconds": seconds, "ok": True}


PHASES = {
    "enqueue": pg.enqueue,
    "drain": drain,
    "pickup": pg.pickup,
    "lateness": lateness,
    "recovery": recovery,
    "idle": idle,
    "versions": pg.versions,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sqlite_driver")
    parser.add_argument("system")
    parser.add_argument("phase", choices=tuple(PHASES))
    parser.add_argument("--url", default="", help="the run's directory (its own, fresh)")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--n-single", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--kind", choices=("noop", "io"), default="io")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    args.query_url = ""  # what pg_driver's workers pass on: no handler queries here
    os.environ.setdefault(common.ENV_URL, args.url)
    mod = load(args.system)
    if args.phase != "versions":
        mod.run(mod.install, args.url)
    print(json.dumps(PHASES[args.phase](mod, args)))


if __name__ == "__main__":
    sys.exit(main())
