"""A stalled worker swallows no wake-up (issue 23, item 3), as processes.

Two ``python -m chronos_trio worker`` processes on a private redis-server,
both idle; one is stopped (SIGSTOP) or cut off behind a blackholing loopback
proxy while it waits. Every job must still start on the healthy worker
within :data:`PROMPT` of being enqueued (or recovered, or coming due). Both
workers poll only every 30 s, so only a wake-up can pass. With wake-up
tokens that the first blocked client pops (before wake-up streams), the
stalled worker, blocked first, took the first job's token, and the job sat
until the healthy worker's poll interval: each test here failed so.

Every process a test starts is continued and killed when it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio.store.redis import RedisStore
from chronos_trio.testing.proxy import TcpProxy
from chronos_trio.testing.redis_server import RedisServer
from tests.tests_app import Record, make_app

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent
#: The workers' poll interval: longer than any test here waits for a start.
POLL = 30.0
#: A healthy idle worker starts a job within this (issue 23's bar).
PROMPT = 1.0
#: How long a test waits for a start before it fails (so main fails fast).
GIVE_UP = PROMPT + 2.0
#: Jobs per test, one at a time. With tokens the stalled worker swallowed
#: the first (it blocked first); the others show that every wake-up reaches
#: the healthy worker, however the two took turns.
JOBS = 3


class Worker:
    """One worker process (no process manager: nothing kills a stopped one),
    its log in a file."""

    def __init__(self, url: str, log_path: Path, *options: str) -> None:
        argv = [sys.executable, "-m", "chronos_trio", "worker", "tests.tests_app:app"]
        argv += ["--poll-interval", str(POLL), *options]
        env = {**os.environ, "CHRONOS_URL": url}  # the store, and where runs are recorded
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.pid = self.proc.pid

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def log_tail(self) -> str:
        return self.log_path.read_text()[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[Callable[..., Worker]]:
    """``workers(url, name, *options)`` starts a worker; all are continued
    and killed after the test, pass or fail."""
    started: list[Worker] = []

    def start(url: str, name: str, *options: str) -> Worker:
        worker = Worker(url, tmp_path / f"{name}.log", *options)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.close()


class Starts:
    """Handler starts recorded by ``tests.record`` (``<key>:start``)."""

    def __init__(self, url: str, key: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.key = key

    async def of(self, job_id: str, by: float, *others: Worker) -> tuple[int, float]:
        """(pid, start time) of ``job_id``'s first start; fails at ``by``
        (time.time()) if it has not started, with the workers' logs."""
        while True:
            raw = await trio.to_thread.run_sync(self.client.lrange, f"{self.key}:start", 0, -1)
            for line in raw:
                got, pid, at = line.decode().split()
                if got == job_id:
                    return int(pid), float(at)
            if time.time() > by:
                logs = "\n".join(w.log_tail() for w in others)
                raise AssertionError(f"job {job_id} did not start by {by:.3f}\n{logs}")
            await trio.sleep(0.02)


async def blocked_clients(url: str, count: int) -> None:
    """Until Redis holds ``count`` clients in blocking reads: each idle
    worker blocks twice (its leaser and its promoter)."""
    client = redis.Redis.from_url(url)
    try:
        while True:
            info = await trio.to_thread.run_sync(client.info, "clients")
            if int(info["blocked_clients"]) >= count:
                return
            await trio.sleep(0.05)
    finally:
        client.close()


async def one_at_a_time(url: str, healthy: Worker, stalled: Worker, *, delay: float = 0.0) -> None:
    """Enqueue :data:`JOBS` jobs one at a time (each ``delay`` s ahead):
    each must start on ``healthy`` within :data:`PROMPT` of its due time."""
    producer = make_app(url)
    starts = Starts(url, "stall")
    try:
        for n in range(JOBS):
            await trio.sleep(0.2)  # the healthy worker is idle again
            due = time.time() + delay
            [handle] = await producer.tasks["tests.record"].enqueue_many(
                [Record("stall")], delay=delay or None
            )
            pid, at = await starts.of(handle.job_id, due + GIVE_UP, healthy, stalled)
            assert pid == healthy.pid
            assert at - due < PROMPT, f"job {n} started {at - due:.2f}s after it was due"
    finally:
        await producer.aclose()
        starts.client.close()


