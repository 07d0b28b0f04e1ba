"""Conformance checks of unique jobs beyond the basics in ``conformance``:
two jobs of one key never run at once (each carries its key's run slot, see
``records._unique``), and every way a job gives its key back. Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported.

The key given back is checked in ``throttle`` mode where it can be: a
throttle's lock has no expiry until its job succeeds, so a release that
broke would keep the key taken (the stores also treat such a lock of a job
that is gone or finished as stale, so this checks the behaviour; the
release itself is checked per store in ``tests/test_unique_release.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ..records._control import JobControl
from ..records._jobs import JobState, LeasedJob, NewJob
from ..store._capabilities import Capability
from ..store._roles import (
    AbortResult,
    LeaseResult,
    Problem,
    QueueWeight,
    Repair,
    SettleKind,
    Store,
)
from .conformance import Fresh, check, lease, settle, state_of, unique_job

#: A throttle's ttl far beyond any check: only a release frees its key.
LONG = 600.0


async def _batch(store: Store) -> LeaseResult:
    return await store.lease([QueueWeight("q")], 100, worker_id="w1", lease_duration=5.0)


async def _one(store: Store, job_id: str, ttl: float = 5.0) -> LeasedJob:
    """Lease the ready job ``job_id`` (and only it)."""
    got = await lease(store, ttl=ttl)
    assert [lj.job.id for lj in got] == [job_id], (
        f"expected to lease {job_id} alone, got {[lj.job.id for lj in got]}"
    )
    return got[0]


async def _nothing_leased(store: Store) -> None:
    batch = await lease(store)
    assert list(batch) == [], f"a second job of the key ran beside the first: {list(batch)}"


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_debounce_successor_waits_for_the_running_job(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("d", mode="debounce")])
    running = await _one(store, first.job_id)
    # while it runs, a new job is stored and takes the key ...
    [behind] = await store.enqueue_many([unique_job("d", n=1, mode="debounce")])
    assert behind.created and behind.job_id != first.job_id
    assert await state_of(store, behind.job_id) is JobState.READY
    # ... and waits, ready, until the running one settles
    batch = await _batch(store)
    assert batch.jobs == () and batch.capped, "two runs of one key at once"
    # a third replaces the waiting one's payload (the newest runs after)
    [third] = await store.enqueue_many([unique_job("d", n=2, mode="debounce", payload=b'{"n":3}')])
    assert not third.created and third.job_id == behind.job_id
    assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    after = await _one(store, behind.job_id)
    assert after.job.payload == b'{"n":3}'


@check(Capability.PROMOTION, Capability.UNIQUE)
async def check_unique_lock_whose_ttl_lapsed_runs_after_its_successor(fresh: Fresh) -> None:
    store = await fresh()
    [waits] = await store.enqueue_many([unique_job("l", ttl=0.2, delay=0.6)])
    await trio.sleep(0.3)  # the lock lapsed while its job waits
    [second] = await store.enqueue_many([unique_job("l", n=1, ttl=0.2)])
    assert second.created and second.job_id != waits.job_id
    running = await _one(store, second.job_id)
    await trio.sleep(0.4)  # the first is due now
    assert (await store.promote_due(["q"], 10)).promoted == 1
    await _nothing_leased(store)
    assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    await _one(store, waits.job_id)


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_requeued_dead_job_waits_for_the_key_s_running_job(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("r")])
    failed = await _one(store, first.job_id)
    assert (await store.settle([settle(failed, SettleKind.DEAD, error="boom")])).settled == (True,)
    [second] = await store.enqueue_many([unique_job("r", n=1)])
    assert second.created
    running = await _one(store, second.job_id)
    assert (await store.requeue_dead("q")).count == 1
    await _nothing_leased(store)
    assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    await _one(store, first.job_id)


@check(Capability.UNIQUE)
async def check_unique_run_slot_comes_back_when_its_lease_expires(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("e", mode="debounce")])
    await _one(store, first.job_id, ttl=0.2)  # its worker dies
    [second] = await store.enqueue_many([unique_job("e", n=1, mode="debounce")])
    await trio.sleep(0.3)
    # the dead worker's slot is free once its lease expired, recovered or not
    running = await _one(store, second.job_id)
    assert (await store.recover_expired(["q"], 10)).requeued == (first.job_id,)
    await _nothing_leased(store)  # the recovered job waits for the running one
    assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    await _one(store, first.job_id)


@check(Capability.PROMOTION, Capability.UNIQUE)
async def check_unique_retried_job_runs_after_its_successor(fresh: Fresh) -> None:
    """The order runs take when a job fails while its successor waits: the
    successor runs first, the retry after it (never beside it)."""
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("o", mode="debounce")])
    failing = await _one(store, first.job_id)
    [behind] = await store.enqueue_many([unique_job("o", n=1, mode="debounce")])
    assert behind.created
    retry = settle(failing, SettleKind.RETRY, error="again", retry_delay=0.2)
    assert (await store.settle([retry])).settled == (True,)
    running = await _one(store, behind.job_id)
    await trio.sleep(0.3)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    await _nothing_leased(store)
    assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    again = await _one(store, first.job_id)
    assert again.job.attempts == 2


@check(Capability.UNIQUE)
async def check_unique_settle_wakes_a_worker_the_run_slot_held_back(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("w", mode="debounce")])
    running = await _one(store, first.job_id)
    [behind] = await store.enqueue_many([unique_job("w", n=1, mode="debounce")])
    drained = trio.Event()
    woken: list[float] = []

    async def held_worker() -> None:
        # As a leaser does, in one task: lease (held back), then wait. The
        # enqueues' own wake-ups may still be pending (spurious returns are
        # allowed): take them first, until one wait runs to its timeout.
        assert (await _batch(store)).capped
        for _ in range(10):
            start = trio.current_time()
            await store.wait_ready(["q"], timeout=0.2, held=True)
            if trio.current_time() - start >= 0.19:
                break
        drained.set()
        start = trio.current_time()
        await store.wait_ready(["q"], timeout=10.0, held=True)
        woken.append(trio.current_time() - start)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(held_worker)
            await drained.wait()
            await trio.sleep(0.3)  # it blocks: the ready job is held back
            assert woken == [], "a held worker returned for the job it was held back from"
            assert (await store.settle([settle(running, SettleKind.SUCCEEDED)])).settled == (True,)
    assert woken and woken[0] < 2.0, f"the freed slot did not wake the held worker: {woken}"
    await _one(store, behind.job_id)


# -- every way a key is given back ----------------------------------------------------------
def _throttled(key: str, n: int = 0, **kw: object) -> NewJob:
    return unique_job(key, "", n=n, mode="throttle", ttl=LONG, **kw)


async def _free(store: Store, key: str, holder: str, n: int = 1) -> None:
    """The key is free: a new job of it is stored (and not ``holder``)."""
    [again] = await store.enqueue_many([_throttled(key, n)])
    assert again.created and again.job_id != holder, (
        f"key {key!r} was not given back: {again.job_id} holds it"
    )


async def _taken_by(store: Store, key: str, holder: str, n: int = 1) -> None:
    [again] = await store.enqueue_many([_throttled(key, n)])
    assert not again.created and again.job_id == holder, (
        f"key {key!r}: expected {holder} to hold it, got {again}"
    )


Path = Callable[[Store], Awaitable[str]]


@check(Capability.ADMIN, Capability.UNIQUE, Capability.EXPIRY, Capability.ABORT)
async def check_unique_throttle_key_is_given_back_by_every_failure(fresh: Fresh) -> None:
    """A throttled job that does not succeed (dead, discarded, aborted
    leased or waiting, deleted, expired, dead or aborted by recovery) gives
    its key back: only a success keeps it for the ttl."""

    async def leased_then(store: Store, key: str, kind: SettleKind) -> str:
        [made] = await store.enqueue_many([_throttled(key)])
        held = await _one(store, made.job_id)
        assert (await store.settle([settle(held, kind, error="boom")])).settled == (True,)
        return made.job_id

    async def dead(store: Store) -> str:
        return await leased_then(store, "dead", SettleKind.DEAD)

    async def discarded(store: Store) -> str:
        return await leased_then(store, "discarded", SettleKind.DISCARD)

    async def aborted_leased(store: Store) -> str:
        [made] = await store.enqueue_many([_throttled("aborted")])
        held = await _one(store, made.job_id)
        assert await store.abort(made.job_id) is AbortResult.FLAGGED
        await _taken_by(store, "aborted", made.job_id, n=9)  # flagged: still its key
        # its worker runs it again? the abort wins: aborted
        assert (await store.settle([settle(held, SettleKind.RETRY, error="x")])).settled == (True,)
        assert await state_of(store, made.job_id) is JobState.ABORTED
        return made.job_id

    async def aborted_waiting(store: Store) -> str:
        [made] = await store.enqueue_many([_throttled("waiting", delay=30.0)])
        assert await store.abort(made.job_id) is AbortResult.ABORTED
        return made.job_id

    async def deleted(store: Store) -> str:
        [made] = await store.enqueue_many([_throttled("deleted", delay=30.0)])
        assert await store.delete_job(made.job_id)
        return made.job_id

    async def expired(store: Store) -> str:
        control = JobControl(expires_in=0.1)
        [made] = await store.enqueue_many([_throttled("expired", control=control)])
        await trio.sleep(0.2)
        batch = await _batch(store)
        assert batch.jobs == () and [j.id for j in batch.expired] == [made.job_id]
        return made.job_id

    async def recovered_dead(store: Store) -> str:
        [made] = await store.enqueue_many([_throttled("lost", max_retries=0)])
        await _one(store, made.job_id, ttl=0.1)
        await trio.sleep(0.2)
        assert [j.id for j in (await store.recover_expired(["q"], 10)).dead] == [made.job_id]
        return made.job_id

    async def recovered_aborted(store: Store) -> str:
        [made] = await store.enqueue_many([_throttled("lost-aborted")])
        await _one(store, made.job_id, ttl=0.1)
        assert await store.abort(made.job_id) is AbortResult.FLAGGED
        await trio.sleep(0.2)
        result = await store.recover_expired(["q"], 10)
        assert [j.id for j in result.aborted] == [made.job_id]
        return made.job_id

    paths: dict[str, Path] = {
        "dead": dead,
        "discarded": discarded,
        "aborted": aborted_leased,
        "waiting": aborted_waiting,
        "deleted": deleted,
        "expired": expired,
        "lost": recovered_dead,
        "lost-aborted": recovered_aborted,
    }
    for key, path in paths.items():
        store = await fresh()
        holder = await path(store)
        await _free(store, key, holder)


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_throttle_success_keeps_the_key_through_trim(fresh: Fresh) -> None:
    store = await fresh()
    [made] = await store.enqueue_many([unique_job("t", mode="throttle", ttl=0.5)])
    held = await _one(store, made.job_id)
    assert (await store.settle([settle(held, SettleKind.SUCCEEDED, retain_for=0.1)])).settled == (
        True,
    )
    await trio.sleep(0.2)
    trimmed = await store.trim(["q"], dead_max_age=None, dead_max_count=None, keep_succeeded=0)
    assert trimmed.count == 1 and await store.get_job(made.job_id) is None
    [again] = await store.enqueue_many([unique_job("t", n=1, mode="throttle", ttl=0.5)])
    assert not again.created, "a trimmed success still holds the key for its ttl"
    await trio.sleep(0.4)
    [later] = await store.enqueue_many([unique_job("t", n=2, mode="throttle", ttl=0.5)])
    assert later.created


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_requeued_or_rerun_dead_job_does_not_take_its_key_back(
    fresh: Fresh,
) -> None:
    for again in ("requeue", "run_now"):
        store = await fresh()
        [old] = await store.enqueue_many([_throttled("k")])
        held = await _one(store, old.job_id)
        assert (await store.settle([settle(held, SettleKind.DEAD, error="boom")])).settled == (
            True,
        )
        [new] = await store.enqueue_many([_throttled("k", 1, delay=30.0)])
        assert new.created
        if again == "requeue":
            assert (await store.requeue_dead("q")).count == 1
        else:
            assert await store.run_now(old.job_id)
        await _taken_by(store, "k", new.job_id, n=2)
        # it runs, and its success does not start a throttle on the other's key
        rerun = await _one(store, old.job_id)
        assert (await store.settle([settle(rerun, SettleKind.SUCCEEDED)])).settled == (True,)
        await _taken_by(store, "k", new.job_id, n=3)
        assert await store.delete_job(new.job_id)
        await _free(store, "k", new.job_id, n=4)


@check(Capability.ADMIN, Capability.CHECK, Capability.UNIQUE, Capability.ABORT)
async def check_unique_key_is_given_back_by_the_checker_s_repair(fresh: Fresh) -> None:
    """An expired lease the checker takes back as dead (no retry left) or
    aborted (an abort was asked) gives its key back, as recovery does."""
    for key, max_retries in (("repair-dead", 0), ("repair-aborted", 3)):
        store = await fresh()
        [made] = await store.enqueue_many([_throttled(key, max_retries=max_retries)])
        await _one(store, made.job_id, ttl=0.1)
        if key == "repair-aborted":
            assert await store.abort(made.job_id) is AbortResult.FLAGGED
        await trio.sleep(0.5)
        report = await store.check(repair=True, lease_grace=0.3)
        [found] = report.findings
        assert found.problem is Problem.EXPIRED_LEASE, found
        assert found.repair in (Repair.DEAD_LETTERED, Repair.RECOVERED), found
        assert await state_of(store, made.job_id) in (JobState.DEAD, JobState.ABORTED)
        await _free(store, key, made.job_id)
