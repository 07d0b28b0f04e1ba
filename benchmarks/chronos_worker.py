"""One chronos_trio worker process for the benchmark.

``python -m benchmarks.chronos_worker``: runs ``benchmarks.chronos_app:app``
with ``concurrency`` from ``BENCH_CONCURRENCY`` and any other WorkerConfig
option from ``BENCH_OPTIONS`` (JSON) until SIGTERM/SIGINT, then shuts down
gracefully.
"""

from __future__ import annotations

import signal

import trio

from benchmarks._common import env_concurrency, env_options
from benchmarks.chronos_app import app


async def main() -> None:
    options = {"concurrency": env_concurrency(), **env_options()}
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with app.open_worker(**options):
            async for _ in signals:
                break
    await app.aclose()


if __name__ == "__main__":
    trio.run(main)
