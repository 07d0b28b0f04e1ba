"""Fleet-wide flow control end to end: three worker processes
(``python -m chronos_trio worker tests.tests_app:app --processes 3``) share
one rate limit and one concurrency limit through the test Redis; the
handlers record when they ran (``record_run`` in tests/tests_app.py)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import pytest
import trio

from tests.test_process_e2e import LEASE, Manager, Runs
from tests.tests_app import Record, make_app

pytestmark = pytest.mark.redis


def _flow_workers(url: str, tmp_path: Path) -> Manager:
    return Manager(url, tmp_path, "--queues", "flow", "--concurrency", "16", processes=3)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that hold at one instant (an end before a start at a tie)."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    running = worst = 0
    for _, step in edges:
        running += step
        worst = max(worst, running)
    return worst


async def test_rate_limit_holds_across_three_processes(redis_url: str, tmp_path: Path) -> None:
    limit, burst, seconds = 50, 5, 20.0  # tests.rated: RateLimit(50, per=1.0, burst=5)
    manager = _flow_workers(redis_url, tmp_path)
    producer = make_app(redis_url)
    runs = Runs(redis_url, "rated")
    try:
        with trio.fail_after(seconds + 40):
            await manager.wait_ready()
            # more than the limit lets start in the window: a backlog throughout
            await producer.tasks["tests.rated"].enqueue_many(
                [Record("rated", sleep=0.01) for _ in range(int(limit * seconds) + 200)]
            )
            first: float | None = None
            while first is None or time.time() < first + seconds + 0.5:
                starts = await runs.lines("start")
                if starts and first is None:
                    first = min(float(line[2]) for line in starts)
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.25)
            starts = await runs.lines("start")
    finally:
        manager.close()
        await producer.aclose()
    times = sorted(float(line[2]) for line in starts)
    assert len({line[1] for line in starts}) == 3, "all three processes ran jobs"
    in_window = [t for t in times if t < first + seconds]
    rate = len(in_window) / seconds

    def busiest(width: float) -> int:
        return max(sum(1 for u in times[i:] if u < t + width) for i, t in enumerate(times))

    gap = max((b - a for a, b in itertools.pairwise(in_window)), default=0.0)
    per_process: dict[str, int] = {}
    for line in starts:
        per_process[line[1]] = per_process.get(line[1], 0) + 1
    seen = (
        f"{rate:.2f}/s over {seconds:.0f}s, busiest 1 s window {busiest(1.0)}, 2 s window "
        f"{busiest(2.0)}, longest gap between starts {gap:.2f}s, per process {per_process}"
    )
    print(f"\nrate limit {limit}/s burst {burst}, 3 processes: {seen}")
    # The limit holds fleet-wide: GCRA grants at most limit + burst permits
    # in any 1 s of the store's clock (three processes each applying it on
    # its own would start three times that). These are handler starts,
    # stamped by three processes after lease and dispatch: on a loaded
    # machine a process paused a moment stamps a few late, into the next
    # window (1 s windows saw 56 to 59 under load, on main before issue 23
    # too), so the bound is taken over 2 s windows, with 5% for that drift:
    # a real overrun is a multiple of the limit.
    assert busiest(2.0) <= (2 * limit + burst) * 1.05, seen
    assert rate <= limit * 1.05 + burst / seconds, seen
    # ... and it does not starve the backlog. Permits nobody takes in time
    # are not banked beyond the burst, so a machine too busy to run these
    # processes for a while loses some (a CI run at full load once saw
    # 34/s): the floor only catches a limiter that holds jobs back far
    # below its rate.
    assert rate >= 0.6 * limit, seen


async def test_concurrency_limit_with_a_sigkilled_holder(redis_url: str, tmp_path: Path) -> None:
    cap, jobs, sleep = 4, 60, 0.3  # tests.capped: ConcurrencyLimit(4)
    manager = _flow_workers(redis_url, tmp_path)
    producer = make_app(redis_url)
    runs = Runs(redis_url, "capped")
    try:
        with trio.fail_after(60):
            children = await manager.wait_ready()
            await producer.tasks["tests.capped"].enqueue_many(
                [Record("capped", sleep=sleep) for _ in range(jobs)]
            )
            victim = None
            while victim is None:  # a process whose handler runs (holds a slot) now
                starts, done = await runs.lines("start"), await runs.lines("done")
                ended = {(line[0], line[1]) for line in done}
                running = [line for line in starts if (line[0], line[1]) not in ended]
                if running and len(done) >= 8 and int(running[-1][1]) in children.values():
                    victim = int(running[-1][1])  # the latest start: the most time left
                else:
                    await trio.sleep(0.02)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.time()
            # every job done once at least (a job the victim finished but did
            # not settle runs again after its lease: at least once)
            while len({line[0] for line in await runs.lines("done")}) < jobs:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            starts, done = await runs.lines("start"), await runs.lines("done")
    finally:
        manager.close()
        await producer.aclose()
    finished = {line[0]: (float(line[2]), float(line[3])) for line in done}
    ended = {(line[0], line[1]) for line in done}
    cut = [
        (float(line[2]), killed_at)
        for line in starts
        if int(line[1]) == victim and (line[0], line[1]) not in ended
    ]
    assert cut, "the victim was killed while holding a slot"
    worst = _max_overlap([*finished.values(), *cut])
    print(f"\nconcurrency limit {cap}, 3 processes, kill -9 of a holder: most running {worst}")
    assert worst <= cap, worst
    assert len(finished) == jobs, "every job ran to completion"
    # the dead holder's slot is back within its lease: after it, 4 run at once again
    after = [(a, b) for a, b in finished.values() if a >= killed_at + LEASE + 0.5]
    assert after and _max_overlap(after) == cap, "all slots in use again after the lease"
