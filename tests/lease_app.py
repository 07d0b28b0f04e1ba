"""The app of the lease process tests (tests/test_lease_process.py):
``tests.lease_app:app``, its store from ``$CHRONOS_URL``.

``lease.probe`` runs until cancelled, writing what it does to the file its
payload names, never to the store (the worker under test may be cut off
from it): ``start <pid> <attempt> <t>`` as it starts, ``tick <pid>
<attempt> <t>`` every ``tick`` seconds, and ``stop <pid> <attempt> <t>
<lease_lost>`` as it ends. ``t`` is ``time.monotonic()``, one clock for
every process on the host.
"""

from __future__ import annotations

import os
import time

import attrs
import trio

from chronos_trio import App, JobContext


@attrs.frozen
class Probe:
    path: str
    tick: float = 0.05


app = App(os.environ.get("CHRONOS_URL"))


def _note(path: str, *fields: object) -> None:
    # A plain append, flushed at once: nothing here may depend on the code
    # under test (nor yield to it).
    with open(path, "a") as f:
        f.write(" ".join(str(x) for x in fields) + "\n")


@app.task("lease.probe", timeout=600, max_retries=20)
async def probe(args: Probe, job: JobContext) -> None:
    pid = os.getpid()
    _note(args.path, "start", pid, job.attempt, f"{time.monotonic():.4f}")
    try:
        while True:
            await trio.sleep(args.tick)
            _note(args.path, "tick", pid, job.attempt, f"{time.monotonic():.4f}")
    finally:
        _note(args.path, "stop", pid, job.attempt, f"{time.monotonic():.4f}", job.lease_lost)
