"""Dramatiq's workflows for ``benchmarks.workflows`` (driven by
``benchmarks.peers.flows``, in Dramatiq's own venv).

Worker: ``dramatiq benchmarks.peers.dramatiq_flows --processes 1 --threads
64``. Settings: ``RedisBroker(url=...)`` with the default middleware (which
includes ``Pipelines``) plus ``Results(backend=dramatiq.results.backends.
RedisBackend(client=redis.Redis.from_url(url, socket_timeout=None)))`` and
``GroupCallbacks(dramatiq.rate_limits.backends.RedisBackend(url=...))``, all
on the same private redis-server; every actor
``store_results=True`` (chronos_trio's handlers here store their results
too), the actors' other defaults (retries, time limit); prefetch Dramatiq's
own (2 x threads).

* plain: ``N`` x ``add.send(k)`` sent before the worker starts; the actor
  returns ``k + 1`` (its result stored);
* chains: ``pipeline([add.message(0), add.message(), ...])`` of 10 links,
  ``C`` of them ``run()`` at once, each ``get_result(block=True)`` waited for
  (10). The ``Pipelines`` middleware hands each link's return value to the
  next message in the worker, whether or not a result backend is set; the
  ``Results`` middleware is what lets the producer read the last link's
  result (and stores every link's);
* chord: ``group([member.message(k) for k in range(M)])
  .add_completion_callback(callback.message())`` then ``run()``: a barrier
  (a counter in Redis) set to ``M``, each member's worker thread decrements
  it, the last one sends the callback. The callback gets no member results
  (Dramatiq passes none; it reports the members its process counted
  instead); its result, stored, is what the producer waits for. The
  callback's start waits on the worker's consumer: once it found the queue
  empty (the last members prefetched) it polls with an exponential backoff
  of up to the worker timeout (1 s by default).

The result backend's client has no socket timeout: redis-py 8 made its
default 5 s, and the backend's blocking wait (``BRPOPLPUSH`` for the whole
``get_result`` timeout) then fails after 5 s with ``redis.exceptions.
TimeoutError`` instead of waiting (``ResultTimeout``) as Dramatiq documents;
with ``url=...`` the backend builds its pool from the URL alone, so the
client is passed instead.

Timestamps come from the handlers (``benchmarks._common`` recorder, and the
callback's start written to Redis), not from the producer.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend as RateLimiterBackend
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend as ResultBackend

from benchmarks._common import ENV_URL, recorder
from benchmarks.peers.flows import LINKS, callback_mark

NAME = "dramatiq"
BACKEND = "threads"
PACKAGES = ("dramatiq", "redis", "hiredis")

_url = os.environ.get(ENV_URL, "redis://127.0.0.1:1")
broker = RedisBroker(url=_url)
results = ResultBackend(client=redis.Redis.from_url(_url, socket_timeout=None))
broker.add_middleware(Results(backend=results))
broker.add_middleware(GroupCallbacks(RateLimiterBackend(url=_url)))
dramatiq.set_broker(broker)


@dramatiq.actor(store_results=True)
def warm() -> int:
    recorder()  # starts the recorder's thread (no job counted)
    return 1


@dramatiq.actor(store_results=True)
def add(payload: int) -> int:
    recorder().record(0.0, 0.0)
    return payload + 1


@dramatiq.actor(store_results=True)
def member(k: int) -> int:
    recorder().record(0.0, 0.0)
    return k


@dramatiq.actor(store_results=True)
def callback() -> int:
    # No member results reach a completion callback: count this process's.
    seen = recorder().count
    callback_mark(broker.client, seen)
    return seen


def worker_commands(venv_bin: str, concurrency: int, processes: int) -> list[list[str]]:
    return [[
        f"{venv_bin}/dramatiq", "benchmarks.peers.dramatiq_flows",
        "--processes", str(processes), "--threads", str(concurrency),
    ]]  # fmt: skip


def send_plain(k: int) -> None:
    add.send(k)


def _ms(timeout: float) -> int:
    # The Redis result backend waits whole seconds (BRPOPLPUSH): at least one.
    return max(1000, int(timeout * 1000))


def warm_up(timeout: float) -> None:
    warm.send().get_result(block=True, timeout=_ms(timeout))


def start_chain() -> Any:
    links = [add.message(0), *(add.message() for _ in range(LINKS - 1))]
    return dramatiq.pipeline(links).run()


def chain_result(handle: Any, timeout: float) -> Any:
    return handle.get_result(block=True, timeout=_ms(timeout))


def start_chord(m: int) -> Any:
    done = callback.message()
    flow = dramatiq.group([member.message(k) for k in range(m)])
    flow.add_completion_callback(done)
    flow.run()
    return done  # the callback is sent as this message (same id)


def chord_result(handle: Any, timeout: float) -> Any:
    return handle.get_result(backend=results, block=True, timeout=_ms(timeout))


def redis_client() -> Any:
    return broker.client


def close() -> None:
    broker.close()
