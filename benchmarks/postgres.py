"""``python -m benchmarks --postgres``: the PostgreSQL benchmark, one run.

Every contestant on ONE private PostgreSQL cluster
(``chronos_trio.testing.postgres_server``, never the shared server on 5432)
with ``pg_stat_statements`` loaded, each run on a fresh database of its own
(dropped after it): our PostgreSQL store, our Redis store (a private
redis-server; its one-query handlers query the same cluster), and the
PostgreSQL peers procrastinate, PgQueuer, SAQ's PostgreSQL queue and oban
(the Python port), each in its own virtual environment
(``--setup-peers``) where it installs. Each phase is one
``benchmarks.pg_driver`` run in the contestant's own interpreter; see that
module for what each phase measures.

Sizes are small by default (a few minutes on 2 cores); ``--full`` is the
long form (the pinned-xmin phase holds its snapshot for 5 minutes),
``--tiny`` the smoke test's. Prints tables, writes JSON with the machine's
load (``os.getloadavg``) during the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmarks import _psql
from benchmarks._proc import REPO
from benchmarks.pg_systems import PEER_PYTHON, PG_PEERS

VENVS = REPO / "benchmarks" / ".venv"
RESULTS = REPO / "benchmarks" / "results"
#: Our contestants: label, module, store.
OURS = {"pg": "chronos_trio (PostgreSQL)", "redis": "chronos_trio (Redis)"}
LABELS = {
    **OURS,
    "procrastinate": "procrastinate",
    "pgqueuer": "PgQueuer",
    "saq_pg": "SAQ (PostgreSQL)",
    "oban": "oban (Python)",
}
SYSTEMS = (*OURS, *PG_PEERS)
PHASES = ("enqueue", "drain", "pickup", "lateness", "recovery", "idle", "xmin")


class Sizes:
    """Each phase's size: ``tiny`` (the smoke test), default, ``full``."""

    def __init__(self, size: str) -> None:
        pick = {"tiny": 0, "default": 1, "full": 2}[size]

        def of(*values: Any) -> Any:
            return values[pick]

        self.n_single = of(20, 300, 2_000)
        self.n_bulk = of(200, 2_000, 20_000)
        self.drain = of(200, 2_000, 20_000)
        self.drain_settings = ((16, "noop"), (64, "noop"), (16, "query"), (64, "query"))
        self.pickup = of(10, 50, 500)
        self.pickup_rate = of(20.0, 50.0, 100.0)
        self.late = of(20, 200, 1_000)
        self.late_delay = of(0.5, 1.0, 2.0)
        self.late_spread = of(0.5, 1.0, 1.0)
        self.recovery = of(4, 16, 64)
        self.lease = of(1.0, 2.0, 5.0)
        self.idle = of(1.0, 10.0, 30.0)
        self.xmin_hold = of(2.0, 15.0, 300.0)
        self.xmin_churn = of(100.0, 200.0, 500.0)
        self.xmin_batch = of(100, 1_000, 5_000)
        self.xmin_pickups = of(10, 50, 200)
        self.timeout = of(30.0, 60.0, 300.0)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- contestants ---------------------------------------------------------------------------


def python_of(system: str) -> Path:
    if system in OURS:
        return Path(sys.executable)
    return VENVS / system / "bin" / "python"


def base_python(peer: str) -> str:
    """The interpreter a peer's venv is made from: ours, or the version it
    needs (``PEER_PYTHON``) found on PATH or among pyenv's versions."""
    name = PEER_PYTHON.get(peer)
    if name is None:
        return sys.executable
    version = name.removeprefix("python")
    candidates = [
        name,
        *sorted(map(str, Path.home().glob(f".pyenv/versions/{version}*/bin/{name}")), reverse=True),
    ]
    for candidate in candidates:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([candidate, "--version"], capture_output=True, timeout=30)
            if done.returncode == 0:
                return candidate
    raise RuntimeError(f"{peer} needs {name}, which is not installed")


