"""What the thread-based SQLite peers (huey, persist-queue) share: the
handler's body (run in a worker thread), ``run`` and ``sleep`` for the
driver's producer (asyncio over their blocking calls: the producer is one
coroutine, nothing else runs beside it) and SIGTERM for a worker process."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

from benchmarks._common import PAD_PEER, recorder
from benchmarks.sqlite_systems import IO_WAIT


def run(fn: Any, *args: Any) -> Any:
    return asyncio.run(fn(*args))


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def fields(job: dict[str, Any]) -> dict[str, Any]:
    """A job's arguments as the peers' handlers take them (about 100 bytes)."""
    return {**job, "pad": PAD_PEER}


def body(job: dict[str, Any], attempt: int = 1) -> None:
    """The handler of every thread peer: the start recorded, then (kind
    ``io``) :data:`IO_WAIT` s of ``time.sleep``, then (first attempt)
    ``hold`` seconds asleep."""
    recorder().record_tagged(job["sent_at"], job["due_at"], job["tag"])
    if job.get("kind") == "io":
        time.sleep(IO_WAIT)
    hold = job.get("hold") or 0.0
    if hold and attempt <= 1:
        time.sleep(hold)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (install from the main thread)."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return stop
