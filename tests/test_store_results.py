"""Each store operation returns one result that says all it did (issue 24):
a real lease, renew, settle, trim and requeue_dead on the MemoryStore (on
Trio's virtual clock) and on a real Redis, reading every field of
``LeaseResult``, ``RenewResult``, ``SettleResult`` and ``CountResult`` with
something to report in it: the jobs and their lease times, what flow control
expired or held back, what an abort flagged, what an UNCLAIMED settle
dead-lettered, and the damaged records each set aside."""

from __future__ import annotations

import attrs
import pytest
import trio

from chronos_trio import JobState, LeasedJob, NewJob
from chronos_trio.records._control import JobControl
from chronos_trio.store import (
    CountResult,
    LeaseResult,
    QueueWeight,
    RenewResult,
    SettleKind,
    Settlement,
    SettleResult,
    Store,
)
from chronos_trio.testing.damage import Damage, damage_job, redis_client
from tests._backends import Backend

LONG = 600.0


def job(job_id: str, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b'{"n":1}', **kw)  # type: ignore[arg-type]


def limited(job_id: str, control: JobControl) -> NewJob:
    """A job under flow control: its ID is the store's to choose."""
    return job(job_id, control=control, id_given=False)


async def lease(store: Store, ttl: float = LONG) -> LeaseResult:
    return await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=ttl)


async def damage(backend: Backend, store: Store, job_id: str, field: str) -> None:
    """Make ``field`` of ``job_id``'s record unreadable (the wrong type).
    Skips the test on PostgreSQL, whose typed columns and CHECK constraints
    refuse such a row (the checker's own tests cover what can go wrong
    there)."""
    if backend.name in ("postgres", "sqlite"):
        pytest.skip("an SQL row cannot hold a field of the wrong type")
    client = None if backend.redis_url is None else redis_client(backend.redis_url)
    try:
        await damage_job(
            store,  # type: ignore[arg-type]
            job_id,
            queue="q",
            field=field,
            how=Damage.WRONG_TYPE,
            client=client,
        )
    finally:
        if client is not None:
            client.close()


def by_id(result: LeaseResult) -> dict[str, LeasedJob]:
    return {lj.job.id: lj for lj in result.jobs}


async def test_a_lease_reports_jobs_times_flow_control_and_damage(
    backend: Backend, clock: object
) -> None:
    store = backend.store(damageable=True)
    await store.enqueue_many([job("ok"), job("bad")])
    await damage(backend, store, "bad", "attempts")
    made = await store.enqueue_many(
        [
            limited("late", JobControl(expires_in=0.05)),
            limited("rated0", JobControl(rates=(("api", 1, 60.0, 1),))),
            limited("rated1", JobControl(rates=(("api", 1, 60.0, 1),))),
            limited("capped0", JobControl(caps=(("db", 1),))),
            limited("capped1", JobControl(caps=(("db", 1),))),
        ]
    )
    assert all(r.created for r in made)
    late, rated0, rated1, capped0, capped1 = (r.job_id for r in made)
    await trio.sleep(0.1)
    before = await store.now()
    result = await lease(store, ttl=30.0)
    after = await store.now()
    assert isinstance(result, LeaseResult)
    leased = by_id(result)
    # one of each limit's jobs leased, the other held back; the damaged and
    # the expired job are not leased
    assert len(leased) == 3 and "ok" in leased and "bad" not in leased and late not in leased
    assert sum(1 for lj in result.jobs if lj.job.control is not None) == 2
    for lj in result.jobs:
        assert before <= lj.leased_at <= after, (lj.leased_at, before, after)
        assert abs(lj.expires_at - lj.leased_at - 30.0) < 1e-6
        assert lj.job.lease_expires_at == lj.expires_at
    assert [j.id for j in result.aside.dead] == ["bad"]
    assert result.aside.dead[0].last_error.startswith("damaged record: field 'attempts'")
    assert not result.aside.quarantined and not result.aside.newer
    assert [(j.id, j.state) for j in result.expired] == [(late, JobState.DEAD)]
    assert result.held_for is not None and 0 < result.held_for <= 60.0, result.held_for
    assert result.capped
    assert len({rated0, rated1} & set(leased)) == 1, "one permit"
    assert len({capped0, capped1} & set(leased)) == 1, "one slot"
    # nothing left to lease: an empty result, still saying what holds back
    again = await lease(store)
    assert again.jobs == () and again.expired == () and not again.aside
    assert again.capped and again.held_for is not None


