"""A worker stops using a lease when the lease ends on its own clock,
whatever its store calls are doing (issue 23, item 4), and a renewal the
store refuses cancels its handler at once (item 12). In process, on the
virtual clock (and on Redis where the store's answer matters); the process
tests, with a blackholed link and a stopped worker, are in
test_lease_process.py."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from chronos_trio import App, JobContext, JobState, MemoryStore, Worker
from chronos_trio.records._jobs import LeaseRef
from chronos_trio.runtime import Stage
from chronos_trio.store import QueueWeight, RenewResult, SettleKind, Settlement, StoreError
from chronos_trio.testing import FaultyStore
from tests._backends import Backend
from tests._support import wait_for

LEASE = 3.0  # heartbeat every 1 s; the worker's deadline 94-95% of a lease after asking


class StallingStore(FaultyStore):
    """Renewals that hang as a call on a link that stopped forwarding does:
    no answer until the store's socket timeout (RedisStore's default), then
    StoreError. ``stall_all`` stalls every renewal, ``stall_next`` that many."""

    TIMEOUT = 5.0

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.stall_all = False
        self.stall_next = 0
        #: When each renewal call came in, and whether it was answered.
        self.renewals: list[tuple[float, bool]] = []

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        stall = self.stall_all or self.stall_next > 0
        self.renewals.append((trio.current_time(), not stall))
        if stall:
            self.stall_next = max(0, self.stall_next - 1)
            await trio.sleep(self.TIMEOUT)
            raise StoreError(f"no reply from the store within {self.TIMEOUT:g}s")
        return await self.inner.renew(leases, lease_duration)


def _long_task(app: App, ended: list[tuple[float, bool]], timeout: float = 600.0) -> Any:
    @app.task("long", timeout=timeout)
    async def long(args: bytes, job: JobContext) -> None:
        try:
            await trio.sleep(500)
        finally:
            ended.append((trio.current_time(), job.lease_lost))

    return long


async def test_a_handler_stops_when_its_lease_ends_while_every_renewal_hangs(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = StallingStore(MemoryStore())
    app = App(store)
    ended: list[tuple[float, bool]] = []
    long = _long_task(app, ended)
    options = {"lease_duration": LEASE, "heartbeat_interval": 0.5, "poll_interval": 0.5}
    async with app.open_worker(**options) as worker:
        await long.enqueue(b"x")
        await wait_for(lambda: worker.statistics().running == 1)
        await trio.sleep(1.5)  # a renewal or two in
        store.stall_all = True
        hung_at = trio.current_time()
        last_renewed = max(at for at, answered in store.renewals if answered)
        await wait_for(lambda: ended)
        stats = worker.statistics()
        store.stall_all = False
    stopped_at, lost = ended[0]
    assert lost, "the handler's cleanup sees the lease lost"
    # At the worker's own deadline for the lease (a renewal asked at
    # last_renewed), before the store's expiry (last_renewed + LEASE): not
    # when the hung call finally fails, 5 s after it was made.
    assert last_renewed + 0.94 * LEASE <= stopped_at <= last_renewed + 0.95 * LEASE
    assert stopped_at < hung_at + StallingStore.TIMEOUT
    assert stats.lost == 1
    # Renewals kept going out on time while the first ones hung, three at
    # most; the next ticks skipped theirs, and said so.
    asked = [at for at, _ in store.renewals if hung_at <= at <= stopped_at]
    assert len(asked) == 3, store.renewals
    assert [b - a for a, b in itertools.pairwise(asked)] == [0.5, 0.5]
    skipped = [r for r in caplog.records if "skipping this tick's renewal" in r.getMessage()]
    assert len(skipped) == 2


async def test_one_hung_renewal_does_not_hold_up_the_next(autojump_clock: object) -> None:
    store = StallingStore(MemoryStore())
    app = App(store)
    done: list[str] = []

    @app.task("steady", timeout=600)
    async def steady(args: bytes, job: JobContext) -> None:
        await trio.sleep(10)  # more than three leases
        done.append(job.id)

    async with app.open_worker(lease_duration=LEASE, poll_interval=0.5) as worker:
        res = await steady.enqueue(b"x")
        await wait_for(lambda: worker.statistics().running == 1)
        store.stall_next = 1  # one renewal hangs on a dead connection; the next go through
        await wait_for(lambda: done)
        await worker.wait_idle()
        stats = worker.statistics()
    assert done == [res.job_id]
    assert stats.lost == 0 and stats.succeeded == 1
    stalled = [at for at, answered in store.renewals if not answered]
    assert len(stalled) == 1
    # the next renewal went out one heartbeat after the hung one, not after it failed
    [after] = [at for at, _ in store.renewals if at > stalled[0]][:1]
    assert after - stalled[0] == LEASE / 3


async def test_after_a_pause_past_its_lease_a_handler_runs_nothing_but_its_cleanup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A process stopped (SIGSTOP, a stalled VM) past its leases: when it
    resumes, its handlers are cancelled before they run any code past the
    lease deadline (Trio expires deadlines before it runs a round's tasks),
    whatever order that round runs its tasks in: each round is tried with
    the handler's wake-up at another phase against the heartbeat."""
    app = App(MemoryStore())
    ticks: list[tuple[str, float]] = []
    ended: dict[str, tuple[float, bool]] = {}

    @app.task("ticker", timeout=600, max_retries=10)
    async def ticker(args: int, job: JobContext) -> None:
        if job.attempt > 1:
            return  # run again after its lease was recovered: not what is looked at
        try:
            while True:
                await trio.sleep(0.01)
                ticks.append((job.id, trio.current_time()))
        finally:
            ended[job.id] = (trio.current_time(), job.lease_lost)

    async with app.open_worker(lease_duration=LEASE, poll_interval=0.5) as worker:
        for n in range(10):
            job_id = (await ticker.enqueue(n)).job_id
            await wait_for(lambda id=job_id: any(j == id for j, _ in ticks))
            await trio.sleep(0.173 * n % 1.0)
            autojump_clock.jump(10.0)  # stopped for 10 s, more than three leases
            resumed = trio.current_time()
            await wait_for(lambda id=job_id: id in ended)
            late = [at for j, at in ticks if j == job_id and at >= resumed]
            assert late == [], f"round {n}: the handler ran on after the pause"
            assert ended[job_id] == (resumed, True)
        await worker.wait_idle()


