"""chronos_trio on its SQLite store: ``App("sqlite:///DIR/jobs.db")`` with
the URL's defaults (WAL, ``synchronous=normal``: a commit is in the log, synced
at checkpoints; wake-ups polled every 20 ms), one task whose handler records its
start (``benchmarks._common``), then sleeps :data:`IO_WAIT` s
(``trio.sleep``) when the job's kind is ``io``, and ``hold`` seconds on its
first attempt when asked.

Jobs go in with ``task.enqueue`` (one call, one transaction) and
``task.enqueue_many`` (a batch, one transaction); delayed jobs with
``run_at``. Workers run the defaults but ``concurrency`` (and, in the
recovery phase, ``lease_duration=L``, ``max_in_flight=C``).

``python -m benchmarks.sqlite_systems.chronos``: one worker process (options
from the environment), until SIGTERM.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import attrs
import trio

import chronos_trio
from benchmarks._common import ENV_URL, PAD, env_concurrency, env_options, recorder
from benchmarks.sqlite_systems import IO_WAIT

BACKEND = "trio"
PACKAGES = ("chronos_trio", "trio")
KIND = "sqbench.job"
DELAYED = True
RECOVERY = "lease"


@attrs.frozen
class Job:
    """About 100 bytes as JSON, like the other benchmarks' payloads."""

    sent_at: float
    due_at: float = 0.0
    hold: float = 0.0
    tag: int = 0
    io: bool = False
    pad: str = PAD


#: Extra URL options (``synchronous=full``: the ``chronos_full`` contestant).
ENV_QUERY = "BENCH_SQLITE_QUERY"


def store_url(directory: str) -> str:
    """The store's URL for the run's directory (absolute: four slashes)."""
    query = os.environ.get(ENV_QUERY, "")
    return f"sqlite:///{os.path.abspath(directory)}/jobs.db" + (f"?{query}" if query else "")


async def handle(args: Job, ctx: chronos_trio.JobContext) -> None:
    recorder().record_tagged(args.sent_at, args.due_at, args.tag)
    if args.io:
        await trio.sleep(IO_WAIT)
    if args.hold and ctx.attempt == 1:
        await trio.sleep(args.hold)


def make_app(directory: str) -> tuple[chronos_trio.App, Any]:
    app = chronos_trio.App(store_url(directory), name="sqbench")
    task = app.task(KIND, max_retries=3, timeout=3600)(handle)
    return app, task


def _payload(job: dict[str, Any]) -> Job:
    return Job(
        sent_at=job["sent_at"],
        due_at=job["due_at"],
        hold=job["hold"],
        tag=job["tag"],
        io=job["kind"] == "io",
    )


async def _connect(app: chronos_trio.App) -> None:
    """Open the file (and create the schema) before anything is timed."""
    store: Any = app.store
    await store._db.read(lambda conn: None, what="connect")


async def install(url: str) -> None:
    app, _ = make_app(url)
    try:
        await _connect(app)
    finally:
        await app.aclose()


class Producer:
    bulk = True

    async def open(self, url: str) -> None:
        self.app, self.task = make_app(url)
        await _connect(self.app)

    async def close(self) -> None:
        await self.app.aclose()

    async def enqueue(self, job: dict[str, Any]) -> None:
        if job["due_at"]:
            await self.task.enqueue(_payload(job), run_at=job["due_at"])
        else:
            await self.task.enqueue(_payload(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        if any(j["due_at"] for j in jobs):
            new = self.task.new_job
            await self.app.enqueue_jobs(
                [
                    new(_payload(j), run_at=j["due_at"]) if j["due_at"] else new(_payload(j))
                    for j in jobs
                ]
            )
        else:
            await self.task.enqueue_many([_payload(j) for j in jobs])

    async def fill(self, jobs: list[dict[str, Any]]) -> None:
        for i in range(0, len(jobs), 1000):
            await self.enqueue_bulk(jobs[i : i + 1000])


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.sqlite_systems.chronos"]


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


async def sleep(seconds: float) -> None:
    await trio.sleep(seconds)


async def _worker() -> None:
    options = env_options()
    config: dict[str, Any] = {"concurrency": env_concurrency()}
    if options.get("lease"):
        config.update(lease_duration=float(options["lease"]), max_in_flight=env_concurrency())
    app, _ = make_app(os.environ[ENV_URL])
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with app.open_worker(**config):
                async for _ in signals:
                    break
    finally:
        await app.aclose()


if __name__ == "__main__":
    recorder()  # a progress file at once, before any job runs
    trio.run(_worker)
