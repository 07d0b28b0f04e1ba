"""``python -m benchmarks.startup_instructions``: worker start-up counted in
instructions (callgrind), spawn to first job, for chronos_trio (this
checkout, or ``--trees A:B``) and Dramatiq.

Wall time on a loaded, shared VM is noise; the instructions a process runs
from its spawn to its first handler are not. Each run: a private
redis-server, flushed, its scripts flushed (a fresh server), one job
waiting; then the worker command runs under ``valgrind --tool=callgrind``
and its first handler calls ``os._exit(0)``, so the count stops there
(callgrind writes its totals at exit).

* chronos_trio: ``python -m chronos_trio worker APP --concurrency 16`` on
  the benchmark's app (``benchmarks.chronos_app``: six tasks, an attrs
  payload), one process, on ``benchmarks._plain``'s interpreter (as the
  start-up workload runs it; ``--editable``: on this one).
  Its cache of the code attrs compiles (``chronos_trio._code_cache``) is a
  fresh directory per checkout, filled by ``--warm-starts`` uncounted
  starts first (4; the figures are those of a worker that has started
  before: a class whose generated ``__hash__`` holds a type hash of a
  length no earlier start had still misses now and then, see the module);
  ``--cold``: without the cache.
* Dramatiq: ``dramatiq benchmarks.peers.dramatiq_bench --processes 1
  --threads 16``. Its CLI forks a worker process; the figure is the main
  process up to that fork (``--dump-before=fork``: its first part file)
  plus the worker process from the fork to its first handler. What the main
  process does after the fork (logging pipes, waiting on the worker) runs
  beside the worker and is not counted: it is printed apart.

Bytecode is compiled first (``compile_bytecode``), as the start-up
workload does. Needs valgrind and, for Dramatiq, its venv (``python -m
benchmarks --setup-peers --peers dramatiq``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.__main__ import REPO, compile_bytecode, peer_python
from benchmarks._plain import plain_python
from benchmarks._redis import BenchRedis, open_redis

#: The benchmark's app with its handlers ending the process at the first job.
OURS_APP = """
import os

import benchmarks.chronos_app as bench


class _Exit:
    def record(self, *args):
        os._exit(0)


bench.recorder = lambda: _Exit()
app = bench.app
"""

#: Dramatiq's benchmark module, its handlers ending the worker at the first job.
DRAMATIQ_APP = """
import os

import benchmarks.peers.dramatiq_bench as bench
from benchmarks.peers.dramatiq_bench import *  # noqa: F403  (the broker, the actors)


class _Exit:
    def record(self, *args):
        os._exit(0)