# -- item 12: a refused renewal ----------------------------------------------------------
def _running_lease(worker: Worker) -> LeaseRef:
    """The lease of the one job ``worker`` runs (what another worker's
    recovery would supersede)."""
    [entry] = worker.runtime.table.in_stage(Stage.RUNNING)
    return entry.leased.ref


async def test_a_refused_renewal_cancels_its_handler_within_a_heartbeat(
    backend: Backend, clock: object
) -> None:
    """The store moved the job on under a worker whose own clock says its
    lease still runs (another worker recovered and took it: here, at once,
    by a release under the worker's token and a lease by a thief). The next
    renewal is refused, and that alone cancels the handler, long before the
    lease would have ended on the worker's clock."""
    store = backend.store()
    app = App(store)
    ended: list[tuple[float, bool]] = []
    long = _long_task(app, ended)
    heartbeat = backend.pick(memory=1.0, redis=0.5)
    lease = backend.pick(memory=30.0, redis=6.0)
    options = {
        "lease_duration": lease,
        "heartbeat_interval": heartbeat,
        "poll_interval": backend.pick(memory=0.5, redis=0.2),
        # one lease at a time: the worker cannot take the released job itself
        "concurrency": 1,
        "max_in_flight": 1,
    }
    async with app.open_worker(**options) as worker:
        res = await long.enqueue(b"x")
        await wait_for(lambda: worker.statistics().running == 1)
        ref = _running_lease(worker)
        assert (await store.settle([Settlement(ref, SettleKind.RELEASE)])).settled == (True,)
        [stolen] = (
            await store.lease([QueueWeight("default")], 1, worker_id="thief", lease_duration=600)
        ).jobs
        taken_at = trio.current_time()
        await wait_for(lambda: ended, timeout=backend.pick(memory=60, redis=20))
        stats = worker.statistics()
    stopped_at, lost = ended[0]
    assert lost
    # at the next renewal, not at the lease deadline (lease - 5% away)
    assert stopped_at - taken_at <= heartbeat + backend.pick(memory=0.001, redis=1.0)
    assert stats.lost == 1 and stats.succeeded == 0 and stats.retried == 0
    job = await store.get_job(res.job_id)
    assert job is not None and job.state is JobState.LEASED
    assert job.lease_owner == "thief" and job.lease_token == stolen.token
