"""Celery's workflows for ``benchmarks.workflows`` (driven by
``benchmarks.peers.flows``, in Celery's own venv).

Worker: ``celery -A benchmarks.peers.celery_flows worker --pool threads
--concurrency 64`` (one process). Settings: ``Celery(broker=url,
backend=url)``, the broker and Celery's Redis result backend on the same
private redis-server (chains need a backend to pass results and chords to
join their members); the rest default (JSON, prefetch multiplier 4, acks on
receipt, results kept 1 day, gossip, mingle and heartbeats on). Every task
stores its result (no ``ignore_result``), as chronos_trio's handlers here do
(each returns a value, which it stores).

* plain: ``N`` x ``add.delay(k)`` sent before the worker starts; the
  handler returns ``k + 1`` (its result stored);
* chains: ``chain(add.s(0), add.s(), ...)`` of 10 links, ``C`` of them
  applied at once, each ``apply_async().get()`` waited for (the last link's
  result, 10);
* chord: ``chord([member.s(k) for k in range(M)])(callback.s())`` (the Redis
  backend's native chord join: a counter in Redis, the last member's
  worker thread sends the callback), the callback gets the ``M`` results.

Timestamps come from the handlers (``benchmarks._common`` recorder, and the
callback's start written to Redis), not from the producer.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, chain, chord

from benchmarks._common import ENV_URL, recorder
from benchmarks.peers.flows import LINKS, callback_mark

NAME = "celery"
BACKEND = "threads"
PACKAGES = ("celery", "kombu", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
app = Celery("flows", broker=_url, backend=_url)
# Celery 5 warns at start-up unless this is said either way (the default).
app.conf.broker_connection_retry_on_startup = True


@app.task(name="warm")
def warm() -> int:
    recorder()  # starts the recorder's thread (no job counted)
    return 1


@app.task(name="add")
def add(payload: int) -> int:
    recorder().record(0.0, 0.0)
    return payload + 1


@app.task(name="member")
def member(k: int) -> int:
    recorder().record(0.0, 0.0)
    return k


@app.task(name="callback")
def callback(results: list[int]) -> int:
    callback_mark(_client(), len(results))
    return len(results)


def _client() -> Any:
    # The result backend's own redis-py client (thread-safe, pooled).
    return app.backend.client


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [[
        f"{venv_bin}/celery", "-A", "benchmarks.peers.celery_flows", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
    ]]  # fmt: skip


def send_plain(k: int) -> None:
    add.delay(k)


def warm_up(timeout: float) -> None:
    warm.delay().get(timeout=timeout)


def start_chain() -> Any:
    return chain(add.s(0), *(add.s() for _ in range(LINKS - 1))).apply_async()


def chain_result(handle: Any, timeout: float) -> Any:
    return handle.get(timeout=timeout)


def start_chord(m: int) -> Any:
    return chord([member.s(k) for k in range(m)])(callback.s())


def chord_result(handle: Any, timeout: float) -> Any:
    return handle.get(timeout=timeout)


def redis_client() -> Any:
    return _client()


def close() -> None:
    app.close()