def setup_peers(peers: list[str]) -> dict[str, str]:
    """Each peer's venv from ``benchmarks/peers/requirements-PEER.txt``;
    what failed and why, by peer."""
    failed = {}
    for peer in peers:
        venv = VENVS / peer
        try:
            base = base_python(peer)
            if not python_of(peer).exists():
                log(f"creating {venv} ({base})")
                subprocess.run([base, "-m", "venv", str(venv)], check=True)
            req = REPO / "benchmarks" / "peers" / f"requirements-{peer}.txt"
            subprocess.run(
                [str(python_of(peer)), "-m", "pip", "install", "-q", "-r", str(req)], check=True
            )
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            failed[peer] = f"{type(exc).__name__}: {exc}"
            log(f"{peer}: not installed: {failed[peer]}")
    return failed


class Cluster:
    """The run's PostgreSQL cluster and redis-server, a fresh database per run."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._count = 0

    def __enter__(self) -> Cluster:
        from chronos_trio.testing.postgres_server import PostgresServer
        from chronos_trio.testing.redis_server import RedisServer

        settings = {
            "shared_preload_libraries": "'pg_stat_statements'",
            "pg_stat_statements.track_utility": "off",
        }
        self.pg = self._stack.enter_context(PostgresServer(settings=settings))
        self.redis = self._stack.enter_context(RedisServer())
        self.psql = str(self.pg.bindir / "psql")
        # every database made from template1 has the view
        _psql.query(
            self.psql,
            self.pg.url_for("template1"),
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
        )
        self.query_url = self.pg.create_database("handlers")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def database(self, system: str) -> Iterator[str]:
        """A fresh database for one run (``system``'s store URL in it; our
        Redis store gets the flushed redis-server instead)."""
        self._count += 1
        name = f"run{self._count}_{system}"
        url = self.pg.create_database(name)
        try:
            if system == "redis":
                import redis

                client = redis.Redis.from_url(self.redis.url)
                client.flushall()
                client.close()
                yield self.redis.url
            else:
                yield url
        finally:
            with contextlib.suppress(Exception):
                _psql.query(
                    self.psql, self.pg.url_for("postgres"), f'DROP DATABASE "{name}" WITH (FORCE)'
                )

    def version(self) -> str:
        return _psql.query(self.psql, self.query_url, "SHOW server_version")[0][0]


def drive(cluster: Cluster, system: str, phase: str, limit: float, **opts: Any) -> dict[str, Any]:
    """One driver run of ``phase`` by ``system`` on a fresh database."""
    python = python_of(system)
    if not python.exists():
        raise RuntimeError("not installed (python -m benchmarks --postgres --setup-peers)")
    module = "chronos" if system in OURS else system
    with cluster.database(system) as url:
        argv = [
            str(python),
            "-m",
            "benchmarks.pg_driver",
            module,
            phase,
            "--url",
            url,
            "--query-url",
            cluster.query_url,
            "--psql",
            cluster.psql,
        ]
        for k, v in opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=limit,
            cwd=str(REPO),
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {last[:200]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- the run ---------------------------------------------------------------------------------


def suite(args: argparse.Namespace, cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Figures by system, then by phase setting."""
    s = Sizes(args.size)
    if args.xmin_hold is not None:
        s.xmin_hold = args.xmin_hold
    out: dict[str, dict[str, Any]] = {system: {} for system in args.systems}
    plan: list[tuple[str, str, float, dict[str, Any]]] = []  # (phase, key, limit, opts)
    if "enqueue" in args.phases:
        plan.append(("enqueue", "enqueue", 600, {"n": s.n_bulk, "n_single": s.n_single}))
    if "drain" in args.phases:
        for c, kind in s.drain_settings:
            plan.append(
                (
                    "drain",
                    f"drain c={c} {kind}",
                    s.timeout + 120,
                    {"n": s.drain, "concurrency": c, "kind": kind, "timeout": s.timeout},
                )
            )
    if "pickup" in args.phases:
        plan.append(
            (
                "pickup",
                "pickup",
                s.timeout + 120,
                {"n": s.pickup, "rate": s.pickup_rate, "timeout": s.timeout},
            )
        )
    if "lateness" in args.phases:
        plan.append(
            (
                "lateness",
                "lateness",
                s.timeout + 120,
                {"n": s.late, "delay": s.late_delay, "spread": s.late_spread, "timeout": s.timeout},
            )
        )
    if "recovery" in args.phases:
        plan.append(
            (
                "recovery",
                "recovery",
                s.timeout + 180,
                {"n": s.recovery, "lease": s.lease, "timeout": s.timeout},
            )
        )
    if "idle" in args.phases:
        plan.append(("idle", "idle", s.idle + 120, {"seconds": s.idle}))
    if "xmin" in args.phases:
        plan.append(
            (
                "xmin",
                "xmin",
                s.xmin_hold + 4 * s.timeout + 120,
                {
                    "hold": s.xmin_hold,
                    "churn": s.xmin_churn,
                    "n": s.xmin_batch,
                    "pickups": s.xmin_pickups,
                    "rate": s.pickup_rate,
                    "timeout": s.timeout,
                },
            )
        )
    for phase, key, limit, opts in plan:
        for system in args.systems:
            if phase == "xmin" and system == "redis":
                continue  # a PostgreSQL snapshot does not touch Redis
            log(f"-- {key}: {LABELS[system]}")
            t = time.monotonic()
            try:
                row = drive(cluster, system, phase, limit, **opts)
            except Exception as exc:  # a failed run is reported, not hidden
                row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                log(f"   failed: {row['error']}")
            row["run_s"] = round(time.monotonic() - t, 1)
            row["loadavg1"] = os.getloadavg()[0]
            out[system][key] = row
            _save(args.out.with_suffix(".partial.json"), {"results": out})
    return out