bench.recorder = lambda: _Exit()
"""

_ENQUEUE_OURS = (
    "import sys, trio; from benchmarks import chronos_bench as cb\n"
    "async def main():\n"
    "    app, task = cb.make_app(sys.argv[1])\n"
    "    await task.enqueue(cb.Bench(sent_at=0.0))\n"
    "    await app.aclose()\n"
    "trio.run(main)\n"
)

_ENQUEUE_DRAMATIQ = (
    "import benchmarks.peers.dramatiq_bench as d; from benchmarks._common import PAD_PEER\n"
    "d.noop.send(0.0, 0.0, 0.0, PAD_PEER); d.broker.close()\n"
)

_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def instructions(path: Path) -> int:
    """The instruction total of one callgrind output file."""
    match = _TOTALS.search(path.read_bytes())
    if match is None:
        raise RuntimeError(f"no totals in {path}")
    return int(match.group(1))


def _fresh(redis: BenchRedis) -> None:
    redis.flush()
    redis.client.script_flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    proc = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]}: exit {proc.returncode}: {proc.stderr[-600:]}")


def ours(
    tree: Path, redis: BenchRedis, tmp: Path, python: str, code_cache: str, *, counted: bool = True
) -> int:
    """Instructions of ``python -m chronos_trio worker`` (the checkout at
    ``tree``, run by ``python``, its attrs code cache in ``code_cache``, or
    ``off``), spawn to first job; ``counted=False``: the same start without
    callgrind (to fill the cache), 0."""
    (tmp / "cg_ours_app.py").write_text(OURS_APP)
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tmp}", "BENCH_REDIS_URL": redis.url}
    env["CHRONOS_CODE_CACHE"] = code_cache
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    _fresh(redis)
    _run([sys.executable, "-c", _ENQUEUE_OURS, redis.url], env, tree)
    redis.client.script_flush()
    out = tmp / "ours.cg"
    argv = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
        python, "-m", "chronos_trio", "worker", "cg_ours_app:app", "--concurrency", "16",
    ]  # fmt: skip
    if not counted:
        _run(argv[3:], env, tmp)
        return 0
    _run(argv, env, tmp)
    return instructions(out)


def dramatiq(redis: BenchRedis, tmp: Path) -> tuple[int, int, int]:
    """Dramatiq's (main process to its fork, worker to its first job, the
    main process after the fork)."""
    (tmp / "cg_dramatiq_app.py").write_text(DRAMATIQ_APP)
    python = peer_python("dramatiq")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp}", "BENCH_REDIS_URL": redis.url}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    _fresh(redis)
    _run([str(python), "-c", _ENQUEUE_DRAMATIQ], env, REPO)
    out = tmp / "dramatiq"
    out.mkdir()
    argv = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p",
        "--dump-before=fork", str(python.parent / "dramatiq"), "cg_dramatiq_app",
        "--processes", "1", "--threads", "16",
    ]  # fmt: skip
    _run(argv, env, tmp)
    files = sorted(out.iterdir())
    parts = [f for f in files if f.name.count(".") == 2]  # cg.PID.N: the dumps before fork
    mains = {f.name.split(".")[1] for f in parts}
    if len(mains) != 1:
        raise RuntimeError(f"expected one main process with part files: {files}")
    (main_pid,) = mains
    first_part = min(parts, key=lambda f: int(f.name.split(".")[2]))
    before_fork = instructions(first_part)
    after_fork = instructions(out / f"cg.{main_pid}") + sum(
        instructions(f) for f in parts if f != first_part
    )
    workers = [f for f in files if f.name.count(".") == 1 and f.name != f"cg.{main_pid}"]
    worker = sum(instructions(f) for f in workers)
    return before_fork, worker, after_fork


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.startup_instructions", description=__doc__
    )
    parser.add_argument("--trees", default=str(REPO), help="checkouts, ':'-separated")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-dramatiq", action="store_true")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="ours without its attrs code cache (CHRONOS_CODE_CACHE=off); by default each "
        "checkout's cache is a fresh directory that --warm-starts uncounted starts fill first",
    )
    parser.add_argument(
        "--warm-starts",
        type=int,
        default=4,
        help="uncounted starts that fill each checkout's fresh code cache first (default 4)",
    )
    parser.add_argument(
        "--editable",
        action="store_true",
        help="run ours on this interpreter (its editable install), not benchmarks._plain's",
    )
    args = parser.parse_args(argv)
    python = sys.executable if args.editable else plain_python()
    trees = [Path(t).resolve() for t in args.trees.split(":") if t]
    with_dramatiq = not args.no_dramatiq and peer_python("dramatiq").exists()
    compile_bytecode(["dramatiq"] if with_dramatiq else [])
    for tree in trees:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "chronos_trio")],
            stdout=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    with open_redis() as redis, tempfile.TemporaryDirectory(prefix="cg-code-") as codes:
        caches = {tree: "off" if args.cold else f"{codes}/{i}" for i, tree in enumerate(trees)}
        for _ in range(0 if args.cold else args.warm_starts):
            for tree in trees:
                with tempfile.TemporaryDirectory(prefix="cg-startup-") as tmp:
                    ours(tree, redis, Path(tmp), python, caches[tree], counted=False)
        for i in range(args.runs):
            for tree in trees:
                with tempfile.TemporaryDirectory(prefix="cg-startup-") as tmp:
                    n = ours(tree, redis, Path(tmp), python, caches[tree])
                print(f"run {i + 1}: chronos_trio {tree}: {n / 1e6:,.1f}M", flush=True)
            if with_dramatiq:
                with tempfile.TemporaryDirectory(prefix="cg-startup-") as tmp:
                    before, worker, after = dramatiq(redis, Path(tmp))
                print(
                    f"run {i + 1}: dramatiq: {(before + worker) / 1e6:,.1f}M "
                    f"(main to fork {before / 1e6:,.1f}M + worker to first job "
                    f"{worker / 1e6:,.1f}M; main after the fork, not counted: "
                    f"{after / 1e6:,.1f}M)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
