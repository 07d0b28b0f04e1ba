"""procrastinate (psycopg 3): one task (``pass_context``), its worker run by
``App.run_worker_async`` with ``concurrency`` and the defaults otherwise
(LISTEN/NOTIFY, a 5 s fetch poll); jobs deferred with ``defer_async``, in
bulk with ``batch_defer_async`` (jobs with distinct due times one call each:
a batch shares one ``schedule_at``).

Recovery: procrastinate leaves a dead worker's jobs in ``doing``; its docs
have users retry them from a periodic task calling
``job_manager.get_stalled_jobs`` (workers without a heartbeat for
``seconds_since_heartbeat`` s) and ``retry_job``. Here, with a lease of L
seconds, workers beat every L/3 s and that recipe runs every second in each
worker with ``seconds_since_heartbeat=L`` (its cron form runs at most once a
minute by default: this is the generous reading).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from typing import Any

from procrastinate import App, PsycopgConnector

from benchmarks._common import ENV_URL, env_concurrency
from benchmarks.pg_systems import _aio

BACKEND = "asyncio"
PACKAGES = ("procrastinate", "psycopg", "psycopg-pool")
run, sleep = _aio.run, _aio.sleep

app = App(connector=PsycopgConnector(conninfo=os.environ.get(ENV_URL, "")))


@app.task(name="pgbench.job", queue="bench", pass_context=True)
async def handle(context: Any, **args: Any) -> None:
    await _aio.body(args, context.job.attempts + 1)


async def install(url: str) -> None:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def _at(due_at: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(due_at, dt.UTC)


class Producer:
    bulk = True

    async def open(self, url: str) -> None:
        await app.open_async()

    async def close(self) -> None:
        await app.close_async()

    async def enqueue(self, job: dict[str, Any]) -> None:
        if job["due_at"]:
            await handle.configure(schedule_at=_at(job["due_at"])).defer_async(**_aio.fields(job))
        else:
            await handle.defer_async(**_aio.fields(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        if any(j["due_at"] for j in jobs):
            for j in jobs:
                await self.enqueue(j)
        else:
            await handle.batch_defer_async(*(_aio.fields(j) for j in jobs))


async def _retry_stalled(seconds: float) -> None:
    """The docs' stalled-job recipe, every second."""
    while True:
        await asyncio.sleep(1.0)
        for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds):
            await app.job_manager.retry_job(job)


async def _serve(options: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {
        "concurrency": env_concurrency(),
        "queues": ["bench"],
        "install_signal_handlers": False,
    }
    async with app.open_async():
        reaper = None
        if options.get("lease"):
            lease = float(options["lease"])
            kwargs.update(update_heartbeat_interval=lease / 3, stalled_worker_timeout=lease)
            reaper = asyncio.create_task(_retry_stalled(lease))
        try:
            await app.run_worker_async(**kwargs)
        finally:
            if reaper is not None:
                reaper.cancel()


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.pg_systems.procrastinate"]


if __name__ == "__main__":
    asyncio.run(_aio.worker_main(_serve))
