"""Where a chain link's CPU goes, by process (issue 29): the chains workload
of ``benchmarks.workflows`` (10-link chains, one embedded worker, c=64, a
private redis-server) measured in CPU seconds instead of wall time.

On a shared VM the wall-clock rates swing from run to run, and two busy
processes may not get two cores (then a run's rate is one over the sum of
every process's CPU per link): CPU per link by process says what costs and
where. Per round, on one redis-server:

* ``plain``: ``--jobs`` pre-enqueued no-op jobs drained by one embedded
  worker: this process's CPU and the server's (``INFO cpu``) during the
  drain, per job (the enqueue not counted, as in ``benchmarks.workflows``);
* ``chains L`` for L = 5, 10, 20 links (``--links`` links in all, the
  producer in this process): CPU per link, this process and the server,
  and the fit ``per link = a + b / L`` over them (``b``: what a chain costs
  once, its start, its result read and its ends; ``a``: a link in the
  middle of a chain), with what the fit leaves per link at each L (a cost
  that grows with the chain, such as the continuation text each link
  carries, would show there);
* ``apart``: 10-link chains from a producer process of its own (as the
  peers are run): the worker's process, the producer's and the server's;
* ``short``: 10-link chains whose successors' continuations are stored as
  a short token (the text kept in this process, looked up when leased):
  an upper bound of what continuations that refer to a stored workflow
  could save, the cost of resolving a reference left out (an experiment:
  patches the Redis store's successor arguments and lease decoding in this
  process only)::

    python -m benchmarks.chain_costs [--rounds 2] [--jobs 20000] [--links 6000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from . import workflows
from ._proc import REPO
from ._redis import BenchRedis, open_redis

#: Chain lengths of the fit.
LENGTHS = (5, 10, 20)
#: A continuation longer than this is stored as a token by ``short``
#: (a flow's last step's, ``{"wf":ID}``, stays as it is: settle.lua reads it).
SHORT = 64


def server_cpu(redis: BenchRedis) -> float:
    info = redis.client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@contextlib.contextmanager
def short_continuations() -> Iterator[dict[str, str]]:
    """While open, a chain link's successor is stored with a short token
    (``{"r":"N"}``) in place of its continuation, the text kept in the
    returned dict, and a token read back (a leased job's, an outbox
    entry's when the settle could not store the successor) as that text:
    the record a reference to the stored workflow would make, with nothing
    paid to resolve it."""
    from chronos_trio.store.redis import _flow, _jobs

    kept: dict[str, str] = {}
    # the names settle and lease call (imported into _jobs by name)
    args_of = getattr(_jobs, "successor_args")  # noqa: B009
    then_of = getattr(_jobs, "then_of")  # noqa: B009
    text_of = getattr(_flow, "_text")  # noqa: B009 (the outbox's reading)

    def short_args(
        core: Any, successor: Any, lease: str = ""
    ) -> tuple[list[object], Any, str] | None:
        got: tuple[list[object], Any, str] | None = args_of(core, successor, lease)
        extras = got[0][8] if got is not None else None
        if isinstance(extras, str) and len(extras) > SHORT:
            head, _, then = extras.partition("\0")
            token = f'{{"r":"{len(kept)}"}}'
            kept[token] = then
            assert got is not None
            got[0][8] = f"{head}\0{token}"
        return got

    def long_then(extras: bytes | None) -> str | None:
        then = then_of(extras)
        return kept.get(then, then) if then is not None else None

    def long_text(value: bytes | str) -> str:
        text: str = text_of(value)
        return kept.get(text, text)

    patches = {
        (_jobs, "successor_args"): short_args,
        (_jobs, "then_of"): long_then,
        (_flow, "_text"): long_text,
    }
    undo = {where: getattr(*where) for where in patches}
    for (module, name), value in patches.items():
        setattr(module, name, value)
    try:
        yield kept
    finally:
        for (module, name), value in undo.items():
            setattr(module, name, value)


def _measured(
    redis: BenchRedis, fn: Callable[..., Awaitable[Any]], *args: Any
) -> tuple[Any, float, float]:
    """``trio.run(fn, url, *args)`` from an empty server: its result, this
    process's CPU and the server's, in seconds."""
    workflows.flushall(redis)
    s0, p0 = server_cpu(redis), time.process_time()
    out = trio.run(fn, redis.url, *args)
    return out, time.process_time() - p0, server_cpu(redis) - s0


async def _apart(url: str, c: int) -> tuple[float, float]:
    """workflows.chains_apart with the producer's CPU: links/s and the
    producer process's CPU seconds (its imports and start not counted)."""
    app = workflows._app(url, {})
    argv = [sys.executable, "-m", "benchmarks.chain_costs", "--produce", str(c), "--url", url]
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        done = await trio.run_process(
            argv, capture_stdout=True, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)}
        )
    await app.store.aclose()
    out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return float(out["links_per_s"]), float(out["cpu"])


