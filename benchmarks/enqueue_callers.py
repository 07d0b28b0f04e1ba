"""Enqueue per caller (issue 27, item 1): one job per call and in batches,
chronos_trio from each of its three callers next to the peers' own calls
from the same kind of caller, in one run on one private redis-server.

Caller classes and contestants:

* ``sync`` (a Flask or Django view, a script): chronos_trio's
  ``SyncProducer.enqueue`` / ``enqueue_many``; huey's ``task(...)``;
  Dramatiq's ``actor.send(...)``;
* ``trio``: chronos_trio's ``await task.enqueue`` / ``enqueue_many``;
  streaQ's ``await task.enqueue`` / ``worker.enqueue_many`` on Trio;
* ``asyncio`` (FastAPI, aiohttp): chronos_trio's ``AsyncioProducer``;
  arq's ``enqueue_job``, SAQ's ``Queue.enqueue``, taskiq's ``kiq``, streaQ's
  ``task.enqueue`` / ``worker.enqueue_many`` on asyncio.

Each round of a contestant is one fresh process (ours in this interpreter,
a peer's in its own venv, ``python -m benchmarks.peers PEER callers``),
after ``FLUSHDB`` and ``SCRIPT FLUSH``: connect, ``--warmup`` single calls
and one batch untimed, then ``--n-single`` single calls, each timed, and
``--n-bulk`` jobs in batches of ``--batch`` (the same loops for everyone:
``benchmarks._common.run_caller``). The payload is the suite's usual one,
about 100 bytes (``benchmarks._common``), made once before the timed calls.
Rounds go A B C ... A B C ... so load that drifts falls on every contestant
alike; the table shows the median over rounds, the range, and each row's
ratio to huey's ``task()`` and to the best peer of its caller class.

    python -m benchmarks.enqueue_callers --runs 5 [--peers huey,arq,...] [--markdown]
    python -m benchmarks --enqueue-callers --runs 5     (the same)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import _common as common
from benchmarks._proc import REPO

OURS = "chronos_trio"
VENVS = REPO / "benchmarks" / ".venv"
RESULTS = REPO / "benchmarks" / "results"
#: (caller class, system), in the order a round runs them (and the table
#: lists them). Celery is left out: its venv is not among the ones made by
#: default for this benchmark (``--peers celery`` is refused).
CONTESTANTS: tuple[tuple[str, str], ...] = (
    ("sync", OURS),
    ("sync", "huey"),
    ("sync", "dramatiq"),
    ("trio", OURS),
    ("trio", "streaq"),
    ("asyncio", OURS),
    ("asyncio", "arq"),
    ("asyncio", "saq"),
    ("asyncio", "taskiq"),
    ("asyncio", "streaq"),
)
PEERS = tuple(dict.fromkeys(s for _, s in CONTESTANTS if s != OURS))
#: The reference every row is compared with (issue 27: ">= huey's task()").
REFERENCE = ("sync", "huey")
MODES = ("single", "bulk")


# -- chronos_trio's callers (run in this interpreter, one process per round) ---------------


class OursSync:
    """``SyncProducer(url, app=app).enqueue(task, payload)`` / ``enqueue_many``."""

    one_label = "SyncProducer.enqueue"
    many_label = "SyncProducer.enqueue_many"

    def open(self, url: str) -> None:
        from benchmarks.chronos_app import Bench, make_app
        from chronos_trio.producers import SyncProducer

        self.app, self.task = make_app(url)
        self.producer = SyncProducer(url, app=self.app)
        self.payload = Bench(sent_at=time.time())
        self.batch = [self.payload] * common.CALLER_BATCH

    def close(self) -> None:
        self.producer.close()

    def one(self) -> None:
        self.producer.enqueue(self.task, self.payload)

    def many(self, k: int) -> None:
        self.producer.enqueue_many(self.task, self.batch[:k])


class OursTrio:
    """``await task.enqueue(payload)`` / ``await task.enqueue_many(payloads)``."""

    one_label = "await task.enqueue"
    many_label = "await task.enqueue_many"

    async def open(self, url: str) -> None:
        from benchmarks.chronos_app import Bench, make_app

        self.app, self.task = make_app(url)
        self.payload = Bench(sent_at=time.time())
        self.batch = [self.payload] * common.CALLER_BATCH

    async def close(self) -> None:
        await self.app.aclose()

    async def one(self) -> None:
        await self.task.enqueue(self.payload)

    async def many(self, k: int) -> None:
        await self.task.enqueue_many(self.batch[:k])


class OursAsyncio:
    """``await AsyncioProducer(url, app=app).enqueue(task, payload)`` / ``enqueue_many``."""

    one_label = "await AsyncioProducer.enqueue"
    many_label = "await AsyncioProducer.enqueue_many"

    async def open(self, url: str) -> None:
        from benchmarks.chronos_app import Bench, make_app
        from chronos_trio.producers import AsyncioProducer

        self.app, self.task = make_app(url)
        self.producer = AsyncioProducer(url, app=self.app)
        self.payload = Bench(sent_at=time.time())
        self.batch = [self.payload] * common.CALLER_BATCH

    async def close(self) -> None:
        await self.producer.aclose()

    async def one(self) -> None:
        await self.producer.enqueue(self.task, self.payload)

    async def many(self, k: int) -> None:
        await self.producer.enqueue_many(self.task, self.batch[:k])


OUR_CALLERS: dict[str, Any] = {"sync": OursSync, "trio": OursTrio, "asyncio": OursAsyncio}


# -- the table (pure functions) --------------------------------------------------------------


def summarize(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (caller, system, mode) from the rounds' results.

    A round is ``{"caller", "system", "round", "one_label", "many_label",
    "single": figures, "bulk": figures or None}`` or, for a failed one,
    ``{"caller", "system", "round", "error"}`` (figures as
    ``benchmarks._common.run_caller`` makes them). A row holds the median
    over rounds of jobs/s, us per job, p50 per call and p50 per call over
    its jobs (``p50_job_us``), the lowest and highest jobs/s (``lo``,
    ``hi``) and per-job p50 (``p50_lo``, ``p50_hi``), the number of
    rounds, and ``label`` (the call); a contestant without a batch call
    gets a bulk row with ``jobs_per_s`` None; one whose every round failed,
    rows with ``error``. Rows come in the order contestants first appear,
    single before bulk."""
    order: list[tuple[str, str]] = []
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rounds:
        key = (r["caller"], r["system"])
        if key not in by:
            order.append(key)
            by[key] = []
        by[key].append(r)
    rows = []
    for caller, system in order:
        done = [r for r in by[(caller, system)] if not r.get("error")]
        errors = [r["error"] for r in by[(caller, system)] if r.get("error")]
        for mode in MODES:
            row: dict[str, Any] = {"caller": caller, "system": system, "mode": mode}
            if not done:
                row.update(label="", jobs_per_s=None, error=errors[0] if errors else "no rounds")
                rows.append(row)
                continue
            row["label"] = done[0]["one_label" if mode == "single" else "many_label"] or ""
            figures = [r[mode] for r in done if r.get(mode)]
            if not figures:
                row["jobs_per_s"] = None  # no batch call
                rows.append(row)
                continue
            rates = [f["jobs_per_s"] for f in figures]
            p50s = [f["p50_call_us"] / f["jobs_per_call"] for f in figures]
            row.update(
                jobs_per_s=statistics.median(rates),
                lo=min(rates),
                hi=max(rates),
                us_per_job=statistics.median(f["us_per_job"] for f in figures),
                p50_call_us=statistics.median(f["p50_call_us"] for f in figures),
                p50_job_us=statistics.median(p50s),
                p50_lo=min(p50s),
                p50_hi=max(p50s),
                rounds=len(figures),
                failed_rounds=len(errors),
            )
            rows.append(row)
    return rows


