"""The app the fault soak's worker processes run: ``tests.soak_app:app``.

Its store comes from ``$CHRONOS_URL``. Every handler records each run in an
append-only file of its own process, ``$CHRONOS_SOAK_RUNS/runs-<pid>.jsonl``
(``O_APPEND``, one ``write`` per line, no buffering in the process), so the
record survives a ``kill -9`` of the worker and a restart of Redis, and
depends on nothing under test. Two lines per run:

* ``{"ev": "start", "job", "attempt", "worker", "pid", "kind", "queue",
  "run_at", "t"}`` as the handler starts (``run_at`` as the leased record
  has it, ``t`` the wall clock);
* ``{"ev": "end", "job", "attempt", "worker", "pid", "t", "outcome",
  "lease_lost"}`` as it ends, ``outcome`` being ``ok``, ``fail`` (a planned
  failure), ``cancelled`` (a lost lease if ``lease_lost``; else a timeout
  when it ran for the task's :data:`TIMEOUTS`, or a shutdown) or ``error``
  (anything else). A run cut short by ``kill -9`` has no end line.

Tasks (all take :class:`Spec`): ``soak.work`` (immediate and delayed jobs),
``soak.flaky`` (fails on its first ``fail_times`` attempts), ``soak.slow``
(sleeps ``sleep`` seconds, over a heartbeat), ``soak.slow_sync`` (the same in
a plain function, in a worker thread, stopping cooperatively when called
off), ``soak.poison`` (always fails) and ``soak.poison_skip`` (raises
SkipRetry). With ``$CHRONOS_SOAK_SCHEDULES`` unset or ``1`` it also has an
interval schedule, ``every(1)``, of ``soak.tick`` in queue ``ticks``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import attrs
import orjson
import trio

from chronos_trio import App, JobCancelled, JobContext, RetryPolicy, SkipRetry

#: Retries of the jobs meant to succeed: lost leases use attempts up too, and
#: a soak loses many; the poison jobs get few, so they die quickly.
GOOD_RETRIES = 12
POISON_RETRIES = 2
#: Short backoffs keep the drain short (the default starts at 1 s, doubling).
FAST_RETRY = RetryPolicy(base=0.2, factor=2.0, max_delay=2.0)
#: Each task's timeout, by kind (the checker tells a timeout from a release).
TIMEOUTS = {
    "soak.work": 10.0,
    "soak.flaky": 10.0,
    "soak.slow": 20.0,
    "soak.slow_sync": 20.0,
    "soak.poison": 10.0,
    "soak.poison_skip": 10.0,
    "soak.tick": 10.0,
}
TICK_QUEUE = "ticks"
TICK_SCHEDULE = "soak.tick"


@attrs.frozen
class Spec:
    sleep: float = 0.0
    fail_times: int = 0


@attrs.frozen
class Tick:
    label: str = "tick"


class PlannedFailure(Exception):
    """A failure the job asked for (flaky and poison jobs)."""


class RunLog:
    """This process's run file; opened on first use (after a fork, anew)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0

    def write(self, record: dict[str, Any]) -> None:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:
            directory = os.environ["CHRONOS_SOAK_RUNS"]
            path = os.path.join(directory, f"runs-{pid}.jsonl")
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = pid
        # One write(2) of one line: whole, even if the process dies right after.
        os.write(self._fd, orjson.dumps(record) + b"\n")


RUNS = RunLog()


@contextlib.contextmanager
def recorded(job: JobContext) -> Iterator[None]:
    """Write this run's start line now and its end line when it ends."""
    base = {"job": job.id, "attempt": job.attempt, "worker": job.worker_id, "pid": os.getpid()}
    RUNS.write(
        {
            "ev": "start",
            **base,
            "kind": job.kind,
            "queue": job.queue,
            "run_at": job.job.run_at,
            "t": time.time(),
        }
    )
    outcome = "error"
    try:
        yield
        outcome = "ok"
    except (PlannedFailure, SkipRetry):
        outcome = "fail"
        raise
    except (trio.Cancelled, JobCancelled):
        outcome = "cancelled"
        raise
    finally:
        RUNS.write(
            {
                "ev": "end",
                **base,
                "t": time.time(),
                "outcome": outcome,
                "lease_lost": job.lease_lost,
            }
        )


def make_app(url: str | None, *, schedules: bool = True) -> App:
    app = App(url)

    def task(kind: str, retries: int, queue: str = "default") -> Any:
        return app.task(
            kind, queue=queue, max_retries=retries, timeout=TIMEOUTS[kind], retry=FAST_RETRY
        )

    @task("soak.work", GOOD_RETRIES)
    async def work(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            if spec.sleep:
                await trio.sleep(spec.sleep)

    @task("soak.flaky", GOOD_RETRIES)
    async def flaky(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            await trio.sleep(spec.sleep)
            if job.attempt <= spec.fail_times:
                raise PlannedFailure(f"planned failure on attempt {job.attempt}")

    @task("soak.slow", GOOD_RETRIES)
    async def slow(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            await trio.sleep(spec.sleep)

    @task("soak.slow_sync", GOOD_RETRIES)
    def slow_sync(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            until = time.monotonic() + spec.sleep
            while time.monotonic() < until:
                job.check_cancelled()
                time.sleep(0.05)

    @task("soak.poison", POISON_RETRIES)
    async def poison(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            raise PlannedFailure("poison: fails every time")

    @task("soak.poison_skip", POISON_RETRIES)
    async def poison_skip(spec: Spec, job: JobContext) -> None:
        with recorded(job):
            try:
                raise PlannedFailure("poison: never retried")
            except PlannedFailure as exc:
                raise SkipRetry(str(exc)) from exc

    @task("soak.tick", GOOD_RETRIES, queue=TICK_QUEUE)
    async def tick(args: Tick, job: JobContext) -> None:
        with recorded(job):
            pass

    if schedules:
        app.every(1, Tick(), task=tick, schedule_id=TICK_SCHEDULE)
    return app


app = make_app(
    os.environ.get("CHRONOS_URL"),
    schedules=os.environ.get("CHRONOS_SOAK_SCHEDULES", "1") == "1",
)