async def idle_pair(
    workers: Callable[..., Worker], url: str, stalled_url: str | None = None
) -> tuple[Worker, Worker]:
    """A worker to stall, then a healthy one, both idle. The one to stall
    blocks first (with tokens, Redis gave a token to the client that blocked
    first), after a first job has loaded the scripts (a producer's first
    enqueue meeting NOSCRIPT sends its wake-up twice, which hid the bug)."""
    producer = make_app(url)
    try:
        await producer.tasks["tests.record"].enqueue_many([Record("warm")])
    finally:
        await producer.aclose()
    stalled = workers(stalled_url or url, "stalled")
    await blocked_clients(url, 2)
    healthy = workers(url, "healthy")
    await blocked_clients(url, 4)
    return healthy, stalled


async def test_a_stopped_idle_worker_swallows_no_wake_up(
    workers: Callable[..., Worker],
) -> None:
    with RedisServer() as server, trio.fail_after(60):
        healthy, stalled = await idle_pair(workers, server.url)
        stalled.stop()
        await one_at_a_time(server.url, healthy, stalled)


async def test_an_idle_worker_on_a_blackholed_link_swallows_no_wake_up(
    workers: Callable[..., Worker],
) -> None:
    with RedisServer() as server, trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            proxy = TcpProxy(upstream_port=server.port)
            port = await nursery.start(proxy.run)
            healthy, cut_off = await idle_pair(
                workers, server.url, stalled_url=f"redis://127.0.0.1:{port}/0"
            )
            proxy.blackhole()  # the link stops forwarding, nothing is reset
            await one_at_a_time(server.url, healthy, cut_off)
            nursery.cancel_scope.cancel()


async def test_a_recovered_job_starts_at_once_while_its_worker_is_stopped(
    workers: Callable[..., Worker],
) -> None:
    """The stopped worker held the job; its lease runs out and is recovered
    (by this test, as any recoverer would): the healthy idle worker starts
    it within :data:`PROMPT` of the recovery."""
    lease = 2.0
    with RedisServer() as server, trio.fail_after(60):
        producer = make_app(server.url)
        starts = Starts(server.url, "hog")
        store = producer.store
        assert isinstance(store, RedisStore)
        try:
            # Only the recoveries of this test: the workers' own come every 60 s.
            options = ("--lease-duration", str(lease), "--recover-interval", "60")
            stalled = workers(server.url, "stalled", *options)
            [hog] = await producer.tasks["tests.record"].enqueue_many([Record("hog", sleep=60)])
            pid, _ = await starts.of(hog.job_id, time.time() + 20, stalled)
            assert pid == stalled.pid
            await blocked_clients(server.url, 2)
            healthy = workers(server.url, "healthy", "--recover-interval", "60")
            await blocked_clients(server.url, 4)
            stalled.stop()
            while True:
                result = await store.recover_expired(["default"], 10)
                if result.requeued:
                    recovered = time.time()
                    break
                await trio.sleep(0.05)
            assert result.requeued == (hog.job_id,)
            starts.client.delete("hog:start")
            pid, at = await starts.of(hog.job_id, recovered + GIVE_UP, healthy, stalled)
            assert pid == healthy.pid
            assert at - recovered < PROMPT, f"started {at - recovered:.2f}s after its recovery"
        finally:
            await producer.aclose()
            starts.client.close()


async def test_a_delayed_job_starts_on_time_beside_a_stopped_promoter(
    workers: Callable[..., Worker],
) -> None:
    with RedisServer() as server, trio.fail_after(60):
        healthy, stalled = await idle_pair(workers, server.url)
        stalled.stop()
        await one_at_a_time(server.url, healthy, stalled, delay=1.0)