def _produce(url: str, c: int) -> None:
    p0 = time.process_time()
    out = trio.run(workflows.produce_chains, url, c)
    print(json.dumps({**out, "cpu": time.process_time() - p0}))


def _round(redis: BenchRedis, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    us = 1e6
    row: dict[str, dict[str, float]] = {}
    rate, proc, server = _measured(redis, workflows.plain, args.jobs)
    # its enqueue taken off (as workflows times the drain alone): the CPU of
    # as many jobs enqueued the same way, left unrun
    enqueue_proc, enqueue_server = _enqueue_cost(redis, args.jobs)
    row["plain"] = {
        "rate": rate,
        "proc": (proc - enqueue_proc) / args.jobs * us,
        "server": (server - enqueue_server) / args.jobs * us,
    }
    for length in LENGTHS:
        workflows.LINKS = length
        c = args.links // length
        rate, proc, server = _measured(redis, workflows.chains, c)
        row[f"chains {length}"] = {
            "rate": rate, "proc": proc / (c * length) * us, "server": server / (c * length) * us
        }  # fmt: skip
    workflows.LINKS = 10
    c = args.links // 10
    with short_continuations() as kept:
        rate, proc, server = _measured(redis, workflows.chains, c)
    assert kept, "no continuation was stored short"
    row["short 10"] = {
        "rate": rate,
        "proc": proc / args.links * us,
        "server": server / args.links * us,
    }
    (rate, producer), proc, server = _measured(redis, _apart, c)
    links = (c + 1) * 10  # the producer's warm-up chain too
    row["apart 10"] = {
        "rate": rate, "proc": proc / links * us, "server": server / links * us,
        "producer": producer / links * us,
    }  # fmt: skip
    return row


def _enqueue_cost(redis: BenchRedis, n: int) -> tuple[float, float]:
    """This process's and the server's CPU for workflows.plain's enqueue of
    ``n`` jobs (its batches of 1,000), left in the store unrun."""

    async def enqueue(url: str) -> None:
        from chronos_trio import App
        from chronos_trio.store.redis import RedisStore

        app = App(RedisStore.from_url(url))

        @app.task("plain")
        async def plain_job(payload: int, job: Any) -> int:
            return payload + 1

        for start in range(0, n, 1000):
            await app.tasks["plain"].enqueue_many(list(range(start, min(n, start + 1000))))
        await app.store.aclose()

    _, proc, server = _measured(redis, lambda url: enqueue(url))
    return proc, server


def _fit(rows: list[dict[str, dict[str, float]]], key: str) -> tuple[float, float]:
    """Least squares of per-link CPU = a + b / L over every round's chains."""
    xs, ys = [], []
    for row in rows:
        for length in LENGTHS:
            xs.append(1 / length)
            ys.append(row[f"chains {length}"][key])
    b, a = statistics.linear_regression(xs, ys)
    return a, b


def report(rows: list[dict[str, dict[str, float]]]) -> str:
    def med(name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in rows if key in r[name])

    lines = [
        "| per job or link, CPU us (median of rounds) | worker's process | redis-server "
        "| producer apart | sum | links/s over plain jobs/s, same round |",
        "|---|---|---|---|---|---|",
    ]
    plain = med("plain", "proc") + med("plain", "server")
    for name in ("plain", *(f"chains {n}" for n in LENGTHS), "short 10", "apart 10"):
        proc, server = med(name, "proc"), med(name, "server")
        producer = med(name, "producer") if name == "apart 10" else 0.0
        ratio = statistics.median(r[name]["rate"] / r["plain"]["rate"] for r in rows)
        total = proc + server + producer
        lines.append(
            f"| {name} | {proc:.1f} | {server:.1f} | {producer:.1f} | {total:.1f} | {ratio:.2f}x |"
        )
    lines.append(f"plain job, worker + server: {plain:.1f} us")
    for key in ("proc", "server"):
        a, b = _fit(rows, key)
        left = ", ".join(f"L={n}: {med(f'chains {n}', key) - (a + b / n):+.1f}" for n in LENGTHS)
        lines.append(f"fit ({key}): a link {a:.1f} us + {b:.0f} us a chain / L; left: {left}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--links", type=int, default=6000, help="links per chains row")
    parser.add_argument("--produce", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce is not None:
        _produce(args.url, args.produce)
        return
    rows = []
    with open_redis() as redis:
        workflows.flushall(redis)
        trio.run(workflows.chains, redis.url, 20)  # scripts loaded, imports done
        for k in range(args.rounds):
            print(f"-- round {k + 1}/{args.rounds} ({workflows.loadavg()})", file=sys.stderr)
            rows.append(_round(redis, args))
    print(report(rows))
    print(f"/proc/loadavg at the end: {workflows.loadavg()}")


if __name__ == "__main__":
    main()
