"""huey with ``RedisHuey``, on threads: ``huey_consumer
benchmarks.peers.huey_bench.huey -w C -k thread -q`` (its consumer, one
process per worker; ``-q`` keeps it from logging two INFO lines per task, as
SAQ runs ``--quiet``). Settings: ``RedisHuey("bench", connection_pool=...)`` with a pool of C + 16
connections (redis-py's default of 100 is too few for 256 threads): blocking
dequeue (``BRPOP``, 1 s), results kept only for tasks that return something
(none here), the scheduler every 1 s (so delayed jobs have 1 s resolution).
Delayed jobs: ``task.schedule(args, eta=...)``. ``incr`` makes its one Redis
round trip on a redis-py client of the module's own, as a huey user would;
``noop`` sleeps ``hold`` s with ``time.sleep`` (the I/O workload)."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import redis
from huey import RedisHuey
from redis import ConnectionPool

from benchmarks._common import ENV_URL, INCR_KEY, PAD_PEER, env_concurrency, recorder
from benchmarks.peers._threads import ThreadProducer

NAME = "huey"
BACKEND = "threads"
PACKAGES = ("huey", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
#: Connections for the handler threads (or the 32 producer threads): redis-py 8
#: caps a pool at 100 unless told, and a thread that finds none fails with
#: MaxConnectionsError.
POOL_SIZE = max(100, env_concurrency(1) + 16)
# connects lazily; one thread-safe pool for the handler threads
client = redis.Redis.from_url(_url, max_connections=POOL_SIZE)
# Each consumer thread holds a connection while it waits in BRPOP: with the
# default pool (100), -w 256 lost jobs (MaxConnectionsError while finishing
# a task it had already popped).
huey = RedisHuey("bench", connection_pool=ConnectionPool.from_url(_url, max_connections=POOL_SIZE))


@huey.task()
def noop(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold:
        time.sleep(hold)


@huey.task()
def incr(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip (sync redis-py), recorded once it is done."""
    client.incr(INCR_KEY)
    recorder().record(sent_at, due_at)


@huey.task()
def blob(data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


TASKS: dict[str, Any] = {"noop": noop, "incr": incr, "blob": blob}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    argv = [f"{venv_bin}/huey_consumer", "benchmarks.peers.huey_bench.huey"]
    return [[*argv, "-w", str(concurrency), "-k", "thread", "-q"]] * processes


class Producer(ThreadProducer):
    """Calling the task, ``task(...)``; delayed: ``task.schedule(args, eta=...)``.
    (No batch enqueue: ``Task.map`` enqueues one by one.)"""

    tasks = TASKS

    def close(self) -> None:
        huey.storage.pool.disconnect()

    def send(self, task: Any, args: tuple[Any, ...]) -> None:
        task(*args)

    def send_at(self, task: Any, args: tuple[Any, ...], due_at: float) -> None:
        task.schedule(args, eta=dt.datetime.fromtimestamp(due_at, dt.UTC))

    def send_after(self, task: Any, args: tuple[Any, ...], delay: float) -> None:
        task.schedule(args, delay=delay)


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): calling the task, ``noop(...)``, from
    sync code, one job per call; huey has no batch call."""

    one_label = "task(...)"
    many_label = None

    def open(self, url: str) -> None:
        self.args = (time.time(), 0.0, 0.0, PAD_PEER)

    def close(self) -> None:
        huey.storage.pool.disconnect()

    def one(self) -> None:
        noop(*self.args)


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"sync": Caller}
