"""Wall time of one awaited enqueue from asyncio, one at a time, in
interleaved rounds: ``AsyncioProducer.enqueue`` of each tree given, beside
arq's own ``ArqRedis.enqueue_job`` (its peer venv) when present.

Each round runs every system once, in a rotating order, in a process of its
own against one private redis-server (emptied before each run): a warm-up,
then ``n`` awaited enqueues timed together. The report gives each system's
median and best microseconds per enqueue over the rounds, and the load
average before and after (wall time on a shared machine moves with it;
``benchmarks.hotpath`` counts instructions instead)::

    python -m benchmarks.asyncio_enqueue --trees /path/to/old:/path/to/new \\
        [--rounds 9] [--n 2000] [--loop asyncio|uvloop]

Only the standard library is imported here at the top: the measured
processes import their own system (a tree's ``chronos_trio`` through
``PYTHONPATH``, or arq in its venv).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ARQ_PYTHON = HERE.parent / ".venv" / "arq" / "bin" / "python"
WARM_UP = 200


def _loop_factory(loop: str) -> object:
    if loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def _chronos(n: int, url: str, loop: str) -> float:
    """Microseconds per awaited ``AsyncioProducer.enqueue``."""
    import attrs

    import chronos_trio
    from chronos_trio.producers import AsyncioProducer

    @attrs.frozen
    class Payload:
        to: str
        subject: str
        n: int

    app = chronos_trio.App()

    @app.task("bench.job")
    async def job(p: Payload, ctx: chronos_trio.JobContext) -> None:
        return None

    payloads = [Payload("someone@example.com", "hello", i) for i in range(WARM_UP + n)]

    async def main() -> float:
        async with AsyncioProducer(url, app=app) as producer:
            for p in payloads[:WARM_UP]:
                await producer.enqueue("bench.job", p)
            started = time.perf_counter()
            for p in payloads[WARM_UP:]:
                await producer.enqueue("bench.job", p)
            return (time.perf_counter() - started) / n * 1e6

    with asyncio.Runner(loop_factory=_loop_factory(loop)) as runner:  # type: ignore[arg-type]
        return runner.run(main())


def _arq(n: int, url: str, loop: str) -> float:
    """Microseconds per awaited ``ArqRedis.enqueue_job`` (arq's defaults)."""
    from arq import create_pool  # type: ignore[import-not-found]
    from arq.connections import RedisSettings  # type: ignore[import-not-found]

    payloads = [
        {"to": "someone@example.com", "subject": "hello", "n": i} for i in range(WARM_UP + n)
    ]

    async def main() -> float:
        pool = await create_pool(RedisSettings.from_dsn(url))
        try:
            for p in payloads[:WARM_UP]:
                await pool.enqueue_job("bench.job", p)
            started = time.perf_counter()
            for p in payloads[WARM_UP:]:
                await pool.enqueue_job("bench.job", p)
            return (time.perf_counter() - started) / n * 1e6
        finally:
            await pool.aclose()

    with asyncio.Runner(loop_factory=_loop_factory(loop)) as runner:  # type: ignore[arg-type]
        return runner.run(main())


def _measure(system: str, tree: Path | None, n: int, url: str, loop: str) -> float:
    subprocess.run(["redis-cli", "-u", url, "FLUSHALL"], check=True, capture_output=True)
    env = dict(os.environ, PYTHONHASHSEED="0")
    python = sys.executable
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    else:
        python = str(ARQ_PYTHON)
    argv = [python, str(HERE), "--run", system, "--n", str(n), "--url", url, "--loop", loop]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(HERE.parent.parent), help="tree[:tree...]")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--n", type=int, default=2000, help="timed enqueues per run")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--no-arq", action="store_true", help="leave arq out")
    parser.add_argument("--run", choices=("chronos", "arq"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run = _chronos if args.run == "chronos" else _arq
        print(f"{run(args.n, args.url, args.loop):.3f}")
        return
    systems: list[tuple[str, str, Path | None]] = [
        (Path(t).resolve().name, "chronos", Path(t).resolve()) for t in args.trees.split(":")
    ]
    arq_ok = not args.no_arq and ARQ_PYTHON.exists()
    if arq_ok and args.loop == "uvloop":
        probe = subprocess.run([str(ARQ_PYTHON), "-c", "import uvloop"], capture_output=True)
        arq_ok = probe.returncode == 0
    if arq_ok:
        systems.append(("arq", "arq", None))
    sys.path.insert(0, str(HERE.parent.parent))
    from chronos_trio.testing.redis_server import RedisServer

    took: dict[str, list[float]] = {label: [] for label, _, _ in systems}
    print(f"before: {_load()}", flush=True)
    with RedisServer() as server:
        for r in range(args.rounds):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            for label, system, tree in order:
                took[label].append(_measure(system, tree, args.n, server.url, args.loop))
            print(
                f"round {r + 1}: "
                + "  ".join(f"{label} {took[label][-1]:.1f}" for label, _, _ in systems),
                flush=True,
            )
    print(f"after: {_load()}")
    print(f"us per awaited enqueue ({args.loop} loop; {args.rounds} rounds of {args.n})")
    print(f"{'system':<20}{'median':>10}{'best':>10}")
    for label, _, _ in systems:
        print(f"{label:<20}{statistics.median(took[label]):>10.1f}{min(took[label]):>10.1f}")


if __name__ == "__main__":
    main()
