"""How idle executors take jobs (``actors.executor.Dispatch``): a batch of
handlers that never yield runs back to back without waking every executor,
handlers that do yield still fan out to every executor within a few
scheduling rounds, and no job is ever left waiting in the run queue while an
executor is free."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from chronos_trio import Job, JobState, LeasedJob
from chronos_trio.actors.executor import Dispatch
from chronos_trio.runtime import InFlight

#: Room for every job a test sends: the run queue never fills, so sending
#: never depends on how fast the executors happen to drain it.
ROOM = 10_000


def leased(n: int) -> LeasedJob:
    job = Job(str(n), "default", "k", b"", 0.0, JobState.LEASED)
    return LeasedJob(job, f"t{n}", 0.0, 0.0)


class Pool:
    """``size`` executors taking jobs through one Dispatch; a ticker counts
    scheduling rounds (it runs once per round)."""

    def __init__(self, size: int, handler: Callable[[int], Awaitable[None]]) -> None:
        self.table = InFlight(ROOM, ROOM)
        self.dispatch = Dispatch(self.table)
        self.size = size
        self.handler = handler
        self.ticks = 0
        self.started: dict[int, tuple[int, int, float]] = {}  # job -> executor, tick, time
        self.running = 0
        self.peak = 0

    async def ticker(self) -> None:
        """Counts rounds while it runs (it keeps the run loop busy, so it is
        started only around a measurement)."""
        while True:
            self.ticks += 1
            await trio.lowlevel.checkpoint()

    async def _executor(self, index: int) -> None:
        scope = trio.CancelScope()
        while True:
            entry = await self.dispatch.next(scope)
            n = int(entry.leased.job.id)
            self.started[n] = (index, self.ticks, trio.current_time())
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                await self.handler(n)
            finally:
                self.running -= 1
            self.table.decide(entry, None)

    def start(self, nursery: trio.Nursery) -> None:
        for i in range(self.size):
            nursery.start_soon(self._executor, i)

    def send_batch(self, first: int, count: int) -> None:
        for entry in self.table.admit([leased(n) for n in range(first, first + count)]):
            assert self.table.dispatch_nowait(entry)


async def test_handlers_that_never_yield_run_back_to_back() -> None:
    async def no_yield(n: int) -> None:
        return None

    pool = Pool(64, no_yield)
    async with trio.open_nursery() as nursery:
        pool.start(nursery)
        await trio.testing.wait_all_tasks_blocked()
        pool.send_batch(0, 64)
        with trio.fail_after(5):
            while len(pool.started) < 64:
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    executors = {e for e, _, _ in pool.started.values()}
    # One executor runs the whole burst; waking all 64 would be 64 task switches.
    assert len(executors) <= 2, executors


async def test_handlers_that_yield_fan_out_to_every_executor_quickly(
    autojump_clock: object,
) -> None:
    async def sleeper(n: int) -> None:
        await trio.sleep(10)

    pool = Pool(64, sleeper)
    async with trio.open_nursery() as nursery:
        pool.start(nursery)
        await trio.testing.wait_all_tasks_blocked()
        ticking = trio.CancelScope()
        nursery.start_soon(_run_in, ticking, pool.ticker)
        await trio.lowlevel.checkpoint()
        start_tick = pool.ticks
        pool.send_batch(0, 64)
        with trio.fail_after(5):
            while len(pool.started) < 64:
                await trio.lowlevel.checkpoint()
        ticking.cancel()
        nursery.cancel_scope.cancel()
    assert pool.peak == 64
    assert len({t for _, _, t in pool.started.values()}) == 1, "all started at once"
    rounds = max(tick for _, tick, _ in pool.started.values()) - start_tick
    # Doubling: 1 + 2 + 4 + ... reaches 64 executors in about log2(64) rounds.
    assert rounds <= 10, rounds


async def _run_in(scope: trio.CancelScope, fn: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await fn()


@pytest.mark.parametrize("seed", range(8))
async def test_no_job_waits_while_an_executor_is_free(seed: int, autojump_clock: object) -> None:
    # The whole run is drawn from the seed before it starts: handlers must not
    # draw from the rng as they run, or the draws (and so the backlog) would
    # depend on Trio's randomised scheduling order, not on the seed.
    rng = random.Random(seed)
    plan: list[list[tuple[str, float]]] = []  # per round: each job's kind, sleep
    pauses: list[float] = []
    for _ in range(200):
        count = rng.choice([1, 1, 2, 5, 20])
        jobs = []
        for _ in range(count):
            kind = rng.choice(["none", "yield", "sleep"])
            pause = rng.choice([0.001, 0.01, 0.1, 1.0]) if kind == "sleep" else 0.0
            jobs.append((kind, pause))
        plan.append(jobs)
        pauses.append(rng.choice([0.0, 0.0005, 0.02, 0.5]))
    jobs_by_id = [job for jobs in plan for job in jobs]

    async def mixed(n: int) -> None:
        kind, pause = jobs_by_id[n]
        if kind == "yield":
            await trio.lowlevel.checkpoint()
        elif kind == "sleep":
            await trio.sleep(pause)

    size = 8
    # Room for every job sent: the backlog is whatever the plan makes it.
    pool = Pool(size, mixed)
    sent_at: dict[int, float] = {}
    had_a_free_executor: set[int] = set()
    async with trio.open_nursery() as nursery:
        pool.start(nursery)
        n = 0
        for jobs, pause in zip(plan, pauses, strict=True):
            count = len(jobs)
            # Executors running a handler, or owed to a job sent and not started.
            busy = pool.running + (n - len(pool.started))
            for k in range(n, n + count):
                sent_at[k] = trio.current_time()
                if busy < size:
                    had_a_free_executor.add(k)
                busy += 1
            pool.send_batch(n, count)
            n += count
            await trio.sleep(pause)
        with trio.fail_after(600):
            while len(pool.started) < n:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert sorted(pool.started) == list(range(n))
    assert pool.peak <= size
    # A job sent while an executor was free started at once (the same virtual
    # instant): it never waited for a timer or for a busy executor.
    assert had_a_free_executor
    late = {k: pool.started[k][2] - sent_at[k] for k in had_a_free_executor}
    assert all(wait == 0.0 for wait in late.values()), late


async def test_an_executor_woken_as_its_idle_scope_expires_starts_nothing_in_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An idle executor's scope keeps its last job's lease deadline. When
    that passes in the round after a job woke the executor (so the wake-up is
    not cancelled), the job must not start in the cancelled scope (it would
    be cancelled at once and taken for a timeout): ``next`` returns None and
    the executor goes on in a fresh scope."""
    table = InFlight(ROOM, ROOM)
    dispatch = Dispatch(table)
    got: list[object] = []

    async def executor() -> None:
        with trio.CancelScope() as scope:
            scope.deadline = trio.current_time() + 1.0  # its last job's lease deadline
            got.append(await dispatch.next(scope))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(executor)
        await trio.testing.wait_all_tasks_blocked()  # it listens on the queue
        [entry] = table.admit([leased(1)])
        assert table.dispatch_nowait(entry)  # wakes it, for the next round
        autojump_clock.jump(2.0)  # and its scope's deadline passes before that round
    assert got == [None]
    assert table.queued == 1  # still there for a fresh scope
    again = trio.CancelScope()
    assert await dispatch.next(again) is entry