def _rate(row: dict[str, Any] | None, by: str = "mean") -> float | None:
    """``row``'s jobs/s (``by`` ``mean``: over the whole run) or the jobs/s
    its median call would give (``p50``: 1e6 / median us per job; calls the
    machine's load delayed drop out of it); None if missing."""
    if row is None or row.get("error"):
        return None
    if by == "p50":
        p50 = row.get("p50_job_us")
        rate = 1e6 / p50 if isinstance(p50, int | float) and p50 > 0 else None
    else:
        rate = row.get("jobs_per_s")
    if rate is None or (isinstance(rate, float) and math.isnan(rate)) or rate <= 0:
        return None
    return float(rate)


def _sends(
    rows: Sequence[dict[str, Any]], caller: str, system: str, mode: str, by: str
) -> tuple[float | None, bool]:
    """How fast ``system`` sends jobs from ``caller`` in ``mode``: its rate
    (see :func:`_rate`), and whether that is its single-call rate standing in
    for a batch call it does not have (its N jobs are then N calls)."""
    found = {r["mode"]: r for r in rows if r["caller"] == caller and r["system"] == system}
    bulk = found.get("bulk")
    if mode == "bulk" and bulk and not bulk.get("error") and bulk.get("jobs_per_s") is None:
        return _rate(found.get("single"), by), True
    return _rate(found.get(mode), by), False