# -- tables ---------------------------------------------------------------------------------


def _f(value: Any, spec: str = ",.0f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _cell(row: dict[str, Any] | None, *keys: str, spec: str = ",.0f", sep: str = " / ") -> str:
    if row is None:
        return ""
    if not row.get("ok", True) and "error" in row:
        return "failed"
    text = sep.join(_f(row.get(k), spec) for k in keys)
    return text + ("" if row.get("ok", True) else " (incomplete)")


def _recovery_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    if "error" in row:
        return "failed"
    text = f"{_f(row.get('first_s'), '.2f')} / {_f(row.get('all_s'), '.2f')}"
    if not row.get("ok", True):
        text += f" ({row.get('recovered', 0)} recovered in time)"
    return text + f" (lease {row['lease_s']:g})"


def tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    results = doc["results"]
    throughput, latency, xmin = [], [], []
    for system, rows in results.items():
        label = LABELS[system]
        throughput.append(
            [
                label,
                _cell(rows.get("enqueue"), "single_per_s"),
                _cell(rows.get("enqueue"), "bulk_per_s"),
                *(
                    _cell(rows.get(f"drain c={c} {k}"), "jobs_per_s")
                    for c, k in ((16, "noop"), (64, "noop"), (16, "query"), (64, "query"))
                ),
            ]
        )
        idle = rows.get("idle")
        latency.append(
            [
                label,
                _cell(rows.get("pickup"), "p50_ms", "p99_ms", spec=",.1f"),
                _cell(rows.get("lateness"), "p50_ms", "p99_ms", spec=",.0f"),
                _recovery_cell(rows.get("recovery")),
                _cell(idle, "queries_per_s", spec=".1f")
                + (" (Redis cmds)" if idle and idle.get("unit") else ""),
            ]
        )
        if "xmin" in rows:
            x = rows["xmin"]
            xmin.append(
                [
                    label,
                    _cell(x, "before_per_s", "pinned_per_s", sep=" -> "),
                    _cell(
                        x, "before_pickup_p50_ms", "pinned_pickup_p50_ms", spec=".1f", sep=" -> "
                    ),
                    _cell(
                        x, "before_pickup_p99_ms", "pinned_pickup_p99_ms", spec=".1f", sep=" -> "
                    ),
                    _f(x.get("pinned", {}).get("dead_tuples")) if x.get("ok") else "",
                    _f(x.get("backlog_s"), ".1f") if x.get("ok") else "",
                ]
            )
    sizes = doc["meta"]["sizes"]
    out = [
        (
            "Enqueue and drain, jobs/s",
            [
                "system",
                "enqueue 1 at a time",
                f"bulk ({sizes['n_bulk']:,})",
                f"drain c=16 no-op ({sizes['drain']:,})",
                "c=64 no-op",
                "c=16 one query",
                "c=64 one query",
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
                "idle worker queries/s",
            ],
            latency,
        ),
    ]
    if xmin:
        out.append(
            (
                f"Pinned xmin: a snapshot held {sizes['xmin_hold']:g} s, jobs flowing at "
                f"{sizes['xmin_churn']:g}/s; before -> at the end of the hold",
                [
                    "system",
                    f"drain c=16 jobs/s ({sizes['xmin_batch']:,})",
                    "pickup p50 ms",
                    "pickup p99 ms",
                    "dead tuples",
                    "backlog after hold s",
                ],
                xmin,
            )
        )
    return out


def render(doc: dict[str, Any], markdown: bool = False) -> str:
    from benchmarks.report import markdown_table, text_table

    parts = []
    for title, headers, body in tables(doc):
        parts.append(f"### {title}" if markdown else f"== {title}")
        parts.append((markdown_table if markdown else text_table)(headers, body))
        parts.append("")
    m = doc["meta"]["machine"]
    during = m.get("loadavg1_during", {})
    parts.append(
        f"load average (1 min) at start {m['loadavg_start'][0]:.2f}, during "
        f"min {_f(during.get('min'), '.2f')} / median {_f(during.get('median'), '.2f')} / "
        f"max {_f(during.get('max'), '.2f')}, at end {m['loadavg_end'][0]:.2f} "
        f"on {m['cpus']} CPUs"
    )
    return "\n".join(parts)


# -- main -------------------------------------------------------------------------------------


def _save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))


