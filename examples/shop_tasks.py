"""The tasks of a small shop, shared by its worker and its web code.

The worker runs them (``python -m chronos_trio worker shop_tasks:app``, from
this directory); the web code enqueues them and waits for their results
with a producer outside Trio (``producer_sync.py``: Flask/Django-style,
``producer_asyncio.py``: FastAPI-style). The store URL comes from
``$CHRONOS_URL``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import trio

import chronos_trio

app = chronos_trio.App(os.environ.get("CHRONOS_URL", "redis://127.0.0.1:6379/0"))


@attrs.frozen
class Order:
    order_id: str
    items: tuple[str, ...]


@attrs.frozen
class Receipt:
    order_id: str
    total_cents: int


@app.task("shop.checkout", max_retries=2)
async def checkout(order: Order, job: chronos_trio.JobContext) -> Receipt:
    if not order.items:
        raise chronos_trio.SkipRetry(f"order {order.order_id} is empty")
    await trio.sleep(0.05)  # the payment provider
    return Receipt(order.order_id, 250 * len(order.items))


@app.task("shop.thumbnail")
def thumbnail(image: bytes, job: chronos_trio.JobContext) -> bytes:  # a plain def: a thread
    return image[:8]


@contextlib.contextmanager
def worker_process() -> Iterator[subprocess.Popen[bytes]]:
    """A chronos_trio worker process for the demos (in production it is its
    own service: ``python -m chronos_trio worker shop_tasks:app``)."""
    here = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chronos_trio",
            "worker",
            "shop_tasks:app",
            "--log-level",
            "warning",
        ],
        cwd=here,
        env=env,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)  # a graceful shutdown
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
