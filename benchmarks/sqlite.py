"""``python -m benchmarks --sqlite``: the SQLite benchmark, one run.

Every contestant in one run, each phase on a fresh directory of its own on
one local disk (``--dir``, default the system's temporary directory; it
must not be a tmpfs, or no commit waits for the disk): our SQLite store
(``App("sqlite:///DIR/jobs.db")``), and the SQLite peers huey
(``SqliteHuey``) and persist-queue (``SQLiteAckQueue``), each in its own
virtual environment (``--setup-peers``) where it installs. Each phase is
one ``benchmarks.sqlite_driver`` run in the contestant's own interpreter;
see that module for what each phase measures, and
``benchmarks.sqlite_systems`` for the handler (the same in every system:
its start recorded, then 1 ms of the system's own sleep).

Sizes are small by default (a few minutes on 2 cores); ``--full`` is the
long form, ``--tiny`` the smoke test's. Prints tables and the issue's
targets, writes JSON with the machine's load (``os.getloadavg``) during
the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._proc import REPO
from benchmarks.postgres import _cell, _f, _finish, _sample_load, _save, log, setup_peers
from benchmarks.sqlite_systems import IO_WAIT, SQLITE_PEERS

VENVS = REPO / "benchmarks" / ".venv"
RESULTS = REPO / "benchmarks" / "results"
OURS = {
    "chronos": "chronos_trio (SQLite)",
    "chronos_full": "chronos_trio (SQLite, synchronous=full)",
}
#: URL options of our contestants beyond the defaults (``chronos_full``: an
#: fsync per commit, as huey's and persist-queue's SQLite defaults do).
QUERY = {"chronos_full": "synchronous=full"}
LABELS = {
    **OURS,
    "huey_sqlite": "huey (SqliteHuey)",
    "persistqueue": "persist-queue (SQLiteAckQueue)",
}
SYSTEMS = (*OURS, *SQLITE_PEERS)
#: Who runs unless ``--systems`` says: our default (``synchronous=normal``)
#: and ``synchronous=full``, the peers' durability, side by side.
DEFAULT_SYSTEMS = ("chronos", "chronos_full", *SQLITE_PEERS)
PHASES = ("enqueue", "drain", "pickup", "lateness", "recovery", "idle")
#: The drains: (worker processes, concurrency of each).
DRAINS = ((1, 16), (1, 64), (4, 16))


def drain_key(processes: int, concurrency: int) -> str:
    return f"drain {processes}x c={concurrency}"


class Sizes:
    """Each phase's size: ``tiny`` (the smoke test), default, ``full``."""

    def __init__(self, size: str) -> None:
        pick = {"tiny": 0, "default": 1, "full": 2}[size]

        def of(*values: Any) -> Any:
            return values[pick]

        self.n_single = of(20, 300, 2_000)
        self.n_bulk = of(200, 2_000, 20_000)
        self.drain = of(200, 5_000, 20_000)
        self.drains = DRAINS
        self.io_wait = IO_WAIT
        self.pickup = of(10, 50, 500)
        self.pickup_rate = of(20.0, 50.0, 100.0)
        self.late = of(20, 200, 1_000)
        # long enough for a peer that enqueues one job per transaction
        # (about 200/s with synchronous=FULL) to store them all before the first is due
        self.late_delay = of(1.0, 3.0, 10.0)
        self.late_spread = of(0.5, 1.0, 1.0)
        self.recovery = of(4, 16, 64)
        self.lease = of(1.0, 2.0, 5.0)
        self.idle = of(1.0, 10.0, 30.0)
        self.timeout = of(30.0, 120.0, 300.0)


# -- contestants ---------------------------------------------------------------------------


def python_of(system: str) -> Path:
    if system in OURS:
        return Path(sys.executable)
    return VENVS / system / "bin" / "python"


def module_of(system: str) -> str:
    return "chronos" if system in OURS else system


