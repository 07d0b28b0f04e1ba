"""Running an app's jobs until there are none left: :func:`run_until_idle`."""

from __future__ import annotations

from typing import Any

import trio

from ..app import App
from ..records._checks import check_seconds
from ..worker import Worker


async def run_until_idle(app: App, *, timeout: float = 60.0, **config: Any) -> Worker:
    """Run a worker of ``app`` (``config``: WorkerConfig's options) until it
    holds nothing and its queues have no pending job (scheduled, ready,
    leased, retry_wait: so delayed jobs and retries run too; on the
    virtual clock that takes no real time), then stop it gracefully and
    return it (``worker.statistics()`` says what it did).

    Raises ``trio.TooSlowError`` (after stopping the worker gracefully)
    when that takes more than ``timeout`` seconds on Trio's clock (a job
    that keeps failing into retries, a schedule that keeps firing), and
    what ``Worker.wait_idle`` raises (``MissingCapability`` on a store
    without admin, in the worker's ExceptionGroup); ValueError for a
    ``timeout`` that is not a finite number > 0."""
    check_seconds("timeout", timeout)
    async with app.open_worker(**config) as worker:
        with trio.move_on_after(timeout) as waited:
            await worker.wait_idle()
    if waited.cancelled_caught:  # raised here, not inside the worker's nursery
        raise trio.TooSlowError(f"{app.name}: jobs still pending after {timeout:g}s")
    return worker
