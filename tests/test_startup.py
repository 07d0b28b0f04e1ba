"""Start-up: what ``python -m chronos_trio worker APP`` imports before its
first job. Start-up is import time (the store is reached and the first job
leased within milliseconds), so the modules a worker does not need there
are imported on first use; this test fails when one comes back.

Each case runs the real worker command in a subprocess on a small app (an
interval schedule, a handler of untyped payloads) whose first job writes
down which of the watched modules are loaded, then stops the worker with
SIGTERM. On Redis the server is a fresh one, so the worker's first leases
meet ``NOSCRIPT`` (scripts not loaded yet) and must load them without
redis-py too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import chronos_trio
from chronos_trio.testing.redis_server import RedisServer, call

ROOT = Path(__file__).resolve().parent.parent

#: Imported on first use only: none of them is needed before the first job.
NOT_AT_START = (
    "redis",  # redis-py: only Cluster, Sentinel, TLS, result waiters, errors
    "asyncio",  # redis-py imported it
    "croniter",  # only for cron schedules (this app has an interval one)
    "cattrs",  # only for typed payloads and results
    "chronos_trio.app._inspector",  # the Inspector (admin commands)
    "chronos_trio.cli._admin_commands",
    "chronos_trio.cli._output",  # admin commands' tables
    "chronos_trio.cli._process_manager",  # --processes N
    "chronos_trio.store.redis._check",  # the store checker
    "chronos_trio.store.redis._blocking",  # redis-py in threads
    "chronos_trio.store.redis._cluster",
    "chronos_trio.store.redis._sentinel",
)
#: ... nor, on Redis, the in-memory store.
NOT_AT_START_ON_REDIS = (*NOT_AT_START, "chronos_trio.store.memory")

APP = """
import json, os, signal, sys
from contextlib import asynccontextmanager
from typing import Any

import chronos_trio


@asynccontextmanager
async def enqueue_first(app):
    # The in-memory store lives in the worker: the first job comes from here.
    await app.enqueue("startup.first", None)
    yield {}


URL = os.environ.get("STARTUP_URL")
app = chronos_trio.App(URL, name="startup", lifespan=None if URL else enqueue_first)
app.every(3600, None, task="startup.tick")


@app.task("startup.tick")
async def tick(args: Any, job: chronos_trio.JobContext) -> None:
    pass


@app.task("startup.first")
async def first(args: Any, job: chronos_trio.JobContext) -> None:
    watched = json.loads(os.environ["STARTUP_WATCHED"])
    loaded = [m for m in watched if m in sys.modules]
    with open(os.environ["STARTUP_REPORT"], "w") as f:
        json.dump(loaded, f)
    os.kill(os.getpid(), signal.SIGTERM)  # a graceful stop
"""


def _first_job_modules(tmp_path: Path, url: str | None, watched: tuple[str, ...]) -> list[str]:
    """Run the worker command on the app until its first job; the modules
    of ``watched`` loaded then."""
    (tmp_path / "startup_app.py").write_text(APP)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
        STARTUP_REPORT=str(report),
        STARTUP_WATCHED=json.dumps(watched),
    )
    if url is not None:
        env["STARTUP_URL"] = url
    argv = [sys.executable, "-m", "chronos_trio", "worker", "startup_app:app"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(report.read_text())
    return loaded


def test_memory_store_worker_imports_only_what_its_first_job_needs(tmp_path: Path) -> None:
    assert _first_job_modules(tmp_path, None, NOT_AT_START) == []


@pytest.mark.redis
def test_redis_worker_reaches_its_first_job_without_redis_py(tmp_path: Path) -> None:
    """A plain redis:// URL: round trips on Trio sockets, no redis-py; the
    fresh server has no script loaded, so NOSCRIPT is handled without it."""
    with RedisServer() as server:

        async def enqueue() -> None:
            app = chronos_trio.App(server.url)
            try:
                with trio.fail_after(10):
                    await app.enqueue("startup.first", None)
            finally:
                await app.aclose()

        trio.run(enqueue)
        call(server.port, "SCRIPT", "FLUSH")  # the worker's scripts too: all NOSCRIPT first
        assert _first_job_modules(tmp_path, server.url, NOT_AT_START_ON_REDIS) == []
