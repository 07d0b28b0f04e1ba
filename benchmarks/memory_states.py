"""Redis bytes per job in each state a job waits in (issue 27, item 4).

``python -m benchmarks.memory_states [--jobs N]``: on a private
redis-server (``benchmarks._redis.open_redis``), for each of

* ``delayed``: N jobs due in an hour (``enqueue_many`` of 1,000);
* ``ready``: N jobs due now, no worker;
* ``succeeded+result``: N jobs whose handler returns a small attrs result,
  run by a worker in this process and kept for the result (the task's
  ``result_ttl``, an hour by default);
* ``succeeded``: the same with a handler that returns None (the record is
  deleted at once unless ``retain_succeeded`` is set);
* ``succeeded+retained``: the same with ``retain_succeeded`` an hour (the
  record listed in the partition's succeeded index, trimmed by the janitor);
* the two kept states again with ``+compact``: a store with
  ``compact_succeeded`` (the success settle writes a compact record),

the ``used_memory`` delta over the jobs / N and every key group with its
type, encoding and ``MEMORY USAGE`` (``benchmarks._memory.measure``). The
payload is the memory workload's: one 100-character str
(``{"data":"xx..x"}``, 111 bytes). Prints a table and writes JSON
(``--out``). Memory figures do not depend on load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import attrs
import trio

import chronos_trio
from benchmarks import _common as common
from benchmarks import _memory as mem
from benchmarks._redis import open_redis

BATCH = 1000


@attrs.frozen
class Blob:
    data: str


@attrs.frozen
class Small:
    ok: bool


def make_app(url: str) -> tuple[chronos_trio.App, dict[str, chronos_trio.Task[Blob]]]:
    app = chronos_trio.App(url, name="mem")

    @app.task("mem.none")
    async def none(args: Blob, job: chronos_trio.JobContext) -> None:
        return None

    @app.task("mem.result")
    async def result(args: Blob, job: chronos_trio.JobContext) -> Small:
        return Small(True)

    @app.task("mem.retained", retain_succeeded=3600.0)
    async def retained(args: Blob, job: chronos_trio.JobContext) -> None:
        return None

    return app, {"none": none, "result": result, "retained": retained}


async def store_jobs(url: str, n: int, state: str) -> dict[str, Any]:
    if state.endswith(COMPACT):  # the store's compact_succeeded option
        state, url = state.removesuffix(COMPACT), url + "?compact_succeeded=1"
    app, tasks = make_app(url)
    payload = Blob(common.MEMORY_DATA)
    task = tasks[
        {"succeeded+result": "result", "succeeded+retained": "retained"}.get(state, "none")
    ]
    delay = common.MEMORY_DELAY if state == "delayed" else 0.0
    for start in range(0, n, BATCH):
        await task.enqueue_many([payload] * min(BATCH, n - start), delay=delay)
    if state.startswith("succeeded"):
        async with app.open_worker(concurrency=64, batch_size=64) as worker:
            with trio.fail_after(300):
                await worker.wait_idle()
    await app.aclose()
    return {"enqueued": n, "ok": True}


#: A state's suffix for a store made with ``compact_succeeded`` (off by default).
COMPACT = "+compact"
STATES = (
    "delayed",
    "ready",
    "succeeded+result",
    "succeeded+result" + COMPACT,
    "succeeded+retained",
    "succeeded+retained" + COMPACT,
    "succeeded",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/memory_states.json"))
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    with open_redis() as redis:
        for state in args.states.split(","):

            def fill(state: str = state) -> dict[str, Any]:
                return trio.run(store_jobs, redis.url, args.jobs, state)

            rows[state] = mem.measure(redis.client, fill)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1, default=str))
    for state, row in rows.items():
        print(f"== {state}: {row['bytes_per_job']:.0f} B/job (used_memory delta / {args.jobs:,}),"
              f" {row['keys_per_job']:.2f} keys/job")  # fmt: skip
        for g in row.get("key_groups", []):
            print(f"   {g['pattern'][:60]:60s} {g['type']:6s} {g['encoding']:9s} n={g['count']:<6d}"
                  f" usage={g['memory_usage']:<8d} per_job={g['bytes_per_job']:.1f}"
                  f" ttl={g['ttl_s']}")  # fmt: skip


if __name__ == "__main__":
    main()
