"""Group commit of concurrent enqueues (``store.redis._group_commit``): calls
that arrive while one is in flight share the next round trip, each still gets
exactly its own results, failures reach every call of the group, and a
cancelled caller loses nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio

from chronos_trio import EnqueueResult, NewJob
from chronos_trio.store import StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._group_commit import GroupCommit

Factory = Callable[..., Awaitable[RedisStore]]


def jobs(*ids: str) -> list[NewJob]:
    return [NewJob(id=i, queue="q", kind="k", payload=b"") for i in ids]


class FakeStore:
    """Idempotent by ID, one round trip = one ``send`` taking 10 ms."""

    def __init__(self) -> None:
        self.stored: dict[str, float] = {}
        self.batches: list[list[str]] = []
        self.fail_next = False

    async def send(self, batch: Sequence[NewJob]) -> list[EnqueueResult]:
        self.batches.append([j.id for j in batch])
        failing, self.fail_next = self.fail_next, False
        await trio.sleep(0.01)
        if failing:
            raise StoreError("Redis went away")
        out = []
        for j in batch:
            created = j.id not in self.stored
            self.stored.setdefault(j.id, trio.current_time())
            out.append(EnqueueResult(j.id, created, self.stored[j.id]))
        return out


async def test_concurrent_calls_share_round_trips(autojump_clock: object) -> None:
    fake = FakeStore()
    gc = GroupCommit(fake.send)
    got: dict[int, list[EnqueueResult]] = {}

    async def call(n: int) -> None:
        got[n] = await gc.submit(jobs(f"a{n}", f"b{n}"))

    async with trio.open_nursery() as nursery:
        for n in range(10):
            nursery.start_soon(call, n)
    # The first call goes alone; the nine that arrived meanwhile share one trip.
    assert len(fake.batches) == 2 and len(fake.batches[0]) == 2
    assert sorted(fake.batches[0] + fake.batches[1]) == sorted(
        f"{x}{n}" for n in range(10) for x in "ab"
    )
    for n in range(10):
        assert [r.job_id for r in got[n]] == [f"a{n}", f"b{n}"]
        assert all(r.created for r in got[n])
    assert gc.groups_sent == 1
    # A lone caller afterwards is sent at once, alone.
    await gc.submit(jobs("solo"))
    assert fake.batches[-1] == ["solo"]


async def test_calls_apply_in_arrival_order(autojump_clock: object) -> None:
    fake = FakeStore()
    gc = GroupCommit(fake.send)
    results: list[tuple[str, bool]] = []

    async def call(tag: str) -> None:
        [r] = await gc.submit(jobs("same-id"))
        results.append((tag, r.created))

    async with trio.open_nursery() as nursery:
        for tag in ("first", "second", "third"):
            nursery.start_soon(call, tag)
            await trio.lowlevel.checkpoint()  # arrive in this order
    assert dict(results) == {"first": True, "second": False, "third": False}


async def test_a_failed_trip_fails_every_call_in_it_then_recovers(autojump_clock: object) -> None:
    fake = FakeStore()
    gc = GroupCommit(fake.send)
    outcomes: dict[int, str] = {}

    async def call(n: int) -> None:
        try:
            await gc.submit(jobs(f"j{n}"))
            outcomes[n] = "ok"
        except StoreError as exc:
            outcomes[n] = str(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, 0)
        await trio.sleep(0.001)  # call 0 is in flight
        fake.fail_next = True  # ... and succeeds; the group after it fails
        for n in range(1, 5):
            nursery.start_soon(call, n)
    assert outcomes[0] == "ok"
    assert all(outcomes[n] == "Redis went away" for n in range(1, 5))
    # Nothing is stuck: the next call goes through.
    [r] = await gc.submit(jobs("after"))
    assert r.created and "after" in fake.stored


async def test_a_cancelled_waiting_call_still_lands_then_sees_the_cancel(
    autojump_clock: object,
) -> None:
    fake = FakeStore()
    gc = GroupCommit(fake.send)
    returned: list[list[EnqueueResult]] = []

    async def cancelled_caller(scope: trio.CancelScope) -> None:
        with scope:
            returned.append(await gc.submit(jobs("waiting")))
            await trio.lowlevel.checkpoint()  # the cancellation arrives here

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gc.submit, jobs("first"))
        await trio.sleep(0.001)
        nursery.start_soon(cancelled_caller, scope)
        await trio.sleep(0.001)
        scope.cancel()  # while it waits behind "first"
    assert scope.cancelled_caught
    assert "waiting" in fake.stored, "its jobs were sent even though it was cancelled"
    assert [r.job_id for r in returned[0]] == ["waiting"]


async def test_groups_are_capped(autojump_clock: object) -> None:
    fake = FakeStore()
    gc = GroupCommit(fake.send, max_items=5)
    async with trio.open_nursery() as nursery:
        for n in range(12):
            nursery.start_soon(gc.submit, jobs(f"c{n}", f"d{n}"))
    assert all(len(b) <= 5 for b in fake.batches[1:])
    assert len(fake.stored) == 24


@pytest.mark.redis
async def test_many_producers_on_redis_get_their_own_results(redis_store: Factory) -> None:
    store = await redis_store()
    calls = 0

    async def producer(p: int) -> None:
        nonlocal calls
        for k in range(50):
            [r] = await store.enqueue_many(jobs(f"p{p}-{k}"))
            assert r.job_id == f"p{p}-{k}" and r.created
            calls += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for p in range(32):
                nursery.start_soon(producer, p)
    assert calls == 1600
    [stats] = await store.stats(["q"])
    assert sum(stats.counts.values()) == 1600
    # Far fewer round trips than calls (each trip also carries its wake-ups).
    assert store.statistics().round_trips < 1600 / 2


async def test_a_lone_caller_goes_through_lone_and_waiting_callers_through_send(
    autojump_clock: object,
) -> None:
    """``lone`` (a send that shields itself) takes only a caller that finds
    the group commit idle; calls arriving meanwhile wait and go as a group
    through ``send``, as without it."""
    fake = FakeStore()
    lone_batches: list[list[str]] = []

    async def lone(batch: Sequence[NewJob]) -> list[EnqueueResult]:
        lone_batches.append([j.id for j in batch])
        with trio.CancelScope(shield=True):
            return await fake.send(batch)

    gc = GroupCommit(fake.send, lone=lone)
    got: dict[int, list[str]] = {}

    async def call(n: int) -> None:
        got[n] = [r.job_id for r in await gc.submit(jobs(f"j{n}"))]

    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(call, n)
    # Trio starts the tasks in no set order: whichever came first went alone.
    assert len(lone_batches) == 1 and len(lone_batches[0]) == 1, "only one found it idle"
    assert len(fake.batches) == 2 and fake.batches[0] == lone_batches[0]
    assert sorted(fake.batches[0] + fake.batches[1]) == [f"j{n}" for n in range(5)]
    assert got == {n: [f"j{n}"] for n in range(5)}
    assert gc.groups_sent == 1
    await gc.submit(jobs("solo"))
    assert lone_batches[-1] == ["solo"]
