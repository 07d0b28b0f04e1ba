"""Guarantees of the Redis backend that only a deliberate break exposed:
namespaces are isolated on the hot paths, not only in reads, and the promote
script judges due times itself on many partitions and on the Cluster (the
Python side's own filter must not be the only thing standing between a job
and an early start)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from chronos_trio import JobState, NewJob
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore, _jobs

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def job(job_id: str, **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}", **kw)


@pytest.mark.parametrize("partitions", [1, 8])
async def test_hot_paths_never_cross_namespaces(redis_store: Factory, partitions: int) -> None:
    a = await redis_store(namespace="a", default_partitions=partitions)
    b = await redis_store(namespace="b", default_partitions=partitions)
    # The same job ids are new jobs in each namespace.
    ids = [f"j{i}" for i in range(12)]
    for store in (a, b):
        results = await store.enqueue_many([job(i) for i in ids[:6]])
        results += await store.enqueue_many([job(i, delay=0.3) for i in ids[6:]])
        assert all(r.created for r in results)
    # a's worker leases, promotes, renews and recovers only a's jobs.
    leased = (await a.lease([QueueWeight("q")], 100, worker_id="wa", lease_duration=0.5)).jobs
    assert sorted(lj.job.id for lj in leased) == ids[:6]
    [b_stats] = await b.stats(["q"])
    assert b_stats.counts[JobState.READY] == 6 and b_stats.counts[JobState.LEASED] == 0
    await trio.sleep(0.4)
    promoted = await a.promote_due(["q"], 100)
    assert promoted.promoted == 6
    [b_stats] = await b.stats(["q"])
    assert b_stats.counts[JobState.SCHEDULED] == 6, "a promoted b's jobs"
    assert (await a.renew([lj.ref for lj in leased], 0.5)).renewed == (True,) * 6
    await trio.sleep(0.6)
    recovered = await a.recover_expired(["q"], 100)
    assert sorted(recovered.requeued) == ids[:6]
    # b's own jobs are untouched by all of it and work on their own.
    b_leased = (await b.lease([QueueWeight("q")], 100, worker_id="wb", lease_duration=5)).jobs
    assert sorted(lj.job.id for lj in b_leased) == ids[:6]
    assert all(lj.job.attempts == 1 for lj in b_leased), "a's leases counted in b"
    applied = await b.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in b_leased])
    assert applied.settled == (True,) * 6
    [a_stats] = await a.stats(["q"])
    assert a_stats.counts[JobState.READY] == 12 and a_stats.total == 12


async def _promote_script_bound(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Break the Python side's filter: plan every candidate of the peek, due
    # or not. Only the script's own due-time check keeps the early ones back.
    real = _jobs.earliest

    def unfiltered(candidates: Any, n: int, bound: float | None = None) -> Any:
        return real(candidates, n, None)

    monkeypatch.setattr(_jobs, "earliest", unfiltered)
    due = [job(f"due{i}") for i in range(4)]
    early = [job(f"early{i}", delay=0.6) for i in range(16)]
    await store.enqueue_many([job(f"x{i}", delay=0.05) for i in range(4)])
    await store.enqueue_many(early)
    await trio.sleep(0.1)
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.SCHEDULED] == 20
    await store.enqueue_many(due)
    result = await store.promote_due(["q"], 100)
    assert result.promoted == 4, "the x jobs are due; the early ones are not"
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.SCHEDULED] == 16 and stats.counts[JobState.READY] == 8
    leased = (await store.lease([QueueWeight("q")], 100, worker_id="w", lease_duration=5)).jobs
    assert not any(lj.job.id.startswith("early") for lj in leased)


async def test_promote_script_keeps_early_jobs_back_on_8_partitions(
    redis_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await redis_store(default_partitions=8)
    with trio.fail_after(30):
        await _promote_script_bound(store, monkeypatch)


@pytest.mark.cluster
async def test_promote_script_keeps_early_jobs_back_on_the_cluster(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(redis_cluster_url, default_partitions=8)
    try:
        with trio.fail_after(30):
            await _promote_script_bound(store, monkeypatch)
    finally:
        await store.aclose()
