"""Schedule test helpers, and a worker process entry for the Redis tests.

In-process: :class:`Fleet` runs several workers in one Trio run, each with its
own App (as separate processes would have) over one shared MemoryStore; every
App registers the same schedules, and every store call of a worker goes
through its own :class:`TriggerLog` wrapper, so a test can both cut one worker
off the store and see which worker's ``enqueue_trigger`` did what.

As a process (the Redis tests)::

    python -m tests.schedule_app REDIS_URL WORKER_ID [LEADER_TTL [stored]]

runs one worker whose app has a 1-second ``every`` schedule (with
``stored``: no schedule in code, only those kept in the store, which the
test edits); each run of the
``tick`` task appends ``"<job id> <attempt> <worker id>"`` to the Redis list
``ticks``.
"""

from __future__ import annotations

import collections
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from chronos_trio import App, JobContext, MemoryStore, NewJob, Task, Worker, WorkerConfig
from chronos_trio.store import Store, TriggerResult
from chronos_trio.testing import FaultyStore

#: Worker options for in-process schedule tests (virtual time).
FAST = {"poll_interval": 0.5, "lease_duration": 5.0, "leader_ttl": 6.0}


@attrs.frozen
class Tick:
    label: str = "tick"


@attrs.frozen
class TriggerCall:
    worker: str
    epoch: int
    schedule_id: str
    fire_at: float
    result: TriggerResult


class TriggerLog(FaultyStore):
    """A FaultyStore that also records every ``enqueue_trigger`` outcome."""

    def __init__(self, inner: Store, worker: str, calls: list[TriggerCall]) -> None:
        super().__init__(inner)
        self.worker = worker
        self.trigger_calls = calls

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        self._maybe_fail("enqueue_trigger")
        result = await self.inner.enqueue_trigger(name, epoch, schedule_id, fire_at, job)
        self.trigger_calls.append(TriggerCall(self.worker, epoch, schedule_id, fire_at, result))
        return result


def anchored_store(base: float) -> MemoryStore:
    """A MemoryStore whose clock reads ``base`` now and follows Trio's clock,
    so tests can assert exact trigger times under ``autojump_clock``."""
    t0 = trio.current_time()
    return MemoryStore(clock=lambda: base + trio.current_time() - t0)


Register = Callable[[App, Task[Tick]], object]


@attrs.define
class Run:
    job_id: str
    attempt: int
    fire_at: float
    ran_at: float
    worker: str


class Fleet:
    """N workers (``w0``, ``w1``...) with the same schedules over one store."""

    def __init__(self, store: Store, register: Register, *, size: int = 3) -> None:
        self.store = store
        self.register = register
        self.calls: list[TriggerCall] = []
        self.runs: list[Run] = []
        self.stores: dict[str, TriggerLog] = {}
        self.workers: dict[str, Worker] = {}
        self.size = size

    def make_app(self, worker_id: str) -> App:
        # FaultyStore fills in its methods at import time; mypy cannot see that.
        store = TriggerLog(self.store, worker_id, self.calls)  # type: ignore[abstract]
        self.stores[worker_id] = store
        app = App(store)

        @app.task("tick")
        async def tick(args: Tick, job: JobContext) -> None:
            self.runs.append(
                Run(job.id, job.attempt, job.job.run_at, await job.app.store.now(), worker_id)
            )

        self.register(app, tick)
        return app

    async def start(self, nursery: trio.Nursery, worker_id: str, **options: Any) -> Worker:
        app = self.make_app(worker_id)
        worker = Worker(app, WorkerConfig.build(worker_id=worker_id, **{**FAST, **options}))
        self.workers[worker_id] = worker
        await nursery.start(worker.run)
        return worker

    @asynccontextmanager
    async def running(self, **options: Any) -> AsyncIterator[Fleet]:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            for i in range(self.size):
                await self.start(nursery, f"w{i}", **options)
            try:
                yield self
            finally:
                for worker in self.workers.values():
                    worker.stop()

    async def stop(self, worker_id: str) -> None:
        worker = self.workers[worker_id]
        worker.stop()
        await worker.wait_stopped()

    # -- what happened -----------------------------------------------------------
    def leaders(self) -> list[str]:
        """Workers that currently believe they lead."""
        return [
            wid
            for wid, w in self.workers.items()
            if w._rt is not None and w.runtime.leadership.value is not None
        ]

    def enqueued(self) -> list[float]:
        """Trigger times the store accepted, in order."""
        return [c.fire_at for c in self.calls if c.result is TriggerResult.ENQUEUED]

    def first_runs(self) -> collections.Counter[str]:
        """First attempts per job ID: a trigger enqueued twice would show 2."""
        return collections.Counter(r.job_id for r in self.runs if r.attempt == 1)


# -- the worker process for the Redis tests ---------------------------------------------
def build_app(url: str, *, code_schedule: bool = True) -> App:
    import redis

    app = App(url)
    client = redis.Redis.from_url(url)

    @app.task("tick")
    async def tick(args: Tick, job: JobContext) -> None:
        line = f"{job.id} {job.attempt} {job.worker_id}"
        await trio.to_thread.run_sync(client.rpush, "ticks", line)

    if code_schedule:
        app.every(1, Tick(), task=tick, schedule_id="tick")
    return app


async def _main(url: str, worker_id: str, leader_ttl: float, code_schedule: bool) -> None:
    app = build_app(url, code_schedule=code_schedule)
    async with app.open_worker(
        worker_id=worker_id,
        leader_ttl=leader_ttl,
        poll_interval=0.2,
        lease_duration=10,
        shutdown_grace=1,
    ):
        print(f"ready {worker_id}", flush=True)
        await trio.sleep_forever()


def main(argv: list[str]) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    url, worker_id = argv[0], argv[1]
    ttl = float(argv[2]) if len(argv) > 2 else 2.0
    code_schedule = argv[3:4] != ["stored"]
    try:
        trio.run(_main, url, worker_id, ttl, code_schedule)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
