"""Inspector.search and bulk actions (issue 30 items 1 and 2) on memory and on
Redis (8 partitions, so a search walks many index windows and a bulk action
over a filter moves jobs out of the very index it walks). The store method
itself is held to the conformance suite (testing/_conformance_search.py)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import trio

from chronos_trio import (
    BulkAction,
    BulkResult,
    Inspector,
    JobQuery,
    JobState,
    MemoryStore,
    NewJob,
    QueueWeight,
    Store,
    UnknownQueue,
)
from chronos_trio.app._bulk import act_on_job
from chronos_trio.store import SettleKind, Settlement
from chronos_trio.store.redis import RedisStore

_namespaces = itertools.count()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryStore()
    else:
        url = request.getfixturevalue("redis_url")
        made = RedisStore.from_url(
            url, namespace=f"search{next(_namespaces)}", default_partitions=8
        )
    try:
        yield made
    finally:
        await made.aclose()


async def _dead(store: Store, queue: str, ids: list[str], error: str) -> None:
    """Enqueue ``ids`` and let them die with ``error`` (worker ``w9``)."""
    await store.enqueue_many(
        [NewJob(id=i, queue=queue, kind="k", payload=b'{"n": 1}', max_retries=0) for i in ids]
    )
    got = await store.lease([QueueWeight(queue)], len(ids), worker_id="w9", lease_duration=30)
    assert len(got.jobs) == len(ids)
    done = await store.settle([Settlement(lj.ref, SettleKind.DEAD, error=error) for lj in got.jobs])
    assert all(done.settled)


async def _bulk_all(
    inspector: Inspector, action: str, query: JobQuery, *, batch: int, scan_limit: int = 10_000
) -> tuple[BulkResult, int]:
    total, steps, cursor = BulkResult(), 0, None
    while True:
        progress = await inspector.bulk_matching(
            action, query, cursor=cursor, batch=batch, scan_limit=scan_limit
        )
        total += progress.result
        steps += 1
        assert steps < 200, "a bulk action always makes progress"
        if progress.finished:
            return total, steps
        cursor = progress.cursor


async def test_search_pages_through_a_filter_with_cursors(store: Store) -> None:
    with trio.fail_after(20):
        inspector = Inspector(store)
        await _dead(store, "q", [f"boom{i:02d}" for i in range(13)], "ValueError: boom")
        await _dead(store, "q", [f"other{i}" for i in range(4)], "KeyError: nope")
        await store.enqueue_many([NewJob(id="live", queue="q", kind="k", payload=b"{}")])
        seen: list[str] = []
        cursor = None
        while True:
            page = await inspector.search(JobQuery(error="BOOM"), cursor=cursor, limit=5)
            assert len(page.jobs) <= 5
            seen += [j.id for j in page.jobs]
            if page.cursor is None:
                break
            cursor = page.cursor
        assert sorted(seen) == [f"boom{i:02d}" for i in range(13)], "each found once"
        # a tiny scan bound: short pages that say so, and the cursor keeps searching
        page = await inspector.search(JobQuery(kind="none"), scan_limit=3)
        assert page.partial and page.jobs == () and page.scanned == 3 and page.cursor
        with pytest.raises(UnknownQueue, match="unknown queue 'nope'"):
            await inspector.search(JobQuery(queues=("nope",)))


async def test_bulk_requeue_of_a_filtered_set_in_small_steps(store: Store) -> None:
    """7 dead jobs match, 3 dead ones do not: steps of 2 requeue exactly
    the 7 (none skipped though each step moves jobs out of the index the
    search walks), and leave the others dead."""
    with trio.fail_after(20):
        inspector = Inspector(store)
        await _dead(store, "q", [f"m{i}" for i in range(7)], "Timeout talking to SMTP")
        await _dead(store, "q", [f"x{i}" for i in range(3)], "bad payload")
        total, steps = await _bulk_all(inspector, "requeue", JobQuery(error="smtp"), batch=2)
        assert total == BulkResult(done=7), total
        assert steps >= 4
        counts = (await inspector.queue("q")).counts
        assert counts[JobState.READY] == 7 and counts[JobState.DEAD] == 3
        left = await inspector.search(JobQuery(states=("dead",)))
        assert sorted(j.id for j in left.jobs) == ["x0", "x1", "x2"]
        again = await inspector.search(JobQuery(error="smtp", states=("ready",)))
        assert all(j.attempts == 0 for j in again.jobs) and len(again.jobs) == 7


async def test_bulk_delete_and_abort_skip_what_they_do_not_apply_to(store: Store) -> None:
    with trio.fail_after(20):
        inspector = Inspector(store)
        await store.enqueue_many(
            [NewJob(id=f"j{i}", queue="q", kind="k", payload=b"{}") for i in range(5)]
        )
        got = await store.lease([QueueWeight("q")], 2, worker_id="w1", lease_duration=30)
        leased = sorted(lj.job.id for lj in got.jobs)
        # selected rows: the two leased ones cannot be deleted; a missing one is counted
        picked = [("q", "j0"), ("q", "j1"), ("q", "j2"), ("q", "gone")]
        result = await inspector.bulk("delete", picked)
        assert result.missing == 1
        assert result.done + result.skipped == 3
        assert result.skipped == sum(1 for i in ("j0", "j1", "j2") if i in leased)
        # abort everything matching: the waiting ones at once, the leased flagged
        total, _ = await _bulk_all(inspector, "abort", JobQuery(queues=("q",)), batch=1)
        assert total.flagged == 2 and total.skipped == 0
        counts = (await inspector.queue("q")).counts
        assert counts[JobState.LEASED] == 2
        assert counts[JobState.ABORTED] == total.done - total.flagged
        assert counts[JobState.READY] == 0
        with pytest.raises(ValueError, match="unknown bulk action 'explode'"):
            await inspector.bulk("explode", picked)


async def test_a_job_that_changed_state_meanwhile_is_skipped_not_forced(store: Store) -> None:
    with trio.fail_after(20):
        await _dead(store, "q", ["d"], "boom")
        [found] = (await store.search_jobs(JobQuery(states=("dead",)))).jobs
        assert await store.run_now("d", queue="q")  # someone requeued it meanwhile
        got = await store.lease([QueueWeight("q")], 1, worker_id="w2", lease_duration=30)
        assert [lj.job.id for lj in got.jobs] == ["d"]
        assert await act_on_job(store, BulkAction.REQUEUE, found) == BulkResult(skipped=1)
        assert await act_on_job(store, BulkAction.DELETE, found) == BulkResult(skipped=1)
        job = await store.get_job("d", queue="q")
        assert job is not None and job.state is JobState.LEASED, "left as it was"