#: The two measures every ratio is given in, and the suffix of its keys.
MEASURES = (("mean", ""), ("p50", "_p50"))


def add_ratios(
    rows: Sequence[dict[str, Any]], reference: tuple[str, str] = REFERENCE
) -> list[dict[str, Any]]:
    """``rows`` (from :func:`summarize`) with two ratios of speed each, in
    two measures: jobs/s over the run (keys as below) and the jobs/s of the
    median call (the same keys ending ``_p50``, see :func:`_rate`):

    * ``vs_ref``: over the reference contestant's (huey's ``task()`` from
      sync code) in the same mode; for bulk, where huey has no batch call,
      over its single calls (``vs_ref_single`` True): N jobs are N calls;
    * ``vs_best``: over the best peer (any system but chronos_trio) of the
      row's own caller class in the same mode, named in ``best_peer``; a
      peer without a batch call counts in bulk at its single-call rate
      (``best_single`` True then). A peer's own row is compared with the
      best peer too (1.0 for the best one).

    Above 1: the row is faster. A ratio is None where either figure is
    missing. Pure: no I/O."""
    systems = sorted({(r["caller"], r["system"]) for r in rows})
    out = []
    for row in rows:
        new = dict(row)
        for by, suffix in MEASURES:
            new.update({f"vs_ref{suffix}": None, f"vs_ref_single{suffix}": False})
            new.update({f"vs_best{suffix}": None, f"best_peer{suffix}": None})
            new[f"best_single{suffix}"] = False
            rate = _rate(row, by)
            if rate is None:
                continue
            ref, ref_single = _sends(rows, *reference, row["mode"], by)
            if ref:
                new.update({f"vs_ref{suffix}": rate / ref, f"vs_ref_single{suffix}": ref_single})
            peers = [
                (best, single, system)
                for caller, system in systems
                if caller == row["caller"] and system != OURS
                for best, single in [_sends(rows, caller, system, row["mode"], by)]
                if best
            ]
            if peers:
                best, single, name = max(peers, key=lambda p: p[0] or 0.0)
                assert best
                new.update({f"vs_best{suffix}": rate / best, f"best_peer{suffix}": name})
                new[f"best_single{suffix}"] = single
        out.append(new)
    return out


def _num(value: float | None, spec: str) -> str:
    return "" if value is None else spec.format(value)


