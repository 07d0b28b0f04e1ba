"""Schedules across worker processes on one Redis: each trigger enqueued
exactly once, failover after SIGSTOP and SIGKILL of the leader, and the stale
epoch of a resumed ex-leader rejected. Each worker is ``tests/schedule_app.py``
with a 1-second ``every`` schedule and a 2-second leadership lease."""

from __future__ import annotations

import collections
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import Leadership, leadership_name
from chronos_trio.store.redis import RedisStore

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]
ROOT = Path(__file__).resolve().parent.parent
NAME = leadership_name("chronos")
TTL = 2.0
TICK = 1.0


class Cluster:
    """Three ``schedule_app`` worker processes and what they did."""

    def __init__(
        self, url: str, logs: Path, store: RedisStore, extra: tuple[str, ...] = ()
    ) -> None:
        self.url = url
        self.extra = extra  # more arguments of schedule_app ("stored")
        self.logs = logs
        self.store = store
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = redis.Redis.from_url(url)

    def spawn(self, worker_id: str) -> None:
        with open(self.logs / f"{worker_id}.log", "wb") as log:  # the child keeps its copy
            self.procs[worker_id] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.schedule_app",
                    self.url,
                    worker_id,
                    str(TTL),
                    *self.extra,
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def log(self, worker_id: str) -> str:
        return (self.logs / f"{worker_id}.log").read_text(errors="replace")

    async def wait_ready(self) -> None:
        for wid in self.procs:
            while f"ready {wid}" not in self.log(wid):
                assert self.procs[wid].poll() is None, self.log(wid)
                await trio.sleep(0.05)

    async def leader(self) -> Leadership:
        while (lead := await self.store.current_leader(NAME)) is None:
            await trio.sleep(0.02)
        return lead

    async def wait_new_leader(self, than: Leadership) -> Leadership:
        while True:
            lead = await self.leader()
            if lead.epoch > than.epoch:
                return lead
            await trio.sleep(0.02)

    def runs(self) -> list[tuple[str, int, str]]:
        """``(job id, attempt, worker)`` of every run of a trigger's job."""
        raw: list[bytes] = self.client.lrange("ticks", 0, -1)  # type: ignore[assignment]
        out = []
        for line in raw:
            job_id, attempt, worker = line.decode().split()
            out.append((job_id, int(attempt), worker))
        return out

    def fire_times(self) -> list[float]:
        """Trigger times of every job that ran, sorted; asserts none ran twice
        as a first attempt (which a trigger enqueued twice would cause)."""
        firsts = collections.Counter(job_id for job_id, attempt, _ in self.runs() if attempt == 1)
        twice = {job_id: n for job_id, n in firsts.items() if n > 1}
        assert not twice, f"triggers enqueued more than once: {twice}"
        return sorted(int(job_id.rsplit(":", 1)[1]) / 1000 for job_id in firsts)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGINT)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.client.close()


@asynccontextmanager
async def three_workers(url: str, logs: Path, store: RedisStore) -> AsyncIterator[Cluster]:
    cluster = Cluster(url, logs, store)
    try:
        for i in range(3):
            cluster.spawn(f"w{i}")
        with trio.fail_after(30):
            await cluster.wait_ready()
        yield cluster
    finally:
        cluster.close()


def max_gap(times: list[float]) -> float:
    return max(b - a for a, b in itertools.pairwise(times))


async def test_three_processes_enqueue_each_trigger_once(
    redis_url: str, redis_store: Factory, tmp_path: Path
) -> None:
    store = await redis_store()
    async with three_workers(redis_url, tmp_path, store) as cluster:
        with trio.fail_after(60):
            await cluster.leader()
            # a dozen triggers, over a dozen renewals of the leadership (every TTL/2)
            await trio.sleep(12.5)
        fired = cluster.fire_times()
        last_fired = await store.schedule_last_fired(NAME)
    assert len(fired) >= 11
    assert fired == [fired[0] + k for k in range(len(fired))], "no gap, no duplicate"
    assert last_fired["tick"] >= fired[-1]


async def test_sigstopped_leader_is_replaced_and_fenced_off(
    redis_url: str, redis_store: Factory, tmp_path: Path
) -> None:
    store = await redis_store()
    async with three_workers(redis_url, tmp_path, store) as cluster:
        with trio.fail_after(60):
            old = await cluster.leader()
            await trio.sleep(3)
            paused = cluster.procs[old.holder]
            paused.send_signal(signal.SIGSTOP)
            stopped_at = trio.current_time()
            new = await cluster.wait_new_leader(old)
            took_over = trio.current_time() - stopped_at
            await trio.sleep(max(0.0, 2 * TTL + 0.5 - took_over))  # well past the lease
            paused.send_signal(signal.SIGCONT)
            await trio.sleep(3)
            assert (await cluster.leader()).epoch == new.epoch, "the ex-leader did not take over"
        fired = cluster.fire_times()
        ex_leader_log = cluster.log(old.holder)
    assert new.holder != old.holder
    assert took_over <= TTL + 0.5
    assert max_gap(fired) <= TTL + TICK, "gap without a trigger at most lease + one tick"
    assert "stale epoch rejected" in ex_leader_log
    assert f"epoch={old.epoch} trigger=" in ex_leader_log


async def test_sigkilled_leader_is_replaced_within_the_lease(
    redis_url: str, redis_store: Factory, tmp_path: Path
) -> None:
    store = await redis_store()
    async with three_workers(redis_url, tmp_path, store) as cluster:
        with trio.fail_after(60):
            old = await cluster.leader()
            await trio.sleep(3)
            cluster.procs[old.holder].send_signal(signal.SIGKILL)
            killed_at = trio.current_time()
            new = await cluster.wait_new_leader(old)
            took_over = trio.current_time() - killed_at
            await trio.sleep(3)
        fired = cluster.fire_times()
    assert new.holder != old.holder
    assert took_over <= TTL + 0.2, "a follower takes over within the lease"
    assert max_gap(fired) <= TTL + TICK
    assert fired[-1] - fired[0] >= 7
