"""Issue 23, item 4, across processes: a worker stops using a lease when the
lease ends on its own clock, whatever its store calls are doing.

Two worker processes (``python -m chronos_trio worker tests.lease_app:app``)
share a private redis-server. A runs a long job, then is cut off from Redis
(its link blackholed by a loopback proxy: every call hangs, no reset) or
stopped (SIGSTOP); B, on a direct link, recovers the job once its lease
expires and runs it. The handlers write their starts, ticks and stops to a
file on the host's monotonic clock (A cannot reach Redis), so the two runs
can be compared: A's handler must be cancelled before its lease ends on its
own clock, and never overlap B's run of the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
import trio

from chronos_trio import App
from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import RedisServer
from tests._support import Line, lines
from tests.lease_app import Probe

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent
LEASE = 2.0
HEARTBEAT = 0.5
RECOVER = 0.2


class WorkerProcess:
    """One single-process CLI worker on ``url``; its log goes to a file."""

    def __init__(self, url: str, log_path: Path) -> None:
        argv = [sys.executable, "-m", "chronos_trio", "worker", "tests.lease_app:app"]
        argv += ["--url", url, "--concurrency", "4", "--lease-duration", str(LEASE)]
        argv += ["--heartbeat-interval", str(HEARTBEAT), "--recover-interval", str(RECOVER)]
        argv += ["--poll-interval", "0.2", "--shutdown-grace", "0.5"]
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # also ends a stopped process
            self.proc.wait()


def probe(path: Path, tick: float = 0.05) -> dict[str, object]:
    """A ``lease.probe`` payload (the producer does not import the task)."""
    return attrs.asdict(Probe(str(path), tick))


async def wait_line(path: Path, what: str, pid: int, *procs: WorkerProcess) -> Line:
    """The first ``what`` line written by ``pid``, once there is one."""
    while True:
        for line in lines(path):
            if line.what == what and line.pid == pid:
                return line
        for worker in procs:
            assert worker.proc.poll() is None, worker.log()
        await trio.sleep(0.02)


async def wait_registered(app: App, worker: WorkerProcess) -> None:
    """Until ``worker`` has registered in the store (its actors run)."""
    while not any(w.pid == worker.pid for w in await app.store.workers()):
        assert worker.proc.poll() is None, worker.log()
        await trio.sleep(0.05)


async def test_a_worker_cut_off_from_redis_stops_its_handler_before_its_lease_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.txt"
    with RedisServer() as server, trio.fail_after(60):
        proxy = TcpProxy(upstream_port=server.port)
        producer = App(server.url)
        workers: list[WorkerProcess] = []
        try:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(proxy.run)
                a = WorkerProcess(f"redis://127.0.0.1:{port}/0", tmp_path / "a.log")
                workers.append(a)
                await wait_registered(producer, a)
                await producer.enqueue("lease.probe", probe(path))
                await wait_line(path, "start", a.pid, a)
                b = WorkerProcess(server.url, tmp_path / "b.log")
                workers.append(b)
                await wait_registered(producer, b)
                await wait_line(path, "tick", a.pid, a, b)  # still A's, its leases renewed
                cut_at = time.monotonic()
                proxy.blackhole()
                b_start = await wait_line(path, "start", b.pid, a, b)
                a_stop = await wait_line(path, "stop", a.pid, a, b)
                proxy.heal()
                nursery.cancel_scope.cancel()
        finally:
            for worker in workers:
                worker.close()
            await producer.aclose()
    runs = lines(path)
    a_ticks = [line.at for line in runs if line.pid == a.pid and line.what == "tick"]
    print(
        f"\ncut at {cut_at:.3f}; A's handler stopped {a_stop.at - cut_at:.3f}s later "
        f"(last tick {max(a_ticks) - cut_at:.3f}s); B's started {b_start.at - cut_at:.3f}s "
        f"later, {b_start.at - a_stop.at:.3f}s after A's stopped"
    )
    assert a_stop.lease_lost, "A's handler was cancelled for its lease"
    # A's last renewal that got through was asked before the cut, so on its
    # own clock its lease ended by cut_at + LEASE at the latest (its deadline
    # is 5-6% of a lease earlier; the store's expiry is later still). Before
    # the fix A went on until its hung renewal failed (5 s) and then some.
    assert a_stop.at < cut_at + LEASE
    assert b_start.attempt == 2
    assert max(a_ticks) <= a_stop.at < b_start.at, "the two runs never overlapped"


async def test_a_stopped_worker_resumed_past_its_lease_runs_no_handler_code_but_cleanup(
    tmp_path: Path,
) -> None:
    """A is stopped (SIGSTOP) while its handlers run, for longer than its
    leases; B recovers and runs the jobs; A is resumed. A's handlers must not
    run on: Trio expires their scopes' deadlines (their leases') before it
    runs any task, so they write no tick after the resume, only their
    cleanup. The handlers tick at different periods, so their wake-ups fall
    on both sides of A's heartbeat (which, before the fix, cancelled them
    only when it happened to run first)."""
    path = tmp_path / "runs.txt"
    with RedisServer() as server, trio.fail_after(60):
        producer = App(server.url)
        a = WorkerProcess(server.url, tmp_path / "a.log")
        workers = [a]
        try:
            await wait_registered(producer, a)
            handles = [
                await producer.enqueue("lease.probe", probe(path, tick))
                for tick in (0.02, 0.45, 0.85)
            ]
            while sum(1 for line in lines(path) if line.what == "start") < len(handles):
                assert a.proc.poll() is None, a.log()
                await trio.sleep(0.02)
            b = WorkerProcess(server.url, tmp_path / "b.log")
            workers.append(b)
            await wait_registered(producer, b)
            await trio.sleep(1.0)  # every handler ticks once more
            os.kill(a.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            while sum(1 for line in lines(path) if line.pid == b.pid) < len(handles):
                assert b.proc.poll() is None, b.log()
                await trio.sleep(0.05)
            await trio.sleep(LEASE)  # past A's deadlines by far
            resumed_at = time.monotonic()
            os.kill(a.pid, signal.SIGCONT)
            while sum(1 for ln in lines(path) if ln.pid == a.pid and ln.what == "stop") < len(
                handles
            ):
                assert a.proc.poll() is None, a.log()
                await trio.sleep(0.02)
        finally:
            for worker in workers:
                worker.close()
            await producer.aclose()
    runs = lines(path)
    a_runs = [line for line in runs if line.pid == a.pid]
    late = [line for line in a_runs if line.what == "tick" and line.at >= resumed_at]
    stops = [line for line in a_runs if line.what == "stop"]
    b_starts = [line for line in runs if line.pid == b.pid and line.what == "start"]
    print(
        f"\nstopped {resumed_at - stopped_at:.2f}s; B started the jobs "
        f"{sorted(round(s.at - stopped_at, 2) for s in b_starts)}s into it; "
        f"A's ticks after the resume: {len(late)}"
    )
    assert len(b_starts) == len(handles) and all(s.at < resumed_at for s in b_starts)
    assert late == [], "a stale handler ran on after its lease ended"
    assert len(stops) == len(handles) and all(s.lease_lost and s.at >= resumed_at for s in stops)