def _ratio(value: float | None, marked: bool, name: str | None = None) -> str:
    if value is None:
        return ""
    text = f"{value:.2f}x" + ("*" if marked else "")
    return f"{text} ({name})" if name else text


def table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells for rows from :func:`add_ratios`; ``*`` marks a
    ratio over a single-call rate standing in for a missing batch call."""
    headers = [
        "caller", "system", "call", "jobs/s", "range (jobs/s)", "us/job", "p50 us/job (range)",
        "vs huey task()", "(p50)", "vs best peer, same caller", "(p50)",
    ]  # fmt: skip
    body = []
    for r in rows:
        cells = [r["caller"], r["system"], r["label"] or "(none)"]
        if r.get("error"):
            cells += [f"FAILED: {r['error']}"] + [""] * 7
        elif r.get("jobs_per_s") is None:
            cells += ["no batch call"] + [""] * 7
        else:
            cells += [
                _num(r["jobs_per_s"], "{:,.0f}"),
                f"{r['lo']:,.0f}-{r['hi']:,.0f}",
                _num(r["us_per_job"], "{:.1f}"),
                f"{r['p50_job_us']:,.1f} ({r['p50_lo']:,.1f}-{r['p50_hi']:,.1f})",
                _ratio(r["vs_ref"], r["vs_ref_single"]),
                _ratio(r["vs_ref_p50"], r["vs_ref_single_p50"]),
                _ratio(r["vs_best"], r["best_single"], r["best_peer"]),
                _ratio(r["vs_best_p50"], r["best_single_p50"], r["best_peer_p50"]),
            ]
        body.append(cells)
    return headers, body


def render(rows: Sequence[dict[str, Any]], fmt: Callable[[list[str], list[list[str]]], str]) -> str:
    """One table per mode (one job per call, then batches)."""
    parts = []
    for mode, title in (("single", "one job per call"), ("bulk", "batches")):
        headers, body = table([r for r in rows if r["mode"] == mode])
        parts.append(f"{title}:\n{fmt(headers, body)}")
    return "\n\n".join(parts)


# -- running -------------------------------------------------------------------------------


def peer_python(peer: str) -> Path:
    return VENVS / peer / "bin" / "python"


def _last_json(stdout: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def one_round(caller: str, system: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One contestant's round in a process of its own; its figures, or
    ``error`` (a failed round is reported, not hidden)."""
    sizes = ["--n-single", str(args.n_single), "--batch", str(args.batch)]
    sizes += ["--warmup", str(args.warmup)]
    if system == OURS:
        argv = [sys.executable, "-m", "benchmarks.enqueue_callers", "--run-ours", caller]
        argv += ["--url", url, "--n-bulk", str(args.n_bulk), *sizes]
    else:
        argv = [str(peer_python(system)), "-m", "benchmarks.peers", system, "callers"]
        argv += ["--caller", caller, "--url", url, "--n", str(args.n_bulk), *sizes]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=args.limit, cwd=str(REPO),
            env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.limit:g} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {last[:160]}"}
    return _last_json(proc.stdout)


def contestants(peers: Sequence[str]) -> list[tuple[str, str]]:
    """The contestants of ``peers`` (and ours), in round order."""
    return [(c, s) for c, s in CONTESTANTS if s == OURS or s in peers]


def run_rounds(args: argparse.Namespace, url: str, flush: Callable[[], None]) -> dict[str, Any]:
    """Every contestant ``args.runs`` times, interleaved; the raw rounds and
    the 1-minute load average before each."""
    who = contestants(args.peers)
    rounds: list[dict[str, Any]] = []
    loads: list[float] = []
    for i in range(args.runs):
        for caller, system in who:
            flush()
            loads.append(os.getloadavg()[0])
            print(f"-- round {i + 1}/{args.runs}: {system} ({caller})", file=sys.stderr, flush=True)
            result = one_round(caller, system, url, args)
            rounds.append({"caller": caller, "system": system, "round": i, **result})
            if result.get("error"):
                print(f"   failed: {result['error']}", file=sys.stderr, flush=True)
    return {"rounds": rounds, "loads": loads}


