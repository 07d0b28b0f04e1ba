"""The SQLite store's hot path where the conformance suite cannot see: the
enqueue's bulk path and its job-by-job path give the same answers and rows,
and claims of several stores (as several processes would) on one file never
lease a job twice nor admit past a concurrency limit."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio.records._control import JobControl
from chronos_trio.records._jobs import EnqueueResult, LeasedJob, NewJob
from chronos_trio.records._unique import Unique
from chronos_trio.store import QueueWeight
from chronos_trio.store._partitioning import id_hash
from chronos_trio.store.sqlite import SqliteStore, _claim, _results, _states
from chronos_trio.store.sqlite._connections import _statements, schema_sql

pytestmark = pytest.mark.sqlite

NOW = 1_800_000_000.0


def _job(job_id: str, queue: str = "q", **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b'{"n": 1}', **kw)


def _batch() -> list[NewJob]:
    """Plain jobs of every shape the bulk path stores: due, delayed, at a
    time past and future, with headers, a continuation, a priority and a
    relative expiry, in a queue with a promoted version (4 partitions)."""
    return [
        _job("due"),
        _job("delayed", delay=30.0),
        _job("past", run_at=NOW - 5),
        _job("future", run_at=NOW + 60),
        _job("headers", headers=(("trace", "t1"), ("who", "me"))),
        _job("then", then='{"next": 1}'),
        _job("urgent", control=JobControl(priority=7, expires_in=90.0)),
        _job("capped", control=JobControl(caps=(("k", 2),), rates=(("r", 5, 1.0, 2),))),
        *(_job(f"p{i}", "parted") for i in range(8)),
    ]


def _rows(path: str, exclude: str = "") -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        jobs = conn.execute("SELECT * FROM jobs WHERE id <> ? ORDER BY id", (exclude,)).fetchall()
        queues = conn.execute("SELECT * FROM queues ORDER BY name").fetchall()
    return [*jobs, *queues]


def _promote(path: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO queue_versions VALUES ('parted', 3, 4, 'active')")


async def _enqueue(store: SqliteStore, jobs: list[NewJob]) -> list[EnqueueResult]:
    with trio.fail_after(30):
        return await store.enqueue_many(jobs)


async def test_bulk_and_job_by_job_enqueue_agree(sqlite_urls: Callable[[], str]) -> None:
    bulk = SqliteStore.from_url(sqlite_urls(), clock=lambda: NOW)
    one = SqliteStore.from_url(sqlite_urls(), clock=lambda: NOW)
    try:
        for store in (bulk, one):
            await _enqueue(store, [_job("warm")])  # the file exists
            _promote(store.path)
        # a unique job (of another queue) sends the whole batch job by job
        odd = _job("odd", "other", unique=Unique(key="u"))
        got_bulk = await _enqueue(bulk, _batch())
        got_one = await _enqueue(one, [*_batch(), odd])
        assert got_one[:-1] == got_bulk
        assert all(r.created for r in got_bulk)
        by_id = {r.job_id: r for r in got_bulk}
        assert by_id["due"].run_at == NOW and by_id["delayed"].run_at == NOW + 30
        assert by_id["p3"].placement == (3, id_hash("p3") % 4)
        assert by_id["due"].placement == (1, 0)
        bulk_rows = _rows(bulk.path)
        one_rows = [r for r in _rows(one.path, exclude="odd") if r != ("other", 0)]
        assert bulk_rows == one_rows
        states = {r[0]: r[5] for r in bulk_rows if len(r) > 2}
        assert states["due"] == "ready" and states["past"] == "ready"
        assert states["delayed"] == "scheduled" and states["future"] == "scheduled"
        controls = {r[0]: (r[19], r[20]) for r in bulk_rows if len(r) > 2}
        assert controls["urgent"] == (f"p7\ne{NOW + 90.0!r}", 7)

        # again, with IDs that exist: the bulk path gives way to the job by
        # job one, which reports each existing job as it stands
        again = [_job("due", delay=99.0), _job("new1"), _job("future"), _job("new2")]
        got_bulk = await _enqueue(bulk, again)
        got_one = await _enqueue(one, again)
        assert got_bulk == got_one
        assert [r.created for r in got_bulk] == [False, True, False, True]
        assert got_bulk[0].run_at == NOW and got_bulk[2].run_at == NOW + 60
        assert _rows(bulk.path) == [r for r in _rows(one.path, exclude="odd") if r != ("other", 0)]
        # a repeated ID within one batch: the first is stored, the second finds it
        twice = await _enqueue(bulk, [_job("x", delay=5.0), _job("x")])
        assert [(r.created, r.run_at) for r in twice] == [(True, NOW + 5), (False, NOW + 5)]
    finally:
        await bulk.aclose()
        await one.aclose()


async def test_two_stores_on_one_file_never_lease_a_job_twice(sqlite_url: str) -> None:
    producer = SqliteStore.from_url(sqlite_url)
    stores = [SqliteStore.from_url(sqlite_url) for _ in range(2)]
    total = 2_000
    leased: list[tuple[int, LeasedJob]] = []
    try:
        await _enqueue(producer, [_job(f"j{i:04}") for i in range(total)])

        async def claimer(which: int, store: SqliteStore) -> None:
            while True:
                got = await store.lease(
                    [QueueWeight("q")], 37, worker_id=f"w{which}", lease_duration=300
                )
                if not got.jobs:
                    return
                leased.extend((which, lj) for lj in got.jobs)

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for which, store in enumerate(stores):
                    for _ in range(3):
                        nursery.start_soon(claimer, which, store)
        ids = [lj.job.id for _, lj in leased]
        assert len(ids) == total and len(set(ids)) == total
        assert len({lj.token for _, lj in leased}) == total
        assert {which for which, _ in leased} == {0, 1}  # both took part
        for which, lj in leased:
            assert lj.job.lease_owner == f"w{which}" and lj.job.attempts == 1
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute("SELECT state, attempts, count(*) FROM jobs GROUP BY 1, 2")
            assert rows.fetchall() == [("leased", 1, total)]
    finally:
        for store in (producer, *stores):
            await store.aclose()


async def test_two_stores_never_admit_past_a_concurrency_limit(sqlite_url: str) -> None:
    producer = SqliteStore.from_url(sqlite_url)
    stores = [SqliteStore.from_url(sqlite_url) for _ in range(2)]
    capped = JobControl(caps=(("k", 3),))
    try:
        await _enqueue(producer, [_job(f"j{i:03}", control=capped) for i in range(100)])
        leased: list[LeasedJob] = []

        async def claimer(store: SqliteStore) -> None:
            for _ in range(10):
                got = await store.lease([QueueWeight("q")], 5, worker_id="w", lease_duration=300)
                leased.extend(got.jobs)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for store in stores:
                    for _ in range(2):
                        nursery.start_soon(claimer, store)
        assert len(leased) == 3
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            slots = conn.execute("SELECT key, count(*) FROM slots GROUP BY key").fetchall()
        assert slots == [("k", 3)]
    finally:
        for store in (producer, *stores):
            await store.aclose()


async def test_claims_read_priority_levels_in_lease_order(sqlite_url: str) -> None:
    clock = [NOW]
    store = SqliteStore.from_url(sqlite_url, clock=lambda: clock[0])

    def at(job_id: str, priority: int, run_at: float, queue: str = "q") -> NewJob:
        return _job(job_id, queue, run_at=run_at, control=JobControl(priority=priority))

    try:
        await _enqueue(
            store,
            [
                at("hi-later", 5, NOW + 10),  # a level whose first job is not due
                at("hi-b", 5, NOW - 1),
                at("hi-a", 5, NOW - 1),
                at("mid", 0, NOW - 9),
                _job("plain", run_at=NOW - 20),
                *(at(f"far{i}", 3, NOW + 100 + i) for i in range(50)),  # none due
                at("lo", -3, NOW - 30),
                at("other", 9, NOW - 1, "r"),
            ],
        )

        async def ids(count: int, *queues: str) -> list[str]:
            got = await store.lease(
                [QueueWeight(q) for q in queues], count, worker_id="w", lease_duration=60
            )
            return [lj.job.id for lj in got.jobs]

        assert await ids(3, "q") == ["hi-a", "hi-b", "plain"]
        assert await ids(10, "q") == ["mid", "lo"]  # plain came before mid: due earlier
        assert await ids(10, "q") == []  # far and later: not due
        clock[0] = NOW + 10
        assert await ids(10, "q", "r") == ["hi-later", "other"]
        clock[0] = NOW + 200
        assert await ids(60, "q") == [f"far{i}" for i in range(50)]
    finally:
        await store.aclose()


def test_state_filters_are_the_schemas_and_the_hot_queries_use_its_indexes(
    tmp_path: Path,
) -> None:
    """The OR-chain state filters (``_states``) appear verbatim in
    ``schema.sql`` (an IN list there costs a temporary table per row
    written), and the claim, the idle wait's next due time and recovery
    are served by their partial indexes (SQLite uses one only for a query
    that repeats its filter term for term): none scans the jobs table."""
    schema = schema_sql()
    for text in _states.INDEXED:
        assert text in schema, text
    assert "state IN" not in schema
    conn = sqlite3.connect(tmp_path / "plans.db")
    for statement in _statements(schema):
        conn.execute(statement)
    plans = {
        "claim": (_claim._PICK, ("q", 0, 1.0, "[]", 10), "jobs_claim"),
        "next due": (_results._NEXT_DUE, (1.0, '["q"]'), "jobs_due"),
        "top level": (_claim._TOP, ("q",), "jobs_claim"),
    }
    for name, (query, params, index) in plans.items():
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, params))
        assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, (
            name,
            plan,
        )
        assert "SCAN jobs" not in plan, (name, plan)
