"""``python -m benchmarks.startup``: worker start-up, chronos_trio and its
peers in interleaved rounds.

Each round runs every system once, in turn (chronos_trio, then each peer),
on one private redis-server flushed before each run: one job is enqueued,
then the worker CLI is spawned, and the figure is seconds from the spawn to
the handler's first start. Interleaving puts load that drifts over the
minutes on every system alike. The runs themselves are the benchmark
runner's own (``chronos_bench.startup`` and each peer's ``startup``
workload, after the same bytecode compilation and one uncounted warm-up
launch each), so the figures are those of ``python -m benchmarks
--workloads startup``; only the order differs.

Prints one row per system: median, min, max and the spread (max - min) over
the rounds, and the ratio of each median to chronos_trio's. ``--json PATH``
also writes every run. ``--baseline DIR``: another checkout of the project
(e.g. main, its bytecode compiled) runs as ``chronos_trio@baseline`` in the
same rounds, for a before/after that load cannot tilt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import chronos_bench as cb
from benchmarks.__main__ import compile_bytecode, peer_python, run_peer
from benchmarks._redis import BenchRedis, open_redis

OURS = "chronos_trio"
BASELINE = "chronos_trio@baseline"

#: One run of the start-up workload by the checkout in the working directory.
_BASELINE_RUN = (
    "import json, sys; from benchmarks import chronos_bench as cb; "
    "print(json.dumps(cb.run(cb.startup, sys.argv[1], int(sys.argv[2]), 60)))"
)


def baseline_run(tree: Path, url: str, concurrency: int) -> dict[str, Any]:
    """One start-up run by the checkout at ``tree`` (its own benchmark code
    and package, this interpreter)."""
    proc = subprocess.run(
        [sys.executable, "-c", _BASELINE_RUN, url, str(concurrency)],
        capture_output=True, text=True, timeout=120, cwd=str(tree),
        env={**os.environ, "PYTHONPATH": str(tree)}, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"baseline: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def one_run(
    system: str, redis: BenchRedis, concurrency: int, baseline: Path | None = None
) -> float:
    """Seconds from spawn to the first job handled, one run of ``system``."""
    redis.flush()
    if system == BASELINE:
        assert baseline is not None
        result = baseline_run(baseline, redis.url, concurrency)
    elif system == OURS:
        result = cb.run(cb.startup, redis.url, concurrency, 60)
    else:
        result = run_peer(system, "startup", redis.url, 120, concurrency=concurrency, timeout=60)
    if not result.get("ok", True):
        raise RuntimeError(f"{system}: the first job was not handled in time")
    return float(result["startup_s"])


def summary(times: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "spread": max(times) - min(times),
    }


def table(results: dict[str, list[float]]) -> str:
    ours = statistics.median(results[OURS]) if results.get(OURS) else float("nan")
    lines = [
        "| system | median s | min s | max s | spread s | runs | ours / it |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, times in results.items():
        s = summary(times)
        ratio = ours / s["median"] if s["median"] else float("nan")
        lines.append(
            f"| {system} | {s['median']:.3f} | {s['min']:.3f} | {s['max']:.3f} | "
            f"{s['spread']:.3f} | {len(times)} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--peers", default="dramatiq,huey", help="comma-separated ('' for none)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout, run as chronos_trio@baseline"
    )
    args = parser.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    missing = [p for p in peers if not peer_python(p).exists()]
    if missing:
        parser.error(f"no venv for {', '.join(missing)} (python -m benchmarks --setup-peers)")
    systems = [OURS, *([BASELINE] if args.baseline else []), *peers]
    if args.baseline:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(args.baseline / "chronos_trio")],
            stdout=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    results: dict[str, list[float]] = {s: [] for s in systems}
    load = [os.getloadavg()[0]]
    with open_redis() as redis:
        compile_bytecode(peers)
        for system in systems:  # warm-up: page cache, bytecode; not counted
            with contextlib.suppress(Exception):
                one_run(system, redis, args.concurrency, args.baseline)
        for i in range(args.rounds):
            for system in systems:
                results[system].append(one_run(system, redis, args.concurrency, args.baseline))
            load.append(os.getloadavg()[0])
            print(f"round {i + 1}/{args.rounds}: " + ", ".join(
                f"{s} {results[s][-1]:.3f}" for s in systems), file=sys.stderr)  # fmt: skip
    print(table(results))
    print(f"load average (1 min) over the runs: {min(load):.2f}-{max(load):.2f}")
    if args.json:
        out: dict[str, Any] = {"runs": results, "load": load}
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
