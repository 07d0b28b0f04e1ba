"""Workflow benchmarks (issue 14), beside a plain drain in the same run:

* plain: ``N`` pre-enqueued jobs drained by one embedded worker (c=64);
* chains: ``C`` 10-link chains started at once, each link passing its
  result on: links/s, and its ratio to the plain drain's jobs/s; twice:
  sent from the worker's own process, and from a producer process of its
  own (as the peers' chains are sent: their producer is never their
  worker's process);
* fan-out: one group of ``M`` members and a callback (a chord): the
  callback's start after the last member finished (latency), and members/s.

Handlers do nothing but return (the cost measured is the queue's). Each row
starts from an empty private redis-server (never a shared one)::

    python -m benchmarks.workflows [--jobs 20000] [--chains 500] [--members 1000] [--runs 3]
        [--peers celery,dramatiq] [--peer-timeout 300]

Peers, in the same run (after ours in each run, FLUSHALL before each of
their workloads): Celery's ``chain``/``chord`` and Dramatiq's
``pipeline``/``group`` with a completion callback, the same three workloads,
each in the peer's own venv (``python -m benchmarks --setup-peers``) through
``benchmarks.peers.flows`` (a worker process of the peer's own CLI, c=64
threads; settings in ``benchmarks/peers/celery_flows.py`` and
``dramatiq_flows.py``). ``--peers`` defaults to those whose venv exists; one
without a venv is skipped with a note. A peer's run stops after
``--peer-timeout`` s: what completed by then is reported, marked incomplete.

The methods differ where a peer's worker is another process: a peer's plain
drain counts from its first handler start to its last (its worker's start-up
excluded, as in ``python -m benchmarks``), ours from the worker's start to the
last job done; chains and the chord are timed the same way for all (the
worker started and warmed up first; chains from before the first send to
the last result read by the producer; the chord from the handlers' own
timestamps). Ratios are chronos_trio/peer: above 1 is ours ahead for the
rates, below 1 for the latency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from chronos_trio import App, JobContext, chain, group
from chronos_trio.store.redis import RedisStore

from ._proc import REPO
from ._redis import BenchRedis, open_redis

LINKS = 10


def _app(url: str, marks: dict[str, float]) -> App:
    app = App(RedisStore.from_url(url))

    @app.task("link")
    async def link(payload: int, job: JobContext) -> int:
        return payload + 1

    @app.task("member")
    async def member(payload: int, job: JobContext) -> int:
        marks["last_member"] = time.perf_counter()
        return payload

    @app.task("callback")
    async def callback(payload: list[int], job: JobContext) -> int:
        marks["callback"] = time.perf_counter()
        return len(payload)

    return app


async def plain(
    url: str, n: int, around: contextlib.AbstractContextManager[object] | None = None
) -> float:
    """``n`` pre-enqueued jobs drained by one embedded worker (c=64): jobs/s
    from the worker's start to the last job done; ``around`` (e.g. a
    measurement, ``benchmarks.chain_wall``) is entered around the drain."""
    done = trio.Event()
    count = 0
    app = App(RedisStore.from_url(url))

    @app.task("plain")
    async def plain_job(payload: int, job: JobContext) -> int:
        nonlocal count
        count += 1
        if count == n:
            done.set()
        return payload + 1

    task = app.tasks["plain"]
    for start in range(0, n, 1000):
        await task.enqueue_many(list(range(start, min(n, start + 1000))))
    with around or contextlib.nullcontext():
        t0 = time.perf_counter()
        async with app.open_worker(concurrency=64, poll_interval=0.05):
            with trio.fail_after(300):
                await done.wait()
            took = time.perf_counter() - t0
    await app.store.aclose()
    return n / took


async def chains(url: str, c: int) -> float:
    marks: dict[str, float] = {}
    app = _app(url, marks)
    link = app.tasks["link"]
    flow = chain(link.s(0), *(link.s() for _ in range(LINKS - 1)))
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        t0 = time.perf_counter()
        started = [await app.enqueue_workflow(flow) for _ in range(c)]
        with trio.fail_after(600):
            for wf in started:
                assert await wf.result(timeout=300) == LINKS
        took = time.perf_counter() - t0
    await app.store.aclose()
    return c * LINKS / took


async def produce_chains(url: str, c: int) -> dict[str, float]:
    """The producer's side of :func:`chains_apart`, in its own process (as
    the peers' producers are): one chain sent and read first (warm-up), then
    ``c`` chains sent one by one and each result read; links/s over that."""
    app = _app(url, {})
    link = app.tasks["link"]
    flow = chain(link.s(0), *(link.s() for _ in range(LINKS - 1)))
    with trio.fail_after(600):
        assert await (await app.enqueue_workflow(flow)).result(timeout=300) == LINKS
        t0 = time.perf_counter()
        started = [await app.enqueue_workflow(flow) for _ in range(c)]
        for wf in started:
            assert await wf.result(timeout=300) == LINKS
        took = time.perf_counter() - t0
    await app.store.aclose()
    return {"links_per_s": c * LINKS / took}


async def chains_apart(url: str, c: int) -> float:
    """:func:`chains` with the producer in a process of its own (the worker
    embedded here, as for the plain drain): how the peers' chains are run
    (their producer and worker are separate processes)."""
    app = _app(url, {})
    argv = [sys.executable, "-m", "benchmarks.workflows", "--produce-chains", str(c), "--url", url]
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        done = await trio.run_process(
            argv, capture_stdout=True, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)}
        )
    await app.store.aclose()
    figure: float = json.loads(done.stdout.decode().strip().splitlines()[-1])["links_per_s"]
    return figure


async def fan_out(url: str, m: int) -> tuple[float, float]:
    marks: dict[str, float] = {}
    app = _app(url, marks)
    member, callback = app.tasks["member"], app.tasks["callback"]
    flow = chain(group(*(member.s(k) for k in range(m))), callback.s())
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        t0 = time.perf_counter()
        wf = await app.enqueue_workflow(flow)
        with trio.fail_after(600):
            assert await wf.result(timeout=300) == m
    await app.store.aclose()
    return (marks["callback"] - marks["last_member"]) * 1000, m / (marks["last_member"] - t0)


# -- peers ------------------------------------------------------------------------------------

PEERS = ("celery", "dramatiq")
VENVS = REPO / "benchmarks" / ".venv"
RESULTS = REPO / "benchmarks" / "results" / "workflows.json"  # gitignored
OURS = "chronos_trio"
#: How each system writes the workload (the table's "how" column).
HOW = {
    OURS: {
        "plain": "`task.enqueue_many`, embedded worker",
        "chains": "`chain(link.s(0), link.s(), ...)`",
        "chains_apart": "the same, sent from a producer process of its own",
        "chord": "`chain(group(*members), callback.s())`",
    },
    "celery": {
        "plain": "`add.delay(k)`, `--pool threads`",
        "chains": "`chain(add.s(0), add.s(), ...)`",
        "chord": "`chord([member.s(k) ...])(callback.s())`",
    },
    "dramatiq": {
        "plain": "`add.send(k)`, `--threads 64`",
        "chains": "`pipeline([add.message(0), ...])`",
        "chord": "`group([...]).add_completion_callback(cb.message())`: "
        "**the callback gets no member results**",
    },
}


def peer_python(peer: str) -> Path:
    return VENVS / peer / "bin" / "python"


def run_peer(peer: str, workload: str, url: str, n: int, timeout: float) -> dict[str, Any]:
    """One run of ``peer``'s ``workload`` in its venv. The driver stops by
    itself after ``timeout`` s (reporting what completed); past another
    2 minutes (its sends, its worker's start) it gets SIGTERM (it then stops
    its worker), then SIGKILL."""
    argv = [
        str(peer_python(peer)), "-m", "benchmarks.peers.flows", peer, workload,
        "--url", url, "--n", str(n), "--timeout", str(timeout),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    limit = timeout + 120
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise RuntimeError(f"stopped after {limit:.0f} s") from None
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {last[:160]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def flushall(redis: BenchRedis) -> None:
    redis.client.flushall()
    redis.client.script_flush()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# -- the run and its table ----------------------------------------------------------------------

#: The table's rows: (workload key, figure key, higher is better).
FIGURES = (
    ("plain", "jobs_per_s", True),
    ("chains", "links_per_s", True),
    ("chains_apart", "links_per_s", True),
    ("chord", "latency_ms", False),
    ("chord", "members_per_s", True),
)


def _ours(redis: BenchRedis, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    flushall(redis)
    plain_ = trio.run(plain, redis.url, args.jobs)
    flushall(redis)
    links = trio.run(chains, redis.url, args.chains)
    flushall(redis)
    apart = trio.run(chains_apart, redis.url, args.chains)
    flushall(redis)
    latency, per_s = trio.run(fan_out, redis.url, args.members)
    return {
        "plain": {"jobs_per_s": plain_, "ok": True},
        "chains": {"links_per_s": links, "ok": True},
        "chains_apart": {"links_per_s": apart, "ok": True},
        "chord": {"latency_ms": latency, "members_per_s": per_s, "ok": True},
    }


def _theirs(redis: BenchRedis, args: argparse.Namespace, peer: str) -> dict[str, dict[str, Any]]:
    out = {}
    sizes = {"plain": args.jobs, "chains": args.chains, "chord": args.members}
    for workload, n in sizes.items():
        flushall(redis)
        t = time.monotonic()
        try:
            out[workload] = run_peer(peer, workload, redis.url, n, args.peer_timeout)
        except Exception as exc:  # a failed run is reported, not hidden
            out[workload] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        log(f"   {peer} {workload}: {time.monotonic() - t:.1f} s, {out[workload]}")
    return out


def _median(runs: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in runs if isinstance(r.get(key), int | float)]
    vals = [v for v in vals if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def _incomplete(runs: list[dict[str, Any]]) -> str:
    """What a peer's runs that did not complete did, for the table."""
    notes = []
    for r in runs:
        if r.get("error") and "expected" not in r:
            notes.append(r["error"][:80])
        elif not r.get("ok", True):
            done = r.get("completed", r.get("chains_done", r.get("members_run")))
            notes.append(f"{done:,}/{r['expected']:,} done")
    return f" (incomplete: {'; '.join(notes)})" if notes else ""


