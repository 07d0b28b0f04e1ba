"""Per-minute aggregates in a running worker (issue 30 item 3): every
confirmed outcome is counted in the worker (succeeded, failed = dead,
retried, run time), added to the store at most once per
``aggregate_interval`` in one call, never while idle, kept through a store
outage, and counted whatever the jobs' retention. On the MemoryStore under
Trio's virtual clock and on Redis, PostgreSQL and SQLite (tests/_backends.py).
The store's side is in the conformance suite
(chronos_trio/testing/_conformance_aggregates.py); expiry per backend here."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, MemoryStore, RetryPolicy, SkipRetry, WorkerConfig
from chronos_trio.records import KindCounts, MinuteCounts
from chronos_trio.records._aggregates import (
    BUCKETS,
    LATENCY_BOUNDS,
    bucket_of,
    check_counts,
    quantile,
)
from chronos_trio.runtime import AggregateTally
from chronos_trio.store import Capability, capabilities_of
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._scripts import Op
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.testing import FaultyStore, MinimalStore
from chronos_trio.testing._conformance_aggregates import hist
from tests._backends import Backend
from tests._support import wait_for


@attrs.frozen
class Work:
    fail: str = ""  # "", "retry" (once), "dead"
    seconds: float = 0.0


def totals(rows: list[MinuteCounts]) -> dict[str, tuple[int, int, int, int]]:
    """Per kind over every minute: succeeded, failed, retried, runs timed."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for r in rows:
        s, f, t, n = out.get(r.kind, (0, 0, 0, 0))
        out[r.kind] = (s + r.succeeded, f + r.failed, t + r.retried, n + r.runs)
    return out


# -- the histogram ------------------------------------------------------------------------
def test_buckets_are_log_spaced_and_quantiles_read_within_a_bucket() -> None:
    assert len(LATENCY_BOUNDS) == BUCKETS - 1 == 18
    assert all(b / a <= 2.5 for a, b in itertools.pairwise(LATENCY_BOUNDS))
    assert bucket_of(0.0) == 0 and bucket_of(-1) == 0 and bucket_of(0.001) == 0
    assert bucket_of(0.0011) == 1 and bucket_of(1.0) == 9 and bucket_of(1e9) == BUCKETS - 1
    assert quantile((0,) * BUCKETS, 0.5) is None
    # 100 runs of ~30 ms (bucket 20-50 ms) and one of 3 s
    h = [0] * BUCKETS
    h[bucket_of(0.03)] = 99
    h[bucket_of(3.0)] = 1
    p50, p99 = quantile(h, 0.5), quantile(h, 0.99)
    assert p50 is not None and 0.02 <= p50 <= 0.05
    assert p99 is not None and 0.02 <= p99 <= 0.05  # rank 99.99 of 100: still the first bucket
    p999 = quantile(h, 0.999)
    assert p999 is not None and 2.0 <= p999 <= 5.0
    over = [0] * BUCKETS
    over[-1] = 3
    assert quantile(over, 0.5) == LATENCY_BOUNDS[-1]


