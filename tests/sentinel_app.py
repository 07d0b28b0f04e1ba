"""The app of the Sentinel failover test: ``tests.sentinel_app:app``.

Its store comes from ``$CHRONOS_URL``. Every finished run of
``sentinel.tick`` is recorded outside the store under test (its Redis fails
over mid-run): in this module's CLI worker, as one line ``<job id> <pid>
<time.time()>`` appended to ``$CHRONOS_RUNS_FILE``; in the test's embedded
workers, by the callback given to :func:`make_app`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import attrs
import trio

from chronos_trio import App, JobContext


@attrs.frozen
class Tick:
    n: int


def make_app(url: str | None, record: Callable[[str], None] | None = None) -> App:
    app = App(url)

    @app.task("sentinel.tick", max_retries=20, timeout=30)
    async def tick(args: Tick, job: JobContext) -> None:
        await trio.sleep(0.005)
        if record is not None:
            record(job.id)

    return app


def _append_run(job_id: str) -> None:
    # One write of one short line to an O_APPEND file: lines never interleave.
    line = f"{job_id} {os.getpid()} {time.time():.4f}\n".encode()
    fd = os.open(os.environ["CHRONOS_RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


app = make_app(os.environ.get("CHRONOS_URL"), _append_run)
