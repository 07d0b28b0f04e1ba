"""persist-queue's ``SQLiteAckQueue(DIR/pq, multithreading=True)`` (WAL,
``synchronous`` left at SQLite's FULL): a queue with acknowledgements and no
worker of its own, so a worker process here is C threads, each looping
``get(timeout=0.1, raw=True)``, the handler, ``ack(id=...)``. (Its blocking
``get()`` wakes at once only for a ``put`` of the same process; for another
process's it looks every 10 s: the 0.1 s poll is the generous reading.)

Jobs go in with ``put(job)`` (one transaction each; there is no batch put).
It has no delayed jobs. A ``get`` marks the row unacknowledged, with no
lease: the rows of a worker killed with SIGKILL stay so until a process
opens the queue with ``auto_resume=True`` (the default), which resets EVERY
unacknowledged row to ready, a live worker's included. So workers started
beside a running one are opened with ``auto_resume=False`` here, and the
recovery phase starts a replacement worker (``auto_resume=True``) right
after the kill, as a process manager would. Its ``get`` is a SELECT and an
UPDATE in two transactions, serialized in one process only: two processes
can take the same row (the multi-process drain counts such duplicates).

``python -m benchmarks.sqlite_systems.persistqueue``: one worker process
(options from the environment), until SIGTERM.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from persistqueue import SQLiteAckQueue
from persistqueue.exceptions import Empty

from benchmarks._common import ENV_URL, env_concurrency, env_options, recorder
from benchmarks.sqlite_systems import _sync

BACKEND = "threads"
PACKAGES = ("persist-queue",)
DELAYED = False
RECOVERY = "restart"
#: Seconds each worker thread's ``get`` waits before it looks again.
POLL = 0.1
run, sleep = _sync.run, _sync.sleep


def open_queue(resume: bool = True) -> SQLiteAckQueue:
    path = os.path.join(os.environ.get(ENV_URL, "."), "pq")
    return SQLiteAckQueue(path, multithreading=True, auto_resume=resume)


async def install(url: str) -> None:
    open_queue(resume=False).close()


class Producer:
    bulk = False

    async def open(self, url: str) -> None:
        self.queue = open_queue(resume=False)

    async def close(self) -> None:
        self.queue.close()

    async def enqueue(self, job: dict[str, Any]) -> None:
        self.queue.put(_sync.fields(job))

    async def enqueue_bulk(self, jobs: list[dict[str, Any]]) -> None:
        for job in jobs:
            await self.enqueue(job)

    async def fill(self, jobs: list[dict[str, Any]]) -> None:
        """The rows ``put(job)`` writes (its own serializer and statement),
        in one transaction."""
        q = self.queue
        rows = [(q._serializer.dumps(_sync.fields(j)), time.time()) for j in jobs]
        with q.tran_lock, q._putter as tran:
            tran.executemany(q._sql_insert, rows)
        q.total += len(rows)


def _consume(queue: SQLiteAckQueue, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            item = queue.get(timeout=POLL, raw=True)
        except Empty:
            continue
        _sync.body(item["data"])
        queue.ack(id=item["pqid"])


def worker_argv(python: str) -> list[str]:
    return [python, "-m", "benchmarks.sqlite_systems.persistqueue"]


def _worker() -> None:
    stop = _sync.stop_on_signals()
    queue = open_queue(resume=bool(env_options().get("resume", False)))
    for i in range(env_concurrency()):
        threading.Thread(target=_consume, args=(queue, stop), name=f"pq-{i}", daemon=True).start()
    stop.wait()


if __name__ == "__main__":
    recorder()  # a progress file at once, before any job runs
    _worker()