def test_bad_counts_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="ints >= 0"):
        check_counts(KindCounts("q", "k", succeeded=-1))
    with pytest.raises(ValueError, match="19 buckets"):
        check_counts(KindCounts("q", "k", latency=(1,)))
    with pytest.raises(ValueError, match="queue must be a non-empty str"):
        check_counts(KindCounts("", "k"))
    with pytest.raises(TypeError, match="KindCounts"):
        check_counts(("q", "k"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a number of seconds from 60 to"):
        WorkerConfig(aggregate_keep=10)


def test_the_tally_counts_in_memory_and_takes_everything() -> None:
    tally = AggregateTally()
    assert not tally.pending and tally.take() == []
    tally.succeeded("q", "a", 0.03)
    tally.succeeded("q", "a", None)  # did not run: counted, not timed
    tally.retried("q", "a", 0.003)
    tally.failed_run("q", "b", None)
    taken = tally.take()
    assert not tally.pending
    assert taken == [
        KindCounts("q", "a", 2, 0, 1, hist(b2=1, b5=1)),
        KindCounts("q", "b", 0, 1, 0, ()),
    ]
    tally.put_back(taken)
    tally.succeeded("q", "a", 0.03)
    assert tally.take()[0] == KindCounts("q", "a", 3, 0, 1, hist(b2=1, b5=2))


# -- a running worker -----------------------------------------------------------------------
def _app(backend: Backend) -> tuple[App, FaultyStore, Any]:
    store = backend.store()
    if Capability.AGGREGATES not in capabilities_of(store):
        pytest.skip(f"{type(store).__name__} keeps no aggregates")
    faulty = FaultyStore(store)  # counts the store calls
    app = App(faulty)  # type: ignore[arg-type]

    @app.task("work", max_retries=1, retry=RetryPolicy(base=0.1, max_delay=0.1))
    async def work(args: Work, job: JobContext) -> None:
        await trio.sleep(args.seconds)
        if args.fail == "dead":
            raise SkipRetry("no")
        if args.fail == "retry" and job.attempt == 1:
            raise RuntimeError("once")

    return app, faulty, work


async def test_outcomes_are_counted_and_written_in_one_call_per_interval(
    backend: Backend, clock: object
) -> None:
    app, store, task = _app(backend)
    since = await store.now()
    # retain_succeeded 0 (the default): successes are dropped, and still counted
    async with app.open_worker(aggregate_interval=2.0, **backend.timing()) as worker:
        for _i in range(20):
            await task.enqueue(Work(seconds=0.03))
        await task.enqueue(Work(fail="retry", seconds=0.003))
        await task.enqueue(Work(fail="dead"))
        with trio.fail_after(30):
            await wait_for(lambda: worker.runtime.counters.succeeded == 21, timeout=30)
            await wait_for(lambda: worker.runtime.counters.dead == 1, timeout=30)
        # every outcome reaches the store within an interval or two
        with trio.fail_after(30):
            while totals(rows := await store.aggregates(["default"], since)) != {
                "work": (21, 1, 1, 23)
            }:
                await trio.sleep(0.1)
        writes = store.calls["add_aggregates"]
        assert 1 <= writes <= 4, "one write per interval at most"
        merged = [0] * BUCKETS
        for r in rows:
            merged = [a + b for a, b in zip(merged, r.latency, strict=True)]
        p50 = quantile(merged, 0.5)
        # the 30 ms runs dominate (a loaded machine's runs may take longer)
        assert p50 is not None and 0.02 <= p50 <= (0.05 if backend.virtual else 1.0), p50
        # idle: no more writes
        await trio.sleep(6.0 if backend.virtual else 4.5)
        assert store.calls["add_aggregates"] == writes, "an idle worker writes nothing"
    assert worker.runtime.aggregates is not None
    assert worker.runtime.aggregates.statistics().failed == 0


async def test_counts_survive_a_store_outage_and_the_last_are_written_at_shutdown(
    backend: Backend, clock: object
) -> None:
    app, store, task = _app(backend)
    since = await store.now()
    async with app.open_worker(aggregate_interval=1.0, **backend.timing()) as worker:
        store.fail("add_aggregates", times=2)
        for _i in range(5):
            await task.enqueue(Work())
        await wait_for(lambda: worker.runtime.counters.succeeded == 5, timeout=30)
        await wait_for(lambda: store.calls["add_aggregates"] >= 3, timeout=30)
        # the third call (counted as it starts) writes what the two failed ones held
        with trio.fail_after(30):
            while totals(await store.aggregates(["default"], since)) != {"work": (5, 0, 0, 5)}:
                await trio.sleep(0.05)
        # the tally counts the write when the store call has returned, which can be a
        # moment after the counts are readable in the store
        tally = worker.runtime.aggregates
        assert tally is not None
        await wait_for(lambda: tally.statistics().writes >= 1, timeout=30)
        assert tally.statistics().writes == 1
        # the last ones: counted after the aggregator's last tick, written at shutdown
        worker.runtime.aggregates.succeeded("default", "late", None)  # type: ignore[union-attr]
    assert worker.runtime.aggregates is not None
    assert worker.runtime.aggregates.statistics().failed == 2
    assert totals(await store.aggregates(["default"], since))["late"] == (1, 0, 0, 0)


async def test_memory_minutes_older_than_keep_go(autojump_clock: object) -> None:
    """A minute is kept ``keep`` seconds after it ends, then the next add drops it."""
    store = MemoryStore()
    await store.add_aggregates([KindCounts("q", "k", succeeded=1)], keep=120)
    first = (await store.aggregates(["q"], 0.0))[0].minute
    await trio.sleep(first + 60 + 120 - 1 - await store.now())
    await store.add_aggregates([KindCounts("q", "k", succeeded=2)], keep=120)
    assert [r.minute for r in await store.aggregates(["q"], 0.0)] == [first, first + 120]
    await trio.sleep(2)
    await store.add_aggregates([KindCounts("q", "k", succeeded=3)], keep=120)
    rows = await store.aggregates(["q"], 0.0)
    assert [(r.minute, r.succeeded) for r in rows] == [(first + 120, 2), (first + 180, 3)]


async def test_minutes_past_keep_go_on_each_real_backend(backend: Backend, clock: object) -> None:
    """Redis: the minute's hash expires ``keep`` s after the minute ends (its
    TTL); SQL: an add deletes the rows of minutes older than ``keep``."""
    if backend.virtual:
        pytest.skip("the MemoryStore's expiry runs on the virtual clock above")
    store = backend.store()
    keep = 600.0
    now = await store.now()  # type: ignore[attr-defined]
    if isinstance(store, RedisStore):
        await store.add_aggregates([KindCounts("q", "k", succeeded=1)], keep=keep)
        (minute,) = [r.minute for r in await store.aggregates(["q"], 0.0)]
        key = store._ctx.keys.aggregates("q") + str(minute)
        (ttl,) = await store._adapter.execute([Op.command(key, "TTL", key)])
        assert minute + 60 + keep - now - 2 <= int(ttl) <= minute + 60 + keep - now + 2
        return
    old = int(now // 60) * 60 - int(keep) - 120  # ended 60 s more than keep ago
    kept = old + 120  # ended less than keep ago
    insert = "INSERT INTO aggregates (queue, kind, minute, succeeded) VALUES ('q', 'k', {}, 7)"
    if isinstance(store, SqliteStore):

        def plant(conn: Any) -> None:
            conn.execute(insert.format(old))
            conn.execute(insert.format(kept))

        await store._db.write(plant, what="test", wake=False)
    else:
        assert isinstance(store, PostgresStore)

        def plant_pg(conn: Any) -> None:
            conn.execute(insert.format(old))
            conn.execute(insert.format(kept))

        await store._db.run(plant_pg, what="test")
    assert [r.minute for r in await store.aggregates(["q"], 0.0)] == [old, kept]
    await store.add_aggregates([KindCounts("q", "k", succeeded=1)], keep=keep)
    rows = await store.aggregates(["q"], 0.0)
    assert [r.minute for r in rows][:1] == [kept] and len(rows) == 2, rows


async def test_a_store_without_aggregates_counts_nothing(autojump_clock: object) -> None:
    """The core alone: no tally, no aggregator; jobs still run."""
    app = App(MinimalStore())
    done = []

    @app.task("work")
    async def work(args: Work, job: JobContext) -> None:
        done.append(job.id)

    await work.enqueue(Work())
    async with app.open_worker() as worker:
        await wait_for(lambda: done, timeout=10)
        assert worker.runtime.aggregates is None


def test_names_the_aggregates_refuse_are_counted_under_a_shown_name() -> None:
    """A damaged record's empty kind, or one past MAX_NAME, would make every
    write fail (and held up the worker's shutdown in the damaged-record fuzz
    tests): the tally counts them under a name the store takes."""
    from chronos_trio.records._aggregates import MAX_NAME

    tally = AggregateTally()
    tally.failed_run("q", "", None)
    tally.succeeded("q", "k" * (MAX_NAME + 5), None)
    tally.succeeded("q", "k" * (MAX_NAME + 9), None)  # shown alike: one row
    counts = {(c.queue, c.kind): c for c in tally.take()}
    assert counts[("q", "?")].failed == 1
    assert counts[("q", "k" * MAX_NAME)].succeeded == 2
    assert len(counts) == 2


async def test_counts_the_store_refuses_are_dropped_not_retried_forever() -> None:
    from types import SimpleNamespace

    from chronos_trio.actors import aggregator

    class Refusing:
        calls = 0

        async def add_aggregates(self, counts: Any, *, keep: float) -> None:
            Refusing.calls += 1
            raise ValueError("refused")

    tally = AggregateTally()
    tally.succeeded("q", "k", None)
    rt: Any = SimpleNamespace(store=Refusing(), config=SimpleNamespace(aggregate_keep=60.0))
    await aggregator.write(rt, tally)
    assert Refusing.calls == 1 and not tally.pending and tally.failed == 1
