"""``python -m chronos_trio workers``: the table and ``--json`` in-process on
both stores, and real worker processes on a test Redis: each child of
``worker --processes 2`` appears, a child killed with SIGKILL drops out
within its registry ttl (its replacement appears), and a clean stop leaves
no entry behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio import MemoryStore, WorkerInfo
from chronos_trio.cli import EXIT_OK, main
from chronos_trio.store import Store
from chronos_trio.store.redis import RedisStore
from tests import tests_app
from tests.test_process_e2e import Manager

#: The workers' beat in the process test, and the ttl it gives (3 beats).
BEAT = 0.3
TTL = 3 * BEAT


def _beat_all(store: Store, *workers: WorkerInfo) -> None:
    async def beat() -> None:
        for w in workers:
            await store.beat_worker(w, 60.0)

    trio.run(beat)


def _info(worker_id: str, host: str, pid: int, running: tuple[str, ...] = ()) -> WorkerInfo:
    return WorkerInfo(worker_id, host, pid, ("default", "low"), 4, 0.0, 0.0, len(running), running)


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_workers_table_and_json(
    backend: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    store: Store
    if backend == "memory":
        store = MemoryStore()
        monkeypatch.setattr(tests_app.app, "_store", store)
        monkeypatch.setattr(tests_app.app, "_store_url", None)
        target = ["tests.tests_app:app"]
    else:
        url: str = request.getfixturevalue("redis_url")
        store = RedisStore.from_url(url)
        target = ["--url", url]
    assert main(["workers", *target]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "no live workers"
    _beat_all(
        store,
        _info("web2:7:0", "web2", 7),
        _info("web1:30:0", "web1", 30, ("a", "b", "c", "d")),
        _info("web1:4:1", "web1", 4, ("x",)),
    )
    assert main(["workers", *target]) == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "WORKER", "HOST", "PID", "QUEUES", "CONCURRENCY", "RUNNING", "UP", "LAST", "BEAT", "JOBS"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["web1:4:1", "web1:30:0", "web2:7:0"]
    assert lines[2].split()[3:6] == ["default,low", "4", "4"]
    assert lines[2].endswith("a,b,c (+1)") and lines[1].endswith("x")
    assert "ago" in lines[1], "the last beat, relative to the store's now"

    assert main(["workers", *target, "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [w["worker_id"] for w in data] == ["web1:4:1", "web1:30:0", "web2:7:0"]
    first = data[1]
    assert set(first) == {
        "worker_id", "host", "pid", "queues", "concurrency", "started_at", "last_beat",
        "running", "running_job_ids", "kinds",
    }  # fmt: skip
    assert first["queues"] == ["default", "low"] and first["running_job_ids"] == [
        "a",
        "b",
        "c",
        "d",
    ]
    assert first["pid"] == 30 and first["running"] == 4 and first["started_at"] == 0.0
    assert abs(first["last_beat"] - time.time()) < 60
    if isinstance(store, RedisStore):
        trio.run(store.aclose)


# -- real processes --------------------------------------------------------------------
def _listed(capsys: pytest.CaptureFixture[str], url: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["workers", "--url", url, "--json"]) == EXIT_OK
    listed: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return listed


def _until(what: str, predicate: Callable[[], bool], timeout: float, manager: Manager) -> float:
    """Poll until ``predicate()``; the time it took. Fails after ``timeout`` s."""
    started = time.monotonic()
    while not predicate():
        assert manager.proc.poll() is None, manager.log()
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout}s"
        time.sleep(0.03)
    return time.monotonic() - started


@pytest.mark.redis
def test_each_worker_process_is_listed_and_a_killed_one_drops_out_within_its_ttl(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manager = Manager(
        redis_url,
        tmp_path,
        "--concurrency", "3",
        "--lease-duration", str(3 * TTL),
        "--heartbeat-interval", str(BEAT),
    )  # fmt: skip
    host = socket.gethostname()
    try:
        listed: list[dict[str, Any]] = []

        def pids() -> set[int]:
            nonlocal listed
            listed = _listed(capsys, redis_url)
            return {w["pid"] for w in listed}

        _until("both children start", lambda: len(manager.children()) == 2, 20, manager)
        children = manager.children()
        _until("both children listed", lambda: pids() == set(children.values()), 20, manager)
        for w in listed:
            index = next(i for i, pid in children.items() if pid == w["pid"])
            assert w["worker_id"] == f"{host}:{w['pid']}:{index}" and w["host"] == host
            assert w["concurrency"] == 3 and w["running"] == 0
            assert w["started_at"] <= w["last_beat"]

        victim = children[0]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        assert victim in pids(), "a killed worker is listed until its ttl passes"
        gone_after = _until("the killed child drops out", lambda: victim not in pids(), 5, manager)
        # its last beat was at most one beat before the kill; the polls add a little
        assert gone_after <= TTL + 0.5, gone_after
        assert time.monotonic() - killed_at >= TTL - BEAT - 0.05, "not before its ttl"
        _until("its replacement is listed", lambda: len(pids()) == 2, 20, manager)
        assert victim not in pids()

        manager.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20  # every wait here is bounded like this
        while manager.proc.poll() is None:
            assert time.monotonic() < deadline, manager.log()
            time.sleep(0.03)
        assert manager.proc.returncode == EXIT_OK
        assert _listed(capsys, redis_url) == [], "a clean stop unregisters every child at once"
    finally:
        manager.close()
