"""Conformance checks of the attempt history (``records._attempts``): each
attempt that ends without success is kept by the settle or recovery that
ends it, fenced like it, bounded, and read back by ``AdminRole.get_job``;
the one that succeeds is derived from the record. Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..records._attempts import (
    HISTORY_LIMIT,
    LEASE_EXPIRED,
    Attempt,
    AttemptOutcome,
)
from ..records._history import attempt_history
from ..records._jobs import JobState
from ..store._capabilities import Capability
from ..store._roles import SettleKind, Settlement
from .conformance import Fresh, check, found, job, lease, lease_again, settle, stale

Out = AttemptOutcome


def _ended_within(attempt: Attempt, before: float, after: float) -> None:
    assert attempt.ended is not None and before <= attempt.ended <= after, (attempt, before, after)


@check(Capability.ADMIN, Capability.HISTORY)
async def check_history_fail_twice_then_succeed(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a", max_retries=3), job("other")])
    leases = {lj.job.id: lj for lj in await lease(store)}
    first = leases["a"]
    # a stale token changes nothing, in the history too
    stale_retry = Settlement(stale(first.ref), SettleKind.RETRY, error="stale", started=0.0)
    assert (await store.settle([stale_retry])).settled == (False,)
    assert (await found(store, "a")).history == ()
    before = await store.now()
    retry = settle(
        first, SettleKind.RETRY, error="boom 1", retry_delay=0.05, started=first.leased_at
    )
    assert (await store.settle([retry])).settled == (True,)
    after = await store.now()
    second = await lease_again(store, "a")
    retry = settle(
        second, SettleKind.RETRY, error="boom 2", retry_delay=0.05, started=second.leased_at
    )
    assert (await store.settle([retry])).settled == (True,)
    third = await lease_again(store, "a")
    running = await found(store, "a")
    assert [(a.number, a.outcome) for a in attempt_history(running)] == [
        (1, Out.RETRIED), (2, Out.RETRIED), (3, Out.RUNNING),
    ], attempt_history(running)  # fmt: skip
    assert attempt_history(running)[-1].worker == "w1"
    ok = settle(third, SettleKind.SUCCEEDED, retain_for=60.0)
    assert (await store.settle([ok])).settled == (True,)
    done = await found(store, "a")
    assert done.state is JobState.SUCCEEDED
    got = attempt_history(done)
    assert [(a.number, a.outcome, a.error) for a in got] == [
        (1, Out.RETRIED, "boom 1"), (2, Out.RETRIED, "boom 2"), (3, Out.SUCCEEDED, ""),
    ], got  # fmt: skip
    one, two, three = got
    assert one.worker == two.worker == "w1", got
    assert one.started == first.leased_at and two.started == second.leased_at, got
    _ended_within(one, before, after)
    assert two.ended is not None and one.ended is not None and two.ended >= one.ended
    assert three.ended == done.finished_at
    assert (await found(store, "other")).history == (), "another job's history is its own"


@check(Capability.ADMIN, Capability.HISTORY)
async def check_history_keeps_an_expired_lease(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a", max_retries=1)])
    await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    before = await store.now()
    assert (await store.recover_expired(["q"], 10)).requeued == ("a",)
    after = await store.now()
    [expired] = (await found(store, "a")).history
    assert (expired.number, expired.outcome, expired.worker) == (1, Out.EXPIRED, "w1"), expired
    assert expired.error == LEASE_EXPIRED and expired.started is None, expired
    _ended_within(expired, before, after)
    # the next lease expires too: retries exhausted, dead-lettered, both kept
    await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    assert [j.id for j in (await store.recover_expired(["q"], 10)).dead] == ["a"]
    dead = await found(store, "a")
    assert dead.state is JobState.DEAD
    assert [(a.number, a.outcome) for a in dead.history] == [(1, Out.EXPIRED), (2, Out.EXPIRED)]
    assert dead.history[-1].error == dead.last_error
    assert attempt_history(dead) == dead.history


@check(Capability.ADMIN, Capability.ABORT, Capability.HISTORY)
async def check_history_outcomes_and_bound(fresh: Fresh) -> None:
    store = await fresh()
    rounds = HISTORY_LIMIT + 3
    await store.enqueue_many([job("a", max_retries=0)])
    # released (not counted) again and again: the oldest entries go first
    for _ in range(rounds):
        [leased] = await lease(store, count=1)
        assert leased.job.id == "a", leased
        release = settle(leased, SettleKind.RELEASE, started=leased.leased_at)
        assert (await store.settle([release])).settled == (True,)
    kept = (await found(store, "a")).history
    assert len(kept) == HISTORY_LIMIT, len(kept)
    assert {(a.number, a.outcome, a.error) for a in kept} == {(1, Out.RELEASED, "")}, kept
    ends = [a.ended for a in kept]
    assert ends == sorted(ends), "oldest first"  # type: ignore[type-var]
    # then it fails for good: the last entry is the dead one, still bounded
    [leased] = await lease(store, count=1)
    dead = settle(leased, SettleKind.DEAD, error="bad input", started=leased.leased_at)
    assert (await store.settle([dead])).settled == (True,)
    got = await found(store, "a")
    assert got.state is JobState.DEAD and len(got.history) == HISTORY_LIMIT
    assert (got.history[-1].outcome, got.history[-1].error) == (Out.DEAD, "bad input")
    assert got.history[-2].outcome is Out.RELEASED
    # an abort asked while it ran wins over a retry, and is what the attempt shows
    await store.enqueue_many([job("d")])
    [leased] = await lease(store)
    assert leased.job.id == "d"
    await store.abort("d", reason="stop")
    retry = settle(leased, SettleKind.RETRY, error="boom", started=leased.leased_at)
    assert (await store.settle([retry])).aborted == frozenset({0})
    aborted = await found(store, "d")
    [attempt] = aborted.history
    assert (attempt.outcome, attempt.error) == (Out.ABORTED, aborted.last_error), aborted