def table(
    results: dict[str, list[dict[str, dict[str, Any]]]], args: argparse.Namespace
) -> list[str]:
    labels = {
        "jobs_per_s": f"plain drain, {args.jobs:,} no-op jobs, c=64: jobs/s",
        "links_per_s": f"{args.chains} chains of {LINKS} links at once: links/s",
        "latency_ms": f"group of {args.members:,} + callback: callback start after the "
        "last member, ms (lower is better)",
        "members_per_s": f"group of {args.members:,} + callback: members/s",
    }
    fmt = {"jobs_per_s": "{:,.0f}", "links_per_s": "{:,.0f}", "latency_ms": "{:.1f}",
           "members_per_s": "{:,.0f}"}  # fmt: skip
    lines = [
        "| workload | system | how | figure | vs its plain drain | chronos/peer |",
        "|---|---|---|---|---|---|",
    ]
    for workload, key, _higher in FIGURES:
        ours = _median([r[workload] for r in results[OURS]], key)
        for system, runs in results.items():
            if workload not in HOW[system]:
                continue  # ours only: the peers' chains are sent from a process of their own
            wl = [r[workload] for r in runs]
            value = _median(wl, key)
            base = _median([r["plain"] for r in runs], "jobs_per_s")
            cell = "failed" if math.isnan(value) else fmt[key].format(value)
            cell += _incomplete(wl)
            vs_plain = f"{value / base:.2f}x" if key.endswith("_per_s") and base > 0 else ""
            if math.isnan(value) or math.isnan(base):
                vs_plain = ""
            ratio = "" if system == OURS or math.isnan(value) else f"{ours / value:.2f}x"
            lines.append(
                f"| {labels[key]} | {system} | {HOW[system][workload]} | {cell} | {vs_plain} "
                f"| {ratio} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--peers", default=None, help=f"comma-separated, of {','.join(PEERS)}; '' for none "
        "(default: those whose venv exists)",
    )  # fmt: skip
    parser.add_argument("--peer-timeout", type=float, default=300.0,
                        help="seconds a peer's run may take (then: what completed)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="every run's figures (JSON)")
    parser.add_argument("--produce-chains", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce_chains:  # the producer process of chains_apart
        print(json.dumps(trio.run(produce_chains, args.url, args.produce_chains)))
        return
    wanted = list(PEERS) if args.peers is None else [p for p in args.peers.split(",") if p]
    unknown = set(wanted) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s): {', '.join(sorted(unknown))}")
    notes = []
    peers = []
    for peer in wanted:
        if peer_python(peer).exists():
            peers.append(peer)
        else:
            notes.append(f"{peer} skipped: no venv (python -m benchmarks --setup-peers "
                         f"--peers {peer})")  # fmt: skip
    for note in notes:
        log(note)
    load_start = loadavg()
    started = time.monotonic()
    results: dict[str, list[dict[str, dict[str, Any]]]] = {OURS: [], **{p: [] for p in peers}}
    with open_redis() as redis:
        versions = {"redis-server": redis.version()}
        for peer in peers:
            with_ver = subprocess.run(
                [str(peer_python(peer)), "-m", "benchmarks.peers.flows", peer, "versions"],
                capture_output=True, text=True, cwd=str(REPO), check=False,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )  # fmt: skip
            versions[peer] = with_ver.stdout.strip() or with_ver.stderr.strip()[-200:]
        for i in range(args.runs):
            log(f"-- run {i + 1}/{args.runs}: chronos_trio (load {loadavg()})")
            results[OURS].append(_ours(redis, args))
            log(f"   {results[OURS][-1]}")
            for peer in peers:
                log(f"-- run {i + 1}/{args.runs}: {peer} (load {loadavg()})")
                results[peer].append(_theirs(redis, args, peer))
    load_end = loadavg()
    doc = {
        "argv": sys.argv[1:],
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "seconds": round(time.monotonic() - started, 1),
        "versions": versions,
        "notes": notes,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=str))
    print(f"runs: {args.runs} (median shown; every run in {args.out}); "
          f"{doc['seconds']} s; versions: {versions}")  # fmt: skip
    print(f"/proc/loadavg at start: {load_start}; at end: {load_end} ({os.cpu_count()} CPUs)")
    for note in notes:
        print(f"note: {note}")
    print("\n".join(table(results, args)))


if __name__ == "__main__":
    main()
