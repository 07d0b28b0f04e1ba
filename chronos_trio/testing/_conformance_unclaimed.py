"""Conformance checks of the UNCLAIMED settle: a job whose kind the leasing
worker has no handler for goes back unrun for a worker that has one, and is
dead-lettered only once it has gone back unclaimed for the grace (see
``WorkerRole.settle``). Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..records._jobs import JobState, LeasedJob
from ..store._capabilities import Capability
from ..store._roles import (
    AbortResult,
    SettleKind,
    Settlement,
)
from .conformance import Fresh, check, found, job, lease, lease_again, settle, stale, unique_job

#: The error an UNCLAIMED settle leaves on a job it dead-letters.
GAVE_UP = "no worker registered kind 'k' in time"


def unclaimed(leased: LeasedJob, *, delay: float = 0.2, grace: float = 60.0) -> Settlement:
    return Settlement(
        leased.ref, SettleKind.UNCLAIMED, error=GAVE_UP, retry_delay=delay, unclaimed_grace=grace
    )


@check(Capability.PROMOTION, Capability.ADMIN)
async def check_unclaimed_goes_back_unrun_and_keeps_its_stamp(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a", max_retries=0), job("b")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    first = by_id["a"]
    assert first.job.attempts == 1
    before = await store.now()
    # fenced like every settle: a stale token changes nothing
    assert (await store.settle([Settlement(stale(first.ref), SettleKind.UNCLAIMED)])).settled == (
        False,
    )
    assert (await found(store, "a")).state is JobState.LEASED
    applied = await store.settle([unclaimed(first, delay=0.3)])
    after = await store.now()
    assert applied.settled == (True,) and applied.unclaimed_dead == frozenset(), applied
    assert applied.aborted == frozenset()
    waiting = await found(store, "a")
    assert waiting.state is JobState.RETRY_WAIT, waiting
    assert waiting.attempts == 0, "the attempt its lease took is given back"
    assert waiting.last_error == "", "going back unclaimed is no failure"
    assert not waiting.lease_token and waiting.lease_expires_at is None
    since = waiting.unclaimed_since
    assert since is not None and before - 0.05 <= since <= after + 0.05, (before, since, after)
    assert before + 0.25 <= waiting.run_at <= after + 0.35, "due after its delay"
    assert (await found(store, "b")).unclaimed_since is None, "another job is not stamped"
    assert (await store.settle([unclaimed(first)])).settled == (False,), "settled once"
    assert [lj.job.id for lj in await lease(store)] == [], "not before its delay"
    # leased again (no attempt spent so far) and sent back again: the stamp
    # of the first time stays, however often it goes back
    for _ in range(2):
        again = await lease_again(store, "a")
        assert again.job.attempts == 1, "the bounces spent no attempt"
        assert (await store.settle([unclaimed(again, delay=0.05)])).settled == (True,)
        got = await found(store, "a")
        assert got.state is JobState.RETRY_WAIT and got.attempts == 0
        assert got.unclaimed_since == since, (got.unclaimed_since, since)


@check(Capability.PROMOTION, Capability.ADMIN, Capability.UNIQUE)
async def check_unclaimed_is_dead_once_its_stamp_is_older_than_the_grace(fresh: Fresh) -> None:
    store = await fresh()
    grace = 0.6
    [made] = await store.enqueue_many([unique_job("only", max_retries=0)])
    job_id = made.job_id
    [leased] = await lease(store)
    assert (await store.settle([unclaimed(leased, delay=0.05, grace=grace)])).settled == (True,)
    since = (await found(store, job_id)).unclaimed_since
    assert since is not None
    with trio.fail_after(10):
        while True:
            leased = await lease_again(store, job_id)
            before = await store.now()
            applied = await store.settle([unclaimed(leased, delay=0.05, grace=grace)])
            after = await store.now()
            assert applied.settled == (True,), applied
            if applied.unclaimed_dead:
                assert applied.unclaimed_dead == {0}
                assert after - since >= grace, "dead before its grace"
                break
            # (the same arithmetic as the store's: now - since >= grace)
            assert before - since < grace, "not dead though its grace had passed"
            assert (await found(store, job_id)).state is JobState.RETRY_WAIT
    dead = await found(store, job_id)
    assert dead.state is JobState.DEAD and dead.last_error == GAVE_UP, dead
    assert dead.attempts == 0, "it never ran: no attempt counted"
    assert dead.finished_at is not None and dead.finished_at - since >= grace
    assert dead.unclaimed_since == since, "the stamp is kept, for an operator to see"
    assert not dead.lease_token
    assert [j.id for j in await store.list_jobs("q", JobState.DEAD)] == [job_id]
    # dead, its unique key is free again
    [again] = await store.enqueue_many([unique_job("only", n=1)])
    assert again.created and again.job_id != job_id
    # a grace of 0 dead-letters at the first bounce
    [leased] = [lj for lj in await lease(store) if lj.job.id == again.job_id]
    applied = await store.settle([unclaimed(leased, grace=0)])
    assert applied.settled == (True,) and applied.unclaimed_dead == {0}
    assert (await found(store, again.job_id)).state is JobState.DEAD


@check(Capability.PROMOTION, Capability.ADMIN)
async def check_a_run_clears_the_unclaimed_stamp_and_a_release_keeps_it(fresh: Fresh) -> None:
    store = await fresh()
    names = ("retry", "defer", "release", "recover", "requeue")
    # each job in a queue of its own, named after it
    await store.enqueue_many([job(n, queue=n, max_retries=5) for n in names])
    by_id = {n: lj for n in names for lj in await lease(store, n)}
    await store.settle([unclaimed(by_id[n], delay=0.05) for n in names])
    stamps = {n: (await found(store, n)).unclaimed_since for n in names}
    assert None not in stamps.values(), stamps
    leased = {
        n: await lease_again(store, n, queue=n, ttl=0.3 if n == "recover" else 5.0) for n in names
    }
    # a retry or a deferral: a worker that has the handler ran it; a release
    # (not run) keeps the stamp
    assert (
        await store.settle(
            [
                settle(leased["retry"], SettleKind.RETRY, error="boom", retry_delay=0.05),
                settle(leased["defer"], SettleKind.DEFER, error="later", retry_delay=0.05),
                settle(leased["release"], SettleKind.RELEASE),
                unclaimed(leased["requeue"], grace=0),
            ]
        )
    ).settled == (True, True, True, True)
    for n in ("retry", "defer"):
        got = await found(store, n)
        assert got.state is JobState.RETRY_WAIT and got.unclaimed_since is None, got
    released = await found(store, "release")
    assert released.state is JobState.READY and released.unclaimed_since == stamps["release"]
    # a lost lease (its worker may have had the handler) and a requeue of a
    # dead job start it afresh too
    await trio.sleep(0.4)
    assert (await store.recover_expired(["recover"], 10)).requeued == ("recover",)
    recovered = await found(store, "recover")
    assert recovered.state is JobState.READY and recovered.unclaimed_since is None, recovered
    assert (await found(store, "requeue")).state is JobState.DEAD
    assert (await store.requeue_dead("requeue")).count == 1
    requeued = await found(store, "requeue")
    assert requeued.state is JobState.READY and requeued.unclaimed_since is None, requeued
    # the next bounce stamps it anew
    retried = await lease_again(store, "retry", queue="retry")
    assert (await store.settle([unclaimed(retried)])).settled == (True,)
    restamped = (await found(store, "retry")).unclaimed_since
    assert restamped is not None and restamped > stamps["retry"]  # type: ignore[operator]


@check(Capability.ADMIN, Capability.ABORT)
async def check_an_abort_wins_over_unclaimed(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store)
    assert await store.abort("a", reason="stop") is AbortResult.FLAGGED
    applied = await store.settle([unclaimed(leased)])
    assert applied.settled == (True,) and applied.aborted == {0}, applied
    assert applied.unclaimed_dead == frozenset()
    got = await found(store, "a")
    assert got.state is JobState.ABORTED and got.last_error == "aborted: stop", got


@check(Capability.ADMIN, Capability.CHECK)
async def check_checker_finds_nothing_wrong_with_an_unclaimed_stamp(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("waiting"), job("dead")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    await store.settle([unclaimed(by_id["waiting"], delay=3600), unclaimed(by_id["dead"], grace=0)])
    for name, state in (("waiting", JobState.RETRY_WAIT), ("dead", JobState.DEAD)):
        got = await found(store, name)
        assert got.state is state and got.unclaimed_since is not None and got.damage == "", got
    for repair in (False, True):
        report = await store.check(repair=repair)
        assert report.findings == () and report.ok, report.findings
    assert (await found(store, "waiting")).state is JobState.RETRY_WAIT