def env_of(system: str) -> dict[str, str]:
    """The driver's environment (our URL options in ``BENCH_SQLITE_QUERY``,
    read by ``benchmarks.sqlite_systems.chronos``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if system in QUERY:
        env["BENCH_SQLITE_QUERY"] = QUERY[system]
    return env


def drive(root: Path, system: str, phase: str, limit: float, **opts: Any) -> dict[str, Any]:
    """One driver run of ``phase`` by ``system`` in a fresh directory under ``root``."""
    python = python_of(system)
    if not python.exists():
        raise RuntimeError("not installed (python -m benchmarks --sqlite --setup-peers)")
    directory = Path(tempfile.mkdtemp(prefix=f"{system}-{phase}-", dir=root))
    try:
        argv = [str(python), "-m", "benchmarks.sqlite_driver", module_of(system), phase]
        argv += ["--url", str(directory)]
        for k, v in opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=limit,
            cwd=str(REPO),
            env=env_of(system),
            check=False,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {last[:200]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- the run ---------------------------------------------------------------------------------


def plan_of(s: Sizes, phases: list[str]) -> list[tuple[str, str, float, dict[str, Any]]]:
    """(phase, key, time limit, driver options), in run order."""
    plan: list[tuple[str, str, float, dict[str, Any]]] = []
    if "enqueue" in phases:
        plan.append(("enqueue", "enqueue", 900, {"n": s.n_bulk, "n_single": s.n_single}))
    if "drain" in phases:
        for processes, c in s.drains:
            opts = {"n": s.drain, "processes": processes, "concurrency": c, "kind": "io"}
            opts["timeout"] = s.timeout
            plan.append(("drain", drain_key(processes, c), s.timeout + 180, opts))
    if "pickup" in phases:
        opts = {"n": s.pickup, "rate": s.pickup_rate, "timeout": s.timeout}
        plan.append(("pickup", "pickup", s.timeout + 120, opts))
    if "lateness" in phases:
        opts = {"n": s.late, "delay": s.late_delay, "spread": s.late_spread}
        plan.append(("lateness", "lateness", s.timeout + 120, {**opts, "timeout": s.timeout}))
    if "recovery" in phases:
        opts = {"n": s.recovery, "lease": s.lease, "timeout": s.timeout}
        plan.append(("recovery", "recovery", s.timeout + 180, opts))
    if "idle" in phases:
        plan.append(("idle", "idle", s.idle + 120, {"seconds": s.idle}))
    return plan


def suite(args: argparse.Namespace, root: Path) -> dict[str, dict[str, Any]]:
    """Figures by system, then by phase setting."""
    s = Sizes(args.size)
    out: dict[str, dict[str, Any]] = {system: {} for system in args.systems}
    for phase, key, limit, opts in plan_of(s, args.phases):
        for system in args.systems:
            log(f"-- {key}: {LABELS[system]}")
            t = time.monotonic()
            try:
                row = drive(root, system, phase, limit, **opts)
            except Exception as exc:  # a failed run is reported, not hidden
                row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                log(f"   failed: {row['error']}")
            row["run_s"] = round(time.monotonic() - t, 1)
            row["loadavg1"] = os.getloadavg()[0]
            out[system][key] = row
            _save(args.out.with_suffix(".partial.json"), {"results": out})
    return out


# -- tables ---------------------------------------------------------------------------------


def _drain_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    if "error" in row:
        return "failed"
    text = _f(row.get("jobs_per_s"))
    if row.get("duplicates"):
        text += f" ({row['duplicates']} ran twice)"
    if not row.get("ok", True):
        missing = row.get("expected", 0) - row.get("completed", 0)
        text += f" ({missing} never ran)" if missing > 0 else " (incomplete)"
    return text


def _late_cell(row: dict[str, Any] | None) -> str:
    if row is not None and row.get("skipped"):
        return f"- ({row['skipped']})"
    return _cell(row, "p50_ms", "p99_ms", spec=",.0f")


def _recovery_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    if "error" in row:
        return "failed"
    how = row.get("mechanism")
    if how == "none":
        again, n, watched = row.get("recovered", 0), row.get("expected"), row.get("watched_s")
        return f"lost: {again} of {n} ran again in {watched:g} s"
    text = f"{_f(row.get('first_s'), '.2f')} / {_f(row.get('all_s'), '.2f')}"
    if not row.get("ok", True):
        text += f" ({row.get('recovered', 0)} of {row.get('expected')} in time)"
    if row.get("duplicates"):
        text += f" ({row['duplicates']} ran twice)"
    if how == "lease":
        return text + f" (lease {row['lease_s']:g} s)"
    return text + " (a new worker started at the kill)"


def tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    results = doc["results"]
    sizes = doc["meta"]["sizes"]
    throughput, latency = [], []
    for system, rows in results.items():
        label = LABELS[system]
        throughput.append(
            [
                label,
                _cell(rows.get("enqueue"), "single_per_s"),
                _cell(rows.get("enqueue"), "bulk_per_s")
                + (
                    " (1 at a time)"
                    if rows.get("enqueue", {}).get("bulk_call") == "one at a time"
                    else ""
                ),
                *(_drain_cell(rows.get(drain_key(p, c))) for p, c in DRAINS),
            ]
        )
        latency.append(
            [
                label,
                _cell(rows.get("pickup"), "p50_ms", "p99_ms", spec=",.1f"),
                _late_cell(rows.get("lateness")),
                _recovery_cell(rows.get("recovery")),
                _cell(rows.get("idle"), "cpu_ms_per_s", spec=".1f"),
            ]
        )
    io_ms = sizes["io_wait"] * 1e3
    return [
        (
            f"Enqueue and drain, jobs/s (each handler sleeps {io_ms:g} ms)",
            [
                "system",
                "enqueue 1 at a time",
                f"bulk ({sizes['n_bulk']:,})",
                f"drain 1 process c=16 ({sizes['drain']:,})",
                "1 process c=64",
                "4 processes c=16 each",
            ],
            throughput,
        ),
        (
            "Latency, recovery, idle cost",
            [
                "system",
                "pickup p50 / p99 ms",
                "delayed lateness p50 / p99 ms",
                "recovery after kill -9: first / all s",
                "idle worker CPU ms/s",
            ],
            latency,
        ),
    ]


def targets(doc: dict[str, Any]) -> list[str]:
    """The issue's targets against this run's figures (lines of text)."""
    ours = doc["results"].get("chronos", {})
    huey = doc["results"].get("huey_sqlite", {})

    def rate(rows: dict[str, Any], key: str) -> float:
        row = rows.get(key) or {}
        value = row.get("jobs_per_s")
        return float(value) if row.get("ok") and isinstance(value, int | float) else math.nan

    one = max(rate(ours, drain_key(1, 16)), rate(ours, drain_key(1, 64)))
    lines = [f"our drain, one process (best of c=16, c=64): {_f(one)} jobs/s (target >= 10,000)"]
    for c in (16, 64):
        ratio = rate(ours, drain_key(1, c)) / rate(huey, drain_key(1, c))
        lines.append(
            f"ours / huey's SQLite storage, drain c={c}: {_f(ratio, '.1f')}x (target >= 3x)"
        )
    four, single = rate(ours, drain_key(4, 16)), rate(ours, drain_key(1, 16))
    lines.append(
        f"our drain, 4 processes / 1 (c=16 each): {_f(four / single, '.2f')}x (target: more than 1)"
    )
    return lines


def render(doc: dict[str, Any], markdown: bool = False) -> str:
    from benchmarks.report import markdown_table, text_table

    parts = []
    for title, headers, body in tables(doc):
        if not any(cell for row in body for cell in row[1:]):
            continue  # no phase of this table ran
        parts.append(f"### {title}" if markdown else f"== {title}")
        parts.append((markdown_table if markdown else text_table)(headers, body))
        parts.append("")
    if "chronos" in doc["results"]:
        parts.append("### Targets" if markdown else "== Targets")
        parts.extend(f"- {line}" for line in targets(doc))
        parts.append("")
    m = doc["meta"]["machine"]
    during = m.get("loadavg1_during", {})
    parts.append(
        f"load average (1 min) at start {m['loadavg_start'][0]:.2f}, during "
        f"min {_f(during.get('min'), '.2f')} / median {_f(during.get('median'), '.2f')} / "
        f"max {_f(during.get('max'), '.2f')}, at end {m['loadavg_end'][0]:.2f} "
        f"on {m['cpus']} CPUs; files on {m.get('filesystem', '?')}"
    )
    return "\n".join(parts)


# -- main -------------------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """The type of the filesystem ``path`` is on (``/proc/mounts``), or ``?``."""
    best, kind = "", "?"
    real = str(path.resolve())
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and real.startswith(fields[1]) and len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def versions(systems: list[str], root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"sqlite (ours)": sqlite3.sqlite_version}
    for system in systems:
        python = python_of(system)
        if not python.exists():
            out[system] = {"error": "not installed"}
            continue
        proc = subprocess.run(
            [
                str(python),
                "-m",
                "benchmarks.sqlite_driver",
                module_of(system),
                "versions",
                "--url",
                str(root),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(REPO),
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
        try:
            out[system] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            out[system] = {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks --sqlite", description=__doc__.split("\n")[0]
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--full", dest="size", action="store_const", const="full", help="20,000-job drains"
    )
    size.add_argument(
        "--tiny", dest="size", action="store_const", const="tiny", help="the smoke test's sizes"
    )
    parser.set_defaults(size="default")
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)}",
    )
    parser.add_argument("--no-peers", action="store_true", help="only our store")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the runs' files go (a local disk)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "sqlite.json")
    parser.add_argument("--setup-peers", action="store_true", help="make the peers' venvs")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.phases = [p for p in args.phases.split(",") if p]
    unknown = set(args.systems) - set(SYSTEMS) | set(args.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown system(s)/phase(s): {', '.join(sorted(unknown))}")
    if args.no_peers:
        args.systems = [s for s in args.systems if s in OURS]
    if args.setup_peers:
        failed = setup_peers([s for s in args.systems if s in SQLITE_PEERS])
        return 1 if failed else 0
    missing = [s for s in args.systems if not python_of(s).exists()]
    for system in missing:
        log(f"{system}: not installed (python -m benchmarks --sqlite --setup-peers): skipped")
    args.systems = [s for s in args.systems if s not in missing]

    started = time.monotonic()
    loads: list[float] = []
    stop = threading.Event()
    threading.Thread(target=_sample_load, args=(loads, stop), daemon=True).start()
    root = Path(tempfile.mkdtemp(prefix="sqlite-bench-", dir=args.dir))
    doc: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "size": args.size,
            "sizes": vars(Sizes(args.size)),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=REPO,
                check=False,
            ).stdout.strip(),
            "not_installed": missing,
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "filesystem": filesystem_of(root),
                "loadavg_start": os.getloadavg(),
            },
        }
    }
    try:
        doc["meta"]["versions"] = versions(args.systems, root)
        doc["results"] = suite(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stop.set()
    return _finish(doc, loads, started, args.out, render, LABELS, OURS)


if __name__ == "__main__":
    sys.exit(main())
