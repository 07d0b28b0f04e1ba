"""``python -m benchmarks.peers.flows PEER WORKLOAD [options]``: one run of a
peer's workflow workload (``benchmarks.workflows``), one JSON line.

Run with the peer's own interpreter (``benchmarks/.venv/PEER/bin/python``);
the peer's module is ``benchmarks.peers.PEER_flows`` (its app, tasks, worker
command, and how its users send a chain and a chord). Its worker runs as its
own CLI (``benchmarks.peers.__main__.Workers``), one process at ``--concurrency``.

* ``plain``: ``--n`` jobs sent, then the worker starts; jobs/s from the first
  handler start to the last (each handler records its start: the same method
  as the peers' drain in ``python -m benchmarks``);
* ``chains``: the worker started and warmed up (one job's result read back),
  ``--n`` chains of :data:`LINKS` links sent at once, then each chain's result
  waited for, the peer's way; links/s from before the first send to the last
  result read (as chronos_trio's ``benchmarks.workflows.chains``);
* ``chord``: warmed up the same way, one group of ``--n`` members and a
  callback; the callback's start (written to Redis by the callback) after the
  last member's handler ran (recorded by the handlers), and members/s from
  before the send to the last member.

Everything is bounded by ``--timeout``: what completed by then is reported
(``ok`` false). SIGTERM stops the worker before exiting.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LINKS = 10
#: Where a chord's callback writes its start (wall time) and what it saw.
CALLBACK_KEY = "bench:flows:callback"
#: Threads sending the plain drain's jobs (not timed).
SENDERS = 16


def callback_mark(client: Any, results: int) -> None:
    """From the callback's handler: its start and the member results it got."""
    client.set(CALLBACK_KEY, json.dumps({"at": time.time(), "results": results}))


def _workers(mod: Any, args: argparse.Namespace, out: Path) -> Any:
    from benchmarks.peers.__main__ import Workers

    workers = Workers(mod, args.url, out)
    workers.start(args.concurrency, 1)
    return workers


def _warm(mod: Any, workers: Any) -> None:
    try:
        mod.warm_up(60.0)
    except Exception as exc:
        raise RuntimeError(f"warm-up failed ({exc!r}): {workers.log_tail()}") from exc


def plain(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from benchmarks import _common as common

    n = args.n
    with ThreadPoolExecutor(SENDERS) as pool:
        list(pool.map(mod.send_plain, range(n)))
    workers = _workers(mod, args, out)
    try:
        ok = workers.wait(n, args.timeout)
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    span = rec["last"] - rec["first"]
    return {
        "jobs_per_s": (rec["count"] - 1) / span if span > 0 else math.nan,
        "completed": rec["count"],
        "expected": n,
        "ok": ok and rec["count"] >= n,
    }


def chains(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from benchmarks import _common as common

    c = args.n
    workers = _workers(mod, args, out)
    done, error = 0, ""
    try:
        _warm(mod, workers)
        deadline = time.monotonic() + args.timeout
        t0 = time.time()
        handles = [mod.start_chain() for _ in range(c)]
        sent = time.time()
        for handle in handles:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                value = mod.chain_result(handle, left)
            except Exception as exc:  # a timeout: what completed is reported
                error = f"{type(exc).__name__}: {str(exc)[:100]}"
                break
            if value != LINKS:
                raise RuntimeError(f"a chain returned {value!r}, not {LINKS}")
            done += 1
        t1 = time.time()
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    return {
        "links_per_s": done * LINKS / (t1 - t0),
        "chains_done": done,
        "links_run": rec["count"],
        "expected": c,
        "send_s": sent - t0,
        "last_link_s": rec["last"] - t0 if rec["count"] else math.nan,
        "ok": done == c,
        **({"error": error} if error else {}),
    }


def chord(mod: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from benchmarks import _common as common

    m = args.n
    workers = _workers(mod, args, out)
    error = ""
    try:
        _warm(mod, workers)
        client = mod.redis_client()
        t0 = time.time()
        handle = mod.start_chord(m)
        sent = time.time()
        try:
            value = mod.chord_result(handle, args.timeout)
        except Exception as exc:
            value, error = None, f"{type(exc).__name__}: {str(exc)[:100]}"
        raw = client.get(CALLBACK_KEY)
        mark = json.loads(raw) if raw else None
        rec = common.merge(common.collect(out))
    finally:
        workers.stop()
    last = rec["last"] if rec["count"] else math.nan
    return {
        "latency_ms": (mark["at"] - last) * 1000 if mark else math.nan,
        "members_per_s": rec["count"] / (last - t0) if rec["count"] else math.nan,
        "members_run": rec["count"],
        "expected": m,
        "callback_results": mark["results"] if mark else None,
        "callback_value": value,
        "send_s": sent - t0,
        "ok": mark is not None and rec["count"] >= m,
        **({"error": error} if error else {}),
    }


def _stop_on_term(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the workers' stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.flows")
    parser.add_argument("peer")
    parser.add_argument("workload", choices=("plain", "chains", "chord", "versions"))
    parser.add_argument("--url", default="")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop_on_term)
    from benchmarks import _common as common

    # The peer's module builds its app at import, from the environment.
    os.environ[common.ENV_URL] = args.url or "redis://127.0.0.1:1/0"
    mod = importlib.import_module(f"benchmarks.peers.{args.peer}_flows")
    if args.workload == "versions":
        from benchmarks.peers.__main__ import versions

        print(json.dumps(versions(mod)))
        return
    fn = {"plain": plain, "chains": chains, "chord": chord}[args.workload]
    try:
        with tempfile.TemporaryDirectory(prefix=f"flows-{args.peer}-") as tmp:
            result = fn(mod, args, Path(tmp))
    finally:
        gc.collect()  # e.g. Celery's AsyncResult.__del__ unsubscribes: not at exit
        mod.close()
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
