"""Celery with the Redis broker, on threads: ``celery -A
benchmarks.peers.celery_bench worker --pool threads --concurrency C`` (one
process per worker; ``-n benchN@%h`` when there are several, as its docs say
for more than one worker on a host). Settings: ``Celery(broker=url)``, no
result backend and ``ignore_result`` on the tasks; the rest default (JSON,
prefetch multiplier 4, acks on receipt, gossip, mingle and heartbeats on).
Delayed jobs: ``apply_async(eta=...)`` (the worker holds them until due).
``incr`` makes its one Redis round trip on a redis-py client of the
module's own, as a Celery user would; ``noop`` sleeps ``hold`` s with
``time.sleep`` (the I/O workload)."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import redis
from celery import Celery

from benchmarks._common import ENV_URL, INCR_KEY, env_concurrency, recorder
from benchmarks.peers._threads import ThreadProducer

NAME = "celery"
BACKEND = "threads"
PACKAGES = ("celery", "kombu", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
app = Celery("bench", broker=_url)
# Celery 5 warns at start-up unless this is said either way (the default).
app.conf.broker_connection_retry_on_startup = True
#: Connections for the handler threads (or the 32 producer threads): redis-py 8
#: caps a pool at 100 unless told, and a thread that finds none fails with
#: MaxConnectionsError.
POOL_SIZE = max(100, env_concurrency(1) + 16)
# connects lazily; one thread-safe pool for the handler threads
client = redis.Redis.from_url(_url, max_connections=POOL_SIZE)


@app.task(name="noop", ignore_result=True)
def noop(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    recorder().record(sent_at, due_at)
    if hold:
        time.sleep(hold)


@app.task(name="incr", ignore_result=True)
def incr(sent_at: float, due_at: float, hold: float, pad: str) -> None:
    """One Redis round trip (sync redis-py), recorded once it is done."""
    client.incr(INCR_KEY)
    recorder().record(sent_at, due_at)


@app.task(name="blob", ignore_result=True)
def blob(data: str) -> None:
    """The memory workload's task: one 100-character str argument."""
    recorder().record(0.0, 0.0)


TASKS: dict[str, Any] = {"noop": noop, "incr": incr, "blob": blob}


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    argv = [
        f"{venv_bin}/celery", "-A", "benchmarks.peers.celery_bench", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
    ]  # fmt: skip
    if processes == 1:
        return [argv]
    return [[*argv, "-n", f"bench{i}@%h"] for i in range(processes)]


class Producer(ThreadProducer):
    """``task.delay(...)``; delayed: ``apply_async(eta=...)``. (No batch
    enqueue: a group publishes its messages one by one.)"""

    tasks = TASKS

    def close(self) -> None:
        app.close()

    def send(self, task: Any, args: tuple[Any, ...]) -> None:
        task.delay(*args)

    def send_at(self, task: Any, args: tuple[Any, ...], due_at: float) -> None:
        task.apply_async(args, eta=dt.datetime.fromtimestamp(due_at, dt.UTC))

    def send_after(self, task: Any, args: tuple[Any, ...], delay: float) -> None:
        task.apply_async(args, countdown=delay)