def _footer(m: dict[str, Any]) -> str:
    """How a run was made, from its JSON's ``meta``."""
    loads = m["loadavg1_rounds"]
    return (
        f"{m['runs']} rounds each, interleaved; {m['n_single']:,} single calls and "
        f"{m['n_bulk']:,} jobs in batches of {m['batch']:,} per round; redis-server "
        f"{m['redis_server']}; commit {m['commit']}; load (1 min) over the rounds "
        f"{loads['min']:.2f}/{loads['median']:.2f}/{loads['max']:.2f} (min/median/max) "
        f"on {m['cpus']} CPUs; {m['seconds']} s"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring); ``--peers`` is a
    comma-separated list (an unknown peer is an error)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.enqueue_callers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="rounds per contestant")
    parser.add_argument("--n-single", type=int, default=2_000, help="single calls per round")
    parser.add_argument("--n-bulk", type=int, default=20_000, help="jobs in batches per round")
    parser.add_argument("--batch", type=int, default=common.CALLER_BATCH, help="jobs per batch")
    parser.add_argument("--warmup", type=int, default=200, help="untimed single calls first")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per round, at most")
    parser.add_argument("--out", type=Path, default=RESULTS / "enqueue_callers.json")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument(
        "--render", type=Path, help="print the tables of an earlier run's JSON (--out); run nothing"
    )
    parser.add_argument("--run-ours", choices=common.CALLER_CLASSES, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.peers = [p for p in args.peers.split(",") if p]
    unknown = set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s): {', '.join(sorted(unknown))} (known: {', '.join(PEERS)})")
    for name in ("runs", "n_single", "n_bulk", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.run_ours:  # one round of ours, in this process
        result = common.run_caller(
            OUR_CALLERS[args.run_ours], args.run_ours, args.url, args.n_single, args.n_bulk,
            args.batch, args.warmup,
        )  # fmt: skip
        print(json.dumps(result))
        return 0
    from benchmarks import report

    fmt = report.markdown_table if args.markdown else report.text_table
    if args.render:  # an earlier run's rounds, summed up again
        doc = json.loads(args.render.read_text())
        print(render(add_ratios(summarize(doc["rounds"])), fmt))
        print(f"\n{_footer(doc['meta'])}")
        return 0
    missing = [p for p in args.peers if not peer_python(p).exists()]
    if missing:
        print(f"no venv for {', '.join(missing)} (python -m benchmarks --setup-peers): skipped",
              file=sys.stderr)  # fmt: skip
        args.peers = [p for p in args.peers if p not in missing]
    from benchmarks._redis import open_redis

    started = time.monotonic()
    load_start = os.getloadavg()
    with open_redis() as redis:
        raw = run_rounds(args, redis.url, redis.flush)
        server = redis.version()
    rows = add_ratios(summarize(raw["rounds"]))
    loads = raw["loads"]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
        check=False,
    ).stdout.strip()  # fmt: skip
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "argv": list(sys.argv[1:] if argv is None else argv),
        "runs": args.runs,
        "n_single": args.n_single,
        "n_bulk": args.n_bulk,
        "batch": args.batch,
        "warmup": args.warmup,
        "redis_server": server,
        "cpus": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "loadavg1_rounds": {
            "min": min(loads),
            "median": statistics.median(loads),
            "max": max(loads),
        },
        "seconds": round(time.monotonic() - started, 1),
    }
    doc = {"meta": meta, "rows": rows, "rounds": raw["rounds"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(render(rows, fmt))
    print(f"\n{_footer(meta)}; {args.out}")
    # a peer's failure shows in the table; ours fails the command
    return 1 if any(r["system"] == OURS and r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
