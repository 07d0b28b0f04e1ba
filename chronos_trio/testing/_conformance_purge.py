"""Conformance checks of a queue purge (:meth:`~chronos_trio.store.AdminRole.purge_queue`):
every job that is not leased goes, whole, a batch at a time; leased jobs
finish as usual; other queues are untouched. Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

from ..records._jobs import JobState
from ..store._capabilities import Capability
from ..store._roles import AbortResult, SettleKind, Store
from .conformance import Fresh, check, job, lease, settle, unique_job

#: The jobs :func:`_fill` leaves in each state but leased, by ID.
_PURGED = {
    "sched": JobState.SCHEDULED,
    "ready": JobState.READY,
    "retry": JobState.RETRY_WAIT,
    "dead": JobState.DEAD,
    "kept": JobState.SUCCEEDED,
    "aborted": JobState.ABORTED,
}


async def _fill(store: Store) -> str:
    """Queue ``q`` with one job in every state (``_PURGED``, and one leased,
    whose ID is returned) and one job of queue ``other``."""
    await store.enqueue_many([job(i) for i in ("retry", "dead", "kept", "running")])
    got = {lj.job.id: lj for lj in await lease(store)}
    await store.settle(
        [
            settle(got["retry"], SettleKind.RETRY, error="again", retry_delay=100),
            settle(got["dead"], SettleKind.DEAD, error="bad"),
            settle(got["kept"], SettleKind.SUCCEEDED, retain_for=100),
        ]
    )
    await store.enqueue_many(
        [job("sched", delay=100), job("ready"), job("aborted", delay=100), job("o", queue="other")]
    )
    assert await store.abort("aborted", queue="q") is AbortResult.ABORTED
    for job_id, state in _PURGED.items():
        found = await store.get_job(job_id, queue="q")
        assert found is not None and found.state is state, (job_id, found)
    return got["running"].job.id


@check(Capability.ADMIN, Capability.ABORT)
async def check_purge_deletes_every_job_but_the_leased_ones(fresh: Fresh) -> None:
    store = await fresh()
    running = await _fill(store)
    assert (await store.purge_queue("q", limit=2)).count == 2, "at most limit jobs go per call"
    left = [i for i in _PURGED if await store.get_job(i, queue="q") is not None]
    assert len(left) == len(_PURGED) - 2, "the jobs a call reports deleted are gone, whole"
    total = 2
    for _ in range(10):
        done = (await store.purge_queue("q", limit=3)).count
        if done == 0:
            break
        total += done
    assert total == len(_PURGED), f"every job but the leased one goes: {total}"
    for job_id in _PURGED:
        assert await store.get_job(job_id) is None, f"{job_id} was purged"
        for state in JobState:
            assert job_id not in [j.id for j in await store.list_jobs("q", state)]
    [stats] = await store.stats(["q"])
    assert {s: n for s, n in stats.counts.items() if n} == {JobState.LEASED: 1}
    leased = await store.get_job(running, queue="q")
    assert leased is not None and leased.state is JobState.LEASED, "a leased job is left to run"
    other = await store.get_job("o", queue="other")
    assert other is not None and other.state is JobState.READY, "another queue is untouched"
    assert (await store.purge_queue("q", limit=100)).count == 0
    assert (await store.purge_queue("never-known", limit=100)).count == 0


@check(Capability.ADMIN)
async def check_purge_leaves_leased_jobs_to_finish(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a"), job("b")])
    a, b = sorted(await lease(store), key=lambda lj: lj.job.id)
    await store.enqueue_many([job("c")])
    assert (await store.purge_queue("q", limit=100)).count == 1
    done = await store.settle(
        [
            settle(a, SettleKind.SUCCEEDED, retain_for=100),
            settle(b, SettleKind.RETRY, error="x", retry_delay=100),
        ]
    )
    assert done.settled == (True, True), "a purge does not touch a running job's lease"
    assert [j.id for j in await store.list_jobs("q", JobState.SUCCEEDED)] == ["a"]
    assert (await store.purge_queue("q", limit=100)).count == 2, "once finished, they go too"
    assert await store.get_job("a") is None and await store.get_job("b") is None


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_purge_releases_unique_keys(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("k", delay=100)])
    assert first.created
    assert (await store.purge_queue("q", limit=100)).count == 1
    [again] = await store.enqueue_many([unique_job("k", delay=100, n=1)])
    assert again.created, "a purged job's unique key is free again"
