"""taskiq + taskiq-redis: ``taskiq worker benchmarks.peers.taskiq_bench:broker
--workers N --max-async-tasks C --max-prefetch C`` with the ``RedisStreamBroker``
(acknowledged delivery, the broker its README recommends), no result backend.
Delayed jobs go through taskiq's scheduler (``taskiq scheduler ...:scheduler
--update-interval 1``) with a ``ListRedisScheduleSource``. ``incr`` makes its
one Redis round trip on a redis-py asyncio client made at worker start-up and
kept in the worker's state (``TaskiqEvents.WORKER_STARTUP``, read through
``Context``), as taskiq's docs show for shared resources."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from typing import Any

import redis.asyncio
from taskiq import Context, TaskiqDepends, TaskiqEvents, TaskiqScheduler, TaskiqState
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

from benchmarks._common import ENV_URL, INCR_KEY, PAD_PEER, recorder

NAME = "taskiq"
BACKEND = "asyncio"
PACKAGES = ("taskiq", "taskiq-redis", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
broker = RedisStreamBroker(_url)
source = ListRedisScheduleSource(_url)
scheduler = TaskiqScheduler(broker, sources=[source])


@broker.task(task_name="noop")
async def noop(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold:
        await asyncio.sleep(hold)


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def startup(state: TaskiqState) -> None:
    state.redis = redis.asyncio.Redis.from_url(_url)


@broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
async def shutdown(state: TaskiqState) -> None:
    await state.redis.aclose()


@broker.task(task_name="incr")
async def incr(
    sent_at: float, due_at: float, hold: float, pad: str, context: Context = TaskiqDepends()
) -> None:
    """One Redis round trip on the worker's client, recorded once done."""
    await context.state.redis.incr(INCR_KEY)
    recorder().record(sent_at, due_at)


@broker.task(task_name="blob")
async def blob(data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


TASKS = {"noop": noop, "incr": incr, "blob": blob}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [
        [
            f"{venv_bin}/taskiq", "worker", "benchmarks.peers.taskiq_bench:broker",
            "--workers", str(processes), "--max-async-tasks", str(concurrency),
            "--max-prefetch", str(concurrency), "--no-configure-logging",
        ]
    ]  # fmt: skip


def scheduler_command(venv_bin: str) -> list[str]:
    return [
        f"{venv_bin}/taskiq", "scheduler", "benchmarks.peers.taskiq_bench:scheduler",
        "--update-interval", "1", "--no-configure-logging",
    ]  # fmt: skip


class Producer:
    bulk = False  # no batch enqueue

    async def open(self, url: str) -> None:
        self.broker = broker
        await broker.startup()
        await source.startup()

    async def close(self) -> None:
        await source.shutdown()
        await broker.shutdown()

    async def enqueue(
        self, sent_at: float, due_at: float = 0.0, *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        task = TASKS[kind]
        if due_at:
            when = dt.datetime.fromtimestamp(due_at, dt.UTC)
            await task.schedule_by_time(source, when, sent_at, due_at, hold, PAD_PEER)
        else:
            await task.kiq(sent_at, due_at, hold, PAD_PEER)

    async def enqueue_data(self, data: str, delay: float) -> None:
        """A job of ``blob`` due ``delay`` s from now: ``schedule_by_time``
        into the schedule source (the scheduler process would send it then)."""
        when = dt.datetime.fromtimestamp(time.time() + delay, dt.UTC)
        await blob.schedule_by_time(source, when, data)


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): ``await task.kiq(...)`` on the
    ``RedisStreamBroker``, one job per call; taskiq has no batch call."""

    one_label = "await task.kiq(...)"
    many_label = None

    async def open(self, url: str) -> None:
        await broker.startup()
        self.args = (time.time(), 0.0, 0.0, PAD_PEER)

    async def close(self) -> None:
        await broker.shutdown()

    async def one(self) -> None:
        await noop.kiq(*self.args)


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"asyncio": Caller}
