"""``python -m benchmarks.pg_driver SYSTEM PHASE [options]``: one run, one JSON line.

Run with the system's own interpreter (``benchmarks/.venv/PEER/bin/python``
for a peer, the project's for ``chronos``), on a fresh database the
orchestrator (``benchmarks.postgres``) made for this run. The system's
schema is installed first (not timed). Phases:

* ``enqueue``: ``--n-single`` jobs one at a time, each call awaited, then
  ``--n`` in batches of :data:`BULK_BATCH` (the system's batch call; one at
  a time when it has none); no worker runs.
* ``drain``: ``--n`` jobs enqueued first, then one worker process at
  ``--concurrency`` starts; jobs/s from the first start to the last.
  ``--kind query``: each handler makes one PostgreSQL query first.
* ``pickup``: ``--n`` immediate jobs enqueued one at a time at ``--rate``
  per second into an idle worker (c=16); handler start minus the wall time
  just before the enqueue call.
* ``lateness``: ``--n`` jobs due ``--delay`` s ahead (over ``--spread`` s),
  enqueued in bulk while a worker (c=16) waits; start minus due time.
* ``recovery``: a worker holding ``--n`` jobs (handlers asleep, lease or
  heartbeat timeout ``--lease`` s) is killed with SIGKILL while a second
  worker runs; seconds from the kill until each job started again.
* ``idle``: one idle worker (c=16) after a warm-up job; statements per
  second it costs the server (``pg_stat_statements``) and transactions per
  second (``pg_stat_database``) over ``--seconds`` s (on Redis: commands
  per second, ``INFO commandstats``).
* ``xmin``: a worker (c=16) drains a batch of ``--n`` jobs and takes
  ``--pickups`` jobs at ``--rate``/s (before); then a transaction holds a
  snapshot open (xmin pinned) for ``--hold`` s while jobs flow at
  ``--churn`` per second; the same batch and pickups are measured again at
  the end of the hold, with the tables' dead tuples.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import _common as common
from benchmarks import _psql
from benchmarks._proc import WorkerGroup

BULK_BATCH = 1000
#: Tags of the jobs' stages (``Recorder.record_tagged``).
WARM, MAIN, BEFORE_DRAIN, BEFORE_PICKUP, CHURN, PINNED_DRAIN, PINNED_PICKUP = range(-1, 6)


def load(system: str) -> Any:
    return importlib.import_module(f"benchmarks.pg_systems.{system}")


def job(
    tag: int, *, sent_at: float = 0.0, due_at: float = 0.0, hold: float = 0.0, kind: str = "noop"
) -> dict[str, Any]:
    return {"sent_at": sent_at, "due_at": due_at, "hold": hold, "tag": tag, "kind": kind}


# -- producing ---------------------------------------------------------------------------


async def _enqueue(mod: Any, url: str, jobs: list[dict[str, Any]], how: str) -> float:
    """``jobs`` enqueued ``how`` (``single``: one call each, awaited; ``bulk``:
    batches of :data:`BULK_BATCH`); seconds, connecting not counted."""
    producer = mod.Producer()
    await producer.open(url)
    try:
        t = time.perf_counter()
        if how == "bulk" and producer.bulk:
            for i in range(0, len(jobs), BULK_BATCH):
                await producer.enqueue_bulk(jobs[i : i + BULK_BATCH])
        else:
            for one in jobs:
                await producer.enqueue(one)
        return time.perf_counter() - t
    finally:
        await producer.close()


async def _paced(mod: Any, url: str, n: int, rate: float, tag: int) -> None:
    """``n`` immediate jobs, one call each at ``rate`` per second, each
    stamped with the wall time just before its call."""
    producer = mod.Producer()
    await producer.open(url)
    try:
        start = time.monotonic()
        for i in range(n):
            await mod.sleep(max(0.0, start + i / rate - time.monotonic()))
            await producer.enqueue(job(tag, sent_at=time.time()))
    finally:
        await producer.close()


def enqueue_jobs(mod: Any, url: str, jobs: list[dict[str, Any]], how: str = "bulk") -> float:
    took: float = mod.run(_enqueue, mod, url, jobs, how)
    return took


# -- workers ---------------------------------------------------------------------------------


class Workers:
    """Worker processes of the system under test, recording into ``out``."""

    def __init__(self, mod: Any, args: argparse.Namespace, out: Path) -> None:
        self.mod, self.args, self.out = mod, args, out
        self.groups: list[WorkerGroup] = []
        self.expected = 0  # jobs enqueued so far that must run
        #: The lease (or heartbeat timeout) the workers get: the recovery
        #: phase's; every other phase runs on each system's defaults.
        self.lease = args.lease if args.phase == "recovery" else None

    def start(self, concurrency: int, **options: Any) -> WorkerGroup:
        env = {
            common.ENV_URL: self.args.url,
            common.ENV_DIR: str(self.out),
            common.ENV_CONCURRENCY: str(concurrency),
            common.ENV_OPTIONS: json.dumps(
                {"lease": self.lease, "query_url": self.args.query_url, **options}
            ),
        }
        group = WorkerGroup(self.mod.worker_argv(sys.executable), env, self.out / "worker.log")
        self.groups.append(group)
        return group

    def wait(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while common.total_count(self.out) < n:
            if time.monotonic() > deadline:
                return False
            for g in self.groups:
                if not g.alive() and g.proc.returncode != -signal.SIGKILL:
                    raise RuntimeError(f"a worker exited: {self.log_tail()}")
            time.sleep(0.01)
        return True

    def wait_processes(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(common.read_progress(self.out)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker processes did not start: {self.log_tail()}")
            time.sleep(0.05)

    def submit(self, jobs: list[dict[str, Any]], how: str = "bulk") -> float:
        self.expected += len(jobs)
        return enqueue_jobs(self.mod, self.args.url, jobs, how)

    def paced(self, n: int, rate: float, tag: int) -> None:
        self.expected += n
        self.mod.run(_paced, self.mod, self.args.url, n, rate, tag)

    def settle(self, timeout: float) -> bool:
        """Until every job submitted so far has started."""
        return self.wait(self.expected, timeout)

    def warm_up(self, timeout: float = 60) -> None:
        self.submit([job(WARM)], "single")
        if not self.settle(timeout):
            raise RuntimeError(f"the warm-up job did not run: {self.log_tail()}")

    def collect(self) -> dict[str, Any]:
        return common.merge(common.collect(self.out))

    def log_tail(self) -> str:
        path = self.out / "worker.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        for g in self.groups:
            g.stop()


@contextmanager
def workers_of(mod: Any, args: argparse.Namespace) -> Iterator[Workers]:
    with tempfile.TemporaryDirectory(prefix=f"pgbench-{args.system}-") as tmp:
        workers = Workers(mod, args, Path(tmp))
        try:
            yield workers
        finally:
            workers.stop()


# -- figures -----------------------------------------------------------------------------------


def starts_of(rec: dict[str, Any], tag: int) -> list[float]:
    return sorted(t for g, t, _ in rec["tagged"] if g == tag)


def pickups_of(rec: dict[str, Any], tag: int) -> list[float]:
    return [p for g, _, p in rec["tagged"] if g == tag and not math.isnan(p)]


def rate_of(starts: list[float]) -> float:
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    return (len(starts) - 1) / span if span > 0 else math.nan


# -- phases ------------------------------------------------------------------------------------


def enqueue(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    single = enqueue_jobs(mod, args.url, [job(MAIN, sent_at=1.0)] * args.n_single, "single")
    bulk = enqueue_jobs(mod, args.url, [job(MAIN, sent_at=1.0)] * args.n, "bulk")
    return {
        "single_per_s": args.n_single / single,
        "single_us": single / args.n_single * 1e6,
        "bulk_per_s": args.n / bulk,
        "bulk_call": f"batches of {BULK_BATCH:,}" if mod.Producer.bulk else "one at a time",
        "ok": True,
    }


def drain(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    with workers_of(mod, args) as workers:
        workers.submit([job(MAIN, kind=args.kind) for _ in range(args.n)])
        workers.start(args.concurrency)
        ok = workers.settle(args.timeout)
        rec = workers.collect()
    starts = starts_of(rec, MAIN)
    return {
        "jobs_per_s": rate_of(starts),
        "completed": len(starts),
        "expected": args.n,
        "ok": ok and len(starts) >= args.n,
    }


def pickup(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    with workers_of(mod, args) as workers:
        workers.start(16)
        workers.warm_up()
        time.sleep(0.5)
        workers.paced(args.n, args.rate, MAIN)
        ok = workers.settle(args.timeout)
        rec = workers.collect()
    took = pickups_of(rec, MAIN)
    return {**common.latency_summary(took), "ok": ok and len(took) >= args.n}


def lateness(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    with workers_of(mod, args) as workers:
        workers.start(16)
        workers.warm_up()
        t0 = time.time() + args.delay
        dues = [t0 + (i * args.spread / args.n if args.spread else 0.0) for i in range(args.n)]
        workers.submit([job(MAIN, due_at=d) for d in dues])
        ok = workers.settle(args.delay + args.spread + args.timeout)
        rec = workers.collect()
    late = rec["late"]
    return {**common.latency_summary(late), "ok": ok and len(late) >= args.n}


def recovery(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    n = args.n
    with workers_of(mod, args) as workers:
        victim = workers.start(n, victim=True)
        workers.wait_processes(1)
        workers.warm_up()
        # the lease goes with the jobs too, for systems that set it per job
        workers.submit([{**job(MAIN, hold=3600.0), "lease": args.lease} for _ in range(n)])
        if not workers.settle(60):
            raise RuntimeError(f"the victim did not take every job: {workers.log_tail()}")
        workers.start(16)
        workers.wait_processes(2)
        time.sleep(0.5)
        killed = time.time()
        victim.kill9()
        workers.expected += n
        ok = workers.settle(args.lease + args.timeout)
        rec = workers.collect()
        tail = "" if ok else workers.log_tail()
    again = [t - killed for t in starts_of(rec, MAIN) if t > killed]
    return {
        "first_s": min(again, default=math.nan),
        "p50_s": common.percentile(again, 50),
        "all_s": max(again, default=math.nan) if len(again) >= n else math.nan,
        "recovered": len(again),
        "lease_s": args.lease,
        "ok": ok and len(again) >= n,
        **({"log": tail[-600:]} if tail else {}),
    }


def idle(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    meter_of = getattr(mod, "idle_meter", None)
    with workers_of(mod, args) as workers:
        workers.start(16)
        workers.warm_up()
        time.sleep(2.0)
        meter = (meter_of and meter_of(args.url)) or _psql.IdleMeter(args.psql, args.url)
        time.sleep(args.seconds)
        figures: dict[str, Any] = meter.read()
    return {**figures, "ok": True}


def xmin(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Drain and pickup before a snapshot is pinned and at the end of ``--hold``
    s of it, jobs flowing at ``--churn``/s meanwhile (in batches every 0.1 s)."""
    out: dict[str, Any] = {"hold_s": args.hold, "churn_per_s": args.churn}
    with workers_of(mod, args) as workers:
        workers.start(16)
        workers.warm_up()

        def measure(drain_tag: int, pickup_tag: int) -> None:
            times = _psql.statement_times(args.psql, args.url)
            workers.submit([job(drain_tag) for _ in range(args.n)])
            if not workers.settle(args.timeout):
                raise RuntimeError("a measured batch did not drain in time")
            workers.paced(args.pickups, args.rate, pickup_tag)
            if not workers.settle(args.timeout):
                raise RuntimeError("the measured pickups did not run in time")
            # where the server's time went while measuring (the worker's and ours)
            name = "before" if drain_tag == BEFORE_DRAIN else "pinned"
            out[f"{name}_costliest"] = _psql.costliest(
                times, _psql.statement_times(args.psql, args.url)
            )

        measure(BEFORE_DRAIN, BEFORE_PICKUP)
        out["before"] = _psql.table_health(args.psql, args.url)
        pin = _psql.SnapshotPin(args.psql, args.url)
        try:
            pinned_at = time.monotonic()
            per_batch = max(1, round(args.churn / 10))
            batches = 0
            while time.monotonic() < pinned_at + args.hold:
                workers.submit([job(CHURN) for _ in range(per_batch)])
                batches += 1
                time.sleep(max(0.0, pinned_at + batches / 10 - time.monotonic()))
            if not workers.settle(args.timeout):
                raise RuntimeError("the churn did not drain in time")
            out["backlog_s"] = time.monotonic() - pinned_at - args.hold
            out["churned"] = batches * per_batch
            out["pinned"] = _psql.table_health(args.psql, args.url)
            measure(PINNED_DRAIN, PINNED_PICKUP)
            out["held_s"] = time.monotonic() - pinned_at
        finally:
            pin.release()
        rec = workers.collect()
    for name, drain_tag, pickup_tag in (
        ("before", BEFORE_DRAIN, BEFORE_PICKUP),
        ("pinned", PINNED_DRAIN, PINNED_PICKUP),
    ):
        took = pickups_of(rec, pickup_tag)
        out[f"{name}_per_s"] = rate_of(starts_of(rec, drain_tag))
        out[f"{name}_pickup_p50_ms"] = common.percentile(took, 50) * 1e3
        out[f"{name}_pickup_p99_ms"] = common.percentile(took, 99) * 1e3
    out["ok"] = True
    return out


def versions(mod: Any, args: argparse.Namespace) -> dict[str, Any]:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in mod.PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "?"
    return out


PHASES = {
    "enqueue": enqueue,
    "drain": drain,
    "pickup": pickup,
    "lateness": lateness,
    "recovery": recovery,
    "idle": idle,
    "xmin": xmin,
    "versions": versions,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pg_driver")
    parser.add_argument("system")
    parser.add_argument("phase", choices=tuple(PHASES))
    parser.add_argument("--url", default="", help="the store's URL (its own fresh database)")
    parser.add_argument("--query-url", default="", help="the one-query handlers' database")
    parser.add_argument("--psql", default="psql")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--n-single", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--kind", choices=("noop", "query"), default="noop")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--hold", type=float, default=10.0)
    parser.add_argument("--churn", type=float, default=200.0)
    parser.add_argument("--pickups", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    os.environ.setdefault(common.ENV_URL, args.url)
    mod = load(args.system)
    if args.phase != "versions":
        mod.run(mod.install, args.url)
    print(json.dumps(PHASES[args.phase](mod, args)))


if __name__ == "__main__":
    main()
