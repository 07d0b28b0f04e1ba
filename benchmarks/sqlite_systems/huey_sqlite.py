"""huey 3 with its SQLite storage: ``SqliteHuey("sqbench",
filename=DIR/huey.db)`` with its defaults (WAL, ``synchronous`` left at
SQLite's FULL, a 5 s busy timeout, one connection per process shared by its
threads under a lock), one task; the consumer as ``huey_consumer`` runs it
(``create_consumer(workers=C, worker_type="thread")``), with its defaults:
each worker thread polls the task table, backing off from 0.1 s by x1.15 up
to 10 s while it finds nothing; the scheduler (delayed jobs) looks every 1 s.

Jobs go in with ``task(job)`` (one ``BEGIN EXCLUSIVE`` transaction; huey has
no batch enqueue: ``Task.map`` enqueues one by one) and, delayed,
``task.schedule((job,), eta=...)``. A dequeue deletes the row: a worker
killed with SIGKILL loses the jobs it took (at most once, no recovery).

:func:`serve`: one consumer process (options from the environment), until
SIGTERM.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from huey import SqliteHuey

from benchmarks._common import ENV_URL, env_concurrency, recorder
from benchmarks.sqlite_systems import _sync

BACKEND = "threads"
PACKAGES = ("huey",)
DELAYED = True
RECOVERY = "none"
run, sleep = _sync.run, _sync.sleep

huey = SqliteHuey("sqbench", filename=os.path.join(os.environ.get(ENV_URL, "."), "huey.db"))


@huey.task()
def handle(job: dict[str, Any]) -> None:
    _sync.body(job)


async def install(url: str) -> None:
    """The tables are made when ``huey`` is (at import)."""


class Producer:
    bulk = False

    async def open(self, url: str) -> None:
        pass

    async def close(self) -> None:
        huey.storage.close()

    async def enqueue(self, job: dict[str, Any]) -> None:
        if job["due_at"]:
            handle.schedule(
                (_sync.fields(job),), eta=dt.datetime.fromtimestamp(job["due_at"], dt.UTC)
            )
        else:
            handle(_sync.fields(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            await self.enqueue(job)

    async def fill(self, jobs: list[dict[str, Any]]) -> None:
        """The rows ``handle(job)`` writes (huey's own message of each), in
        one transaction."""
        rows = [(huey.name, huey.serialize_task(handle.s(_sync.fields(j))), 0) for j in jobs]
        with huey.storage.db(commit=True) as curs:
            curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)


def serve() -> None:
    """One consumer process, as ``huey_consumer ...huey_sqlite.huey -w C -k
    thread`` runs it."""
    recorder()  # a progress file at once, before any job runs
    huey.create_consumer(workers=env_concurrency(), worker_type="thread").run()


def worker_argv(python: str) -> list[str]:
    # imported, not run as __main__: huey names a task by its module
    return [python, "-c", "from benchmarks.sqlite_systems.huey_sqlite import serve; serve()"]