def _sample_load(out: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        out.append(os.getloadavg()[0])
        stop.wait(5)


def versions(cluster: Cluster, systems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"postgresql": cluster.version()}
    for system in systems:
        python = python_of(system)
        if not python.exists():
            out[system] = {"error": "not installed"}
            continue
        module = "chronos" if system in OURS else system
        proc = subprocess.run(
            [str(python), "-m", "benchmarks.pg_driver", module, "versions"],
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
        prog="python -m benchmarks --postgres", description=__doc__.split("\n")[0]
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--full",
        dest="size",
        action="store_const",
        const="full",
        help="the long form (minutes of pinned xmin, 20,000-job drains)",
    )
    size.add_argument(
        "--tiny", dest="size", action="store_const", const="tiny", help="the smoke test's sizes"
    )
    parser.set_defaults(size="default")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--no-peers", action="store_true", help="only our two stores")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated")
    parser.add_argument(
        "--xmin-hold",
        type=float,
        default=None,
        help="seconds the snapshot is held (default 15; --full: 300)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "postgres.json")
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
        failed = setup_peers([s for s in args.systems if s in PG_PEERS])
        return 1 if failed else 0
    missing = [s for s in args.systems if not python_of(s).exists()]
    for system in missing:
        log(f"{system}: not installed (python -m benchmarks --postgres --setup-peers): skipped")
    args.systems = [s for s in args.systems if s not in missing]

    started = time.monotonic()
    loads: list[float] = []
    stop = threading.Event()
    threading.Thread(target=_sample_load, args=(loads, stop), daemon=True).start()
    sizes = Sizes(args.size)
    if args.xmin_hold is not None:
        sizes.xmin_hold = args.xmin_hold
    doc: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "size": args.size,
            "sizes": vars(sizes),
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
                "loadavg_start": os.getloadavg(),
            },
        }
    }
    with Cluster() as cluster:
        doc["meta"]["versions"] = versions(cluster, args.systems)
        doc["results"] = suite(args, cluster)
    stop.set()
    return _finish(doc, loads, started, args.out, render, LABELS, OURS)


def _finish(
    doc: dict[str, Any],
    loads: list[float],
    started: float,
    out: Path,
    render: Callable[[dict[str, Any]], str],
    labels: Mapping[str, str],
    ours: Iterable[str],
) -> int:
    """End a run (shared by the SQL benchmarks): the load seen, the time
    taken, the document saved, the tables printed; 1 when a phase of ours
    did not complete, else 0."""
    machine = doc["meta"]["machine"]
    machine["loadavg_end"] = os.getloadavg()
    machine["loadavg1_during"] = {
        "min": min(loads, default=math.nan),
        "median": statistics.median(loads) if loads else math.nan,
        "max": max(loads, default=math.nan),
    }
    doc["meta"]["seconds"] = round(time.monotonic() - started, 1)
    _save(out, doc)
    print(render(doc))
    print(f"results: {out} ({doc['meta']['seconds']} s)")
    mine = set(ours)
    failed = [
        f"{labels[s]}/{k}"
        for s, rows in doc["results"].items()
        if s in mine
        for k, row in rows.items()
        if not row.get("ok", True)
    ]
    if failed:
        print(f"chronos_trio phases that did not complete: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
