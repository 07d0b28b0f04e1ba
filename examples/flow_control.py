"""Flow control in one worker: priorities, a rate limit, a per-tenant
concurrency limit, an upstream's 429 and an expired job.

* ``report`` jobs run by priority: the urgent one first.
* ``geo.lookup`` is limited to 20 starts a second (a burst of 2) for the
  whole fleet; the handler of one lookup is told "429, retry in 0.3 s" once
  and runs again without using an attempt.
* ``export`` runs at most 2 at once per tenant.
* A ``report`` that expired before it could start is dead-lettered.

python examples/flow_control.py                     # embedded store, one process
CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/flow_control.py
"""

from __future__ import annotations

import os

import attrs
import trio

import chronos_trio
from chronos_trio import ConcurrencyLimit, JobContext, RateLimit, RateLimited


@attrs.frozen
class Export:
    tenant: str
    n: int


app = chronos_trio.App(os.environ.get("CHRONOS_URL"))
ran: list[str] = []
lookups: list[float] = []
running: dict[str, int] = {}
peak: dict[str, int] = {}
told_429 = False


@app.task("report")
async def report(name: str, job: JobContext) -> None:
    ran.append(name)


@app.task("geo.lookup", rate_limit=RateLimit(20, per=1.0, burst=2))
async def lookup(n: int, job: JobContext) -> None:
    global told_429
    if n == 3 and not told_429:
        told_429 = True
        raise RateLimited(0.3, "upstream said 429")
    lookups.append(trio.current_time())


@app.task("export", concurrency_limit=ConcurrencyLimit(2, key=lambda e: f"tenant:{e.tenant}"))
async def export(e: Export, job: JobContext) -> None:
    running[e.tenant] = running.get(e.tenant, 0) + 1
    peak[e.tenant] = max(peak.get(e.tenant, 0), running[e.tenant])
    await trio.sleep(0.1)
    running[e.tenant] -= 1


@app.on_dead_letter
async def dead(job: chronos_trio.Job) -> None:
    print(f"dead: {job.kind} {job.last_error.split(' (')[0]}")


async def main() -> None:
    for name, priority in [("weekly", -5), ("daily", 0), ("urgent", 9)]:
        await report.enqueue(name, priority=priority)
    await report.enqueue("stale", delay=0.5, expires=0.2)  # due after its expiry
    await lookup.enqueue_many(list(range(10)))
    await export.enqueue_many([Export(t, n) for t in ("acme", "globex") for n in range(4)])
    async with app.open_worker(concurrency=16, poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
            await trio.sleep(0.1)  # the dead-letter hook runs off the settle path
    print(f"reports by priority: {ran}")
    span = lookups[-1] - lookups[0]
    print(f"lookups: {len(lookups)} in {span:.2f}s (at most 20/s after a burst of 2)")
    print(f"exports at once per tenant: {dict(sorted(peak.items()))}")
    await app.aclose()


if __name__ == "__main__":
    trio.run(main)
