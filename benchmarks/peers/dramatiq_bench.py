"""Dramatiq with its Redis broker, on threads: ``dramatiq
benchmarks.peers.dramatiq_bench --processes P --threads C`` (its CLI, one
process per worker unless asked). Settings: ``RedisBroker(url=...)`` with the
default middleware (retries, time limit, ...) and the actors' defaults;
prefetch is Dramatiq's own (2 x threads). Delayed jobs: ``send_with_options(
delay=ms)``. ``incr`` makes its one Redis round trip on a redis-py client of
the module's own (one pool for the process's threads), as a Dramatiq user
would; ``noop`` sleeps ``hold`` s with ``time.sleep`` (the I/O workload)."""

from __future__ import annotations

import os
import time
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from benchmarks._common import ENV_URL, INCR_KEY, PAD_PEER, env_concurrency, recorder
from benchmarks.peers._threads import ThreadProducer

NAME = "dramatiq"
BACKEND = "threads"
PACKAGES = ("dramatiq", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
broker = RedisBroker(url=_url)
dramatiq.set_broker(broker)
#: Connections for the handler threads (or the 32 producer threads): redis-py 8
#: caps a pool at 100 unless told, and a thread that finds none fails with
#: MaxConnectionsError.
POOL_SIZE = max(100, env_concurrency(1) + 16)
# connects lazily; one thread-safe pool for the handler threads
client = redis.Redis.from_url(_url, max_connections=POOL_SIZE)


@dramatiq.actor
def noop(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold:
        time.sleep(hold)


@dramatiq.actor
def incr(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip (sync redis-py), recorded once it is done."""
    client.incr(INCR_KEY)
    recorder().record(sent_at, due_at)


@dramatiq.actor
def blob(data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


ACTORS: dict[str, Any] = {"noop": noop, "incr": incr, "blob": blob}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [
        [
            f"{venv_bin}/dramatiq", "benchmarks.peers.dramatiq_bench",
            "--processes", str(processes), "--threads", str(concurrency),
        ]
    ]  # fmt: skip


class Producer(ThreadProducer):
    """``actor.send(...)``; delayed: ``send_with_options(delay=ms)``. (No
    batch enqueue: a group sends its messages one by one.)"""

    tasks = ACTORS

    def close(self) -> None:
        broker.close()

    def send(self, task: Any, args: tuple[Any, ...]) -> None:
        task.send(*args)

    def send_at(self, task: Any, args: tuple[Any, ...], due_at: float) -> None:
        delay = max(0, round((due_at - time.time()) * 1000))
        task.send_with_options(args=args, delay=delay)

    def send_after(self, task: Any, args: tuple[Any, ...], delay: float) -> None:
        task.send_with_options(args=args, delay=round(delay * 1000))


class Caller:
    """The caller benchmark (``benchmarks.enqueue_callers``, see
    ``benchmarks._common.run_caller``): ``actor.send(...)`` from sync code,
    one job per call; Dramatiq has no batch call."""

    one_label = "actor.send(...)"
    many_label = None

    def open(self, url: str) -> None:
        self.args = (time.time(), 0.0, 0.0, PAD_PEER)

    def close(self) -> None:
        broker.close()

    def one(self) -> None:
        noop.send(*self.args)


#: Caller class -> the peer's caller in that class (``benchmarks.enqueue_callers``).
PEER_CALLERS: dict[str, Any] = {"sync": Caller}