async def test_renew_reports_renewed_aborted_and_damage(backend: Backend, clock: object) -> None:
    store = backend.store(damageable=True)
    await store.enqueue_many([job("keep"), job("flagged"), job("bad")])
    leased = by_id(await lease(store))
    assert set(leased) == {"keep", "flagged", "bad"}
    await store.abort("flagged", reason="stop")
    await damage(backend, store, "bad", "lease_expires_at")
    refs = [leased[n].ref for n in ("keep", "flagged", "bad")]
    result = await store.renew(refs, LONG)
    assert isinstance(result, RenewResult)
    assert result.renewed == (True, True, False)
    assert result.aborted == {1}
    assert [j.id for j in result.aside.dead] == ["bad"]
    assert result.aside.dead[0].state is JobState.DEAD


async def test_settle_reports_settled_aborted_unclaimed_dead_and_damage(
    backend: Backend, clock: object
) -> None:
    store = backend.store(damageable=True)
    names = ("done", "flagged", "unclaimed", "bad", "stale")
    await store.enqueue_many([job(n) for n in names])
    leased = by_id(await lease(store))
    await store.abort("flagged")
    await damage(backend, store, "bad", "lease_expires_at")
    stale = attrs.evolve(leased["stale"].ref, token=leased["stale"].token + "-stale")
    result = await store.settle(
        [
            Settlement(leased["done"].ref, SettleKind.SUCCEEDED),
            Settlement(leased["flagged"].ref, SettleKind.RETRY, error="boom", retry_delay=1),
            Settlement(
                leased["unclaimed"].ref,
                SettleKind.UNCLAIMED,
                error="no handler",
                retry_delay=1,
                unclaimed_grace=0,
            ),
            Settlement(leased["bad"].ref, SettleKind.SUCCEEDED),
            Settlement(stale, SettleKind.SUCCEEDED),
        ]
    )
    assert isinstance(result, SettleResult)
    assert result.settled == (True, True, True, False, False)
    assert result.aborted == {1}, "the abort wins over the retry"
    assert result.unclaimed_dead == {2}, "grace 0: dead-lettered at once"
    assert [j.id for j in result.aside.dead] == ["bad"]
    states = {n: (await store.get_job(n, queue="q")) for n in names}
    assert states["flagged"] is not None and states["flagged"].state is JobState.ABORTED
    assert states["unclaimed"] is not None and states["unclaimed"].state is JobState.DEAD
    assert states["stale"] is not None and states["stale"].state is JobState.LEASED


async def test_trim_and_requeue_dead_report_a_count_and_damage(
    backend: Backend, clock: object
) -> None:
    store = backend.store(damageable=True)
    await store.enqueue_many([job(n) for n in ("s0", "s1", "d0", "d1", "d2")])
    leased = by_id(await lease(store))
    short = backend.pick(memory=1.0, redis=0.1)
    done = await store.settle(
        [Settlement(leased[n].ref, SettleKind.SUCCEEDED, retain_for=short) for n in ("s0", "s1")]
        + [Settlement(leased[n].ref, SettleKind.DEAD, error="x") for n in ("d0", "d1", "d2")]
    )
    assert done.settled == (True,) * 5
    await damage(backend, store, "s1", "state")
    await trio.sleep(short * 1.5)
    trimmed = await store.trim(["q"], dead_max_age=None, dead_max_count=None)
    assert isinstance(trimmed, CountResult)
    assert trimmed.count == 1, "s0's retention ended; s1 cannot be read"
    assert [j.id for j in trimmed.aside.dead] == ["s1"]
    # what requeue_dead judges: the whole record in memory; on Redis the
    # state (the lease judges the rest)
    await damage(backend, store, "d2", backend.pick(memory="attempts", redis="state"))
    requeued = await store.requeue_dead("q")
    assert isinstance(requeued, CountResult)
    assert requeued.count == 3, "d0, d1 and s1 (dead-lettered, readable again)"
    assert [j.id for j in requeued.aside.dead] == ["d2"]
    ready = {lj.job.id for lj in (await lease(store)).jobs}
    assert ready == {"d0", "d1", "s1"}
