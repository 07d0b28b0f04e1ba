"""Helpers of the SQLite process and fault tests (``tests/test_sqlite_processes.py``,
``tests/test_sqlite_faults.py``): worker processes (``python -m chronos_trio
worker tests.soak_app:app``, through the soak's :class:`WorkerProcess`),
the child processes of ``tests/_sqlite_child.py``, the handlers' run files
(``tests/soak_app.py``: one append-only file per process, so they survive
kill -9), and the checks every test makes at the end: the file's
``PRAGMA integrity_check``, ``python -m chronos_trio check`` and the
processes' output free of store errors.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from chronos_trio import JobState
from tests._soak import WorkerProcess
from tests._soak_check import Run, read_runs

ROOT = Path(__file__).resolve().parent.parent

#: What no process's output may hold at the load these tests make.
STORE_TROUBLE = (
    "database is locked",
    "StoreError",
    "Traceback",
    "failed; retrying",
    '"level": "error"',
    '"level": "critical"',
)

PENDING = (JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT)


def sqlite_file_url(path: Path) -> str:
    return f"sqlite:///{path}"


def child_env(url: str, runs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env.update(
        CHRONOS_URL=url,
        CHRONOS_SOAK_RUNS=str(runs),
        CHRONOS_SOAK_SCHEDULES="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def worker_process(
    url: str,
    runs: Path,
    log: Path,
    *options: str,
    processes: int = 1,
    lease: float = 30.0,
    log_level: str = "info",
) -> WorkerProcess:
    """A worker process of ``tests.soak_app:app`` on ``url`` (not started);
    ``processes`` > 1: a process manager with that many children."""
    argv = [
        "--url", url,
        "--lease-duration", str(lease),
        "--log-format", "json",
        "--log-level", log_level,
        *options,
    ]  # fmt: skip
    if processes > 1:
        argv += ["--processes", str(processes)]
    runs.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    return WorkerProcess(argv, child_env(url, runs), log)


class Child:
    """``python -m tests._sqlite_child ARGS`` with its output in a file
    (``out``) or a pipe (``piped``: read it with :meth:`readline`)."""

    def __init__(
        self, *args: str, env: Mapping[str, str], out: Path | None = None, piped: bool = False
    ) -> None:
        self.args = args
        self.out = out
        argv = [sys.executable, "-m", "tests._sqlite_child", *args]
        if piped:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        else:
            assert out is not None
            with out.open("wb") as f:
                self.proc = subprocess.Popen(
                    argv, cwd=ROOT, env=dict(env), stdout=f, stderr=subprocess.STDOUT
                )

    async def readline(self) -> str:
        assert self.proc.stdout is not None
        line = await trio.to_thread.run_sync(self.proc.stdout.readline, abandon_on_cancel=True)
        return bytes(line).decode(errors="replace").strip()

    async def wait(self) -> int:
        while self.proc.poll() is None:
            await trio.sleep(0.02)
        return self.proc.returncode

    def output(self) -> str:
        if self.out is not None and self.out.exists():
            return self.out.read_text(errors="replace")
        return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def runs_of(runs_dir: Path) -> dict[str, list[Run]]:
    """Every handler run recorded so far, by job id (a torn last line of a
    file being written is left for the next reading)."""
    runs, _ = read_runs(runs_dir)
    return runs


def finished_ok(runs: Mapping[str, Sequence[Run]]) -> set[str]:
    return {job for job, rs in runs.items() if any(r.outcome == "ok" for r in rs)}


def overlapping(
    runs: Mapping[str, Sequence[Run]], killed: Mapping[int, float] | None = None
) -> list[str]:
    """Runs of one job that were going on at once (fencing broken). A run
    cut short, with no end line, ends when its process was killed
    (``killed``: pid -> time), or never when its process was not."""
    killed = killed or {}
    found: list[str] = []
    for job, rs in runs.items():
        ordered = sorted(rs, key=lambda r: r.start)
        for i, a in enumerate(ordered):
            a_end = a.end if a.end is not None else killed.get(a.pid, float("inf"))
            for b in ordered[i + 1 :]:
                if b.start < a_end:
                    found.append(f"{job}: {b.describe()} began during {a.describe()}")
    return found


def integrity(path: Path) -> str:
    """``PRAGMA integrity_check`` of the file, on a connection of its own."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        return "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


def count_ids(path: Path, like: str) -> int:
    """Job rows whose id matches the SQL pattern ``like`` (read on a connection of its own)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        row = conn.execute("SELECT count(*) FROM jobs WHERE id LIKE ?", (like,)).fetchone()
        return int(row[0])
    finally:
        conn.close()


async def check_cli(url: str) -> tuple[int, dict[str, Any], str]:
    """``python -m chronos_trio check --url URL --json``: the exit code, the
    report and the raw output (0: nothing found; 9: problems left)."""

    def run() -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
        return subprocess.run(
            [sys.executable, "-m", "chronos_trio", "check", "--url", url, "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    text = done.stdout + done.stderr
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {}
    return done.returncode, report, text


def trouble(texts: Iterable[tuple[str, str]]) -> list[str]:
    """Lines of the named outputs that show a store error (see :data:`STORE_TROUBLE`)."""
    found: list[str] = []
    for name, text in texts:
        for line in text.splitlines():
            if any(mark in line for mark in STORE_TROUBLE):
                found.append(f"{name}: {line[:300]}")
    return found


async def pending(store: Any, queue: str = "default") -> int:
    [stats] = await store.stats([queue])
    return sum(stats.counts.get(s, 0) for s in PENDING)


async def wait_drained(store: Any, timeout: float, queue: str = "default") -> None:
    """Until ``queue`` holds no pending job (a handler's end line is written
    before its settle: the last job may still be leased a moment)."""
    with trio.fail_after(timeout):
        while await pending(store, queue):
            await trio.sleep(0.05)


async def wait_until(predicate: Any, timeout: float, poll: float = 0.05) -> None:
    """Until ``predicate()`` is true; trio.TooSlowError after ``timeout`` s."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(poll)


async def leased_by(store: Any, pid: int, queue: str = "default") -> list[str]:
    """Jobs of ``queue`` leased now by the worker of process ``pid``."""
    jobs = await store.list_jobs(queue, JobState.LEASED, limit=5000)
    return [j.id for j in jobs if f":{pid}:" in j.lease_owner]
