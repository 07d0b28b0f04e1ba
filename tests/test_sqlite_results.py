"""The SQLite store's settle, results, waiters and workflow statements
(``sqlite/_settle.py``, ``sqlite/_results.py``) on rows written by hand, so
they are judged apart from enqueue and claim: each SettleKind, fencing,
abort overriding, unique keys, slots, rate limits, result waiters, the
workflow outbox, group arrivals, and the statements a batch costs."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from chronos_trio.records._control import JobControl
from chronos_trio.records._jobs import JobRef, JobState, LeaseRef, NewJob
from chronos_trio.records._workflow import WORKFLOW_KEEP, Arrival
from chronos_trio.store._admission import tolerance
from chronos_trio.store._roles import AbortResult, QueueWeight, SettleKind, Settlement
from chronos_trio.store._settling import WAITED_KEEP
from chronos_trio.store.sqlite import SqliteStore, _results, _settle

pytestmark = pytest.mark.sqlite

T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(sqlite_url: str, clock: Clock) -> AsyncIterator[SqliteStore]:
    s = SqliteStore.from_url(sqlite_url, clock=clock)
    try:
        yield s
    finally:
        await s.aclose()


async def sql(store: SqliteStore, statement: str, *params: Any) -> list[Any]:
    def work(conn: sqlite3.Connection) -> list[Any]:
        return conn.execute(statement, params).fetchall()

    return await store._db.write(work, what="test")


async def leased(
    store: SqliteStore,
    job_id: str,
    *,
    token: str = "tok",
    queue: str = "q",
    expires: float = T0 + 30,
    attempts: int = 1,
    max_retries: int = 3,
    **columns: Any,
) -> LeaseRef:
    """A leased job's row, as a claim would leave it."""
    row: dict[str, Any] = {
        "id": job_id,
        "queue": queue,
        "kind": "k",
        "payload": b"p",
        "run_at": T0 - 1,
        "state": "leased",
        "attempts": attempts,
        "max_retries": max_retries,
        "timeout": 10.0,
        "lease_token": token,
        "lease_owner": "w",
        "lease_expires_at": expires,
        "created_at": T0 - 5,
        **columns,
    }
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    await sql(store, f"INSERT INTO jobs ({names}) VALUES ({marks})", *row.values())
    return LeaseRef(job_id, queue, token)


async def row_of(store: SqliteStore, job_id: str) -> dict[str, Any] | None:
    def work(conn: sqlite3.Connection) -> dict[str, Any] | None:
        cur = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
        found = cur.fetchone()
        if found is None:
            return None
        return dict(zip([d[0] for d in cur.description], found, strict=True))

    return await store._db.read(work, what="test")


def settled(ref: LeaseRef, kind: SettleKind, **kw: Any) -> Settlement:
    return Settlement(ref, kind, **kw)


# -- each SettleKind ------------------------------------------------------------------
async def test_success_nothing_keeps_is_deleted(store: SqliteStore) -> None:
    ref = await leased(store, "a")
    result = await store.settle([settled(ref, SettleKind.SUCCEEDED)])
    assert result.settled == (True,)
    assert await row_of(store, "a") is None


async def test_success_retained_and_result_kept(store: SqliteStore) -> None:
    kept = await leased(store, "kept")
    res = await leased(store, "res")
    result = await store.settle(
        [
            settled(kept, SettleKind.SUCCEEDED, retain_for=100),
            settled(res, SettleKind.SUCCEEDED, result=b"r", result_ttl=50),
        ]
    )
    assert result.settled == (True, True)
    row = await row_of(store, "kept")
    assert row is not None
    assert (row["state"], row["retained"], row["retain_until"]) == ("succeeded", 1, T0 + 100)
    assert (row["lease_token"], row["lease_expires_at"], row["finished_at"]) == ("", None, T0)
    row = await row_of(store, "res")
    assert row is not None
    assert (row["retained"], row["retain_until"], row["result"]) == (0, T0 + 50, b"r")
    out = await store.outcome(JobRef("res", "q"))
    assert out is not None and out.result == b"r" and out.state is JobState.SUCCEEDED


async def test_a_result_with_no_ttl_is_not_kept(store: SqliteStore) -> None:
    ref = await leased(store, "a")
    await store.settle([settled(ref, SettleKind.SUCCEEDED, result=b"r", result_ttl=0)])
    assert await row_of(store, "a") is None


async def test_retry_dead_release(store: SqliteStore) -> None:
    r = await leased(store, "r", unclaimed_since=T0 - 3)
    d = await leased(store, "d")
    rel = await leased(store, "rel", attempts=2)
    result = await store.settle(
        [
            settled(r, SettleKind.RETRY, error="boom", retry_delay=7),
            settled(d, SettleKind.DEAD, error="bad"),
            settled(rel, SettleKind.RELEASE),
        ]
    )
    assert result.settled == (True, True, True)
    row = await row_of(store, "r")
    assert row is not None
    assert (row["state"], row["run_at"], row["last_error"], row["unclaimed_since"]) == (
        "retry_wait",
        T0 + 7,
        "boom",
        None,
    )
    row = await row_of(store, "d")
    assert row is not None
    assert (row["state"], row["last_error"], row["finished_at"]) == ("dead", "bad", T0)
    row = await row_of(store, "rel")
    assert row is not None
    assert (row["state"], row["attempts"], row["lease_owner"]) == ("ready", 1, "")


async def test_discard_is_gone(store: SqliteStore) -> None:
    ref = await leased(store, "a")
    assert (await store.settle([settled(ref, SettleKind.DISCARD, error="x")])).settled == (True,)
    assert await row_of(store, "a") is None


async def test_defer_gives_the_attempt_back_and_holds_rates_back(store: SqliteStore) -> None:
    control = JobControl(rates=(("rk", 2, 10.0, 3),))
    ref = await leased(store, "a", attempts=2, control=control.encode())
    await sql(store, "INSERT INTO rate_buckets VALUES ('q', 'rk', ?)", T0 - 100)
    result = await store.settle([settled(ref, SettleKind.DEFER, retry_delay=4)])
    assert result.settled == (True,)
    row = await row_of(store, "a")
    assert row is not None
    assert (row["state"], row["attempts"], row["run_at"]) == ("retry_wait", 1, T0 + 4)
    (tat,) = await sql(store, "SELECT tat FROM rate_buckets WHERE queue = 'q' AND key = 'rk'")
    assert tat[0] == T0 + 4 + tolerance(10.0 / 2, 3) > T0 + 4


async def test_unclaimed_goes_back_then_dies_after_its_grace(
    store: SqliteStore, clock: Clock
) -> None:
    ref = await leased(store, "a", attempts=1)
    s = settled(ref, SettleKind.UNCLAIMED, error="no handler", retry_delay=1, unclaimed_grace=10)
    result = await store.settle([s])
    assert result.settled == (True,) and not result.unclaimed_dead
    row = await row_of(store, "a")
    assert row is not None
    assert (row["state"], row["attempts"], row["unclaimed_since"]) == ("retry_wait", 0, T0)
    clock.t = T0 + 11
    await sql(
        store,
        "UPDATE jobs SET state = 'leased', lease_token = 't2', lease_expires_at = ? WHERE id = 'a'",
        T0 + 40,
    )
    again = settled(
        LeaseRef("a", "q", "t2"),
        SettleKind.UNCLAIMED,
        error="no handler",
        retry_delay=1,
        unclaimed_grace=10,
    )
    result = await store.settle([again])
    assert result.unclaimed_dead == frozenset({0})
    row = await row_of(store, "a")
    assert row is not None
    assert (row["state"], row["last_error"]) == ("dead", "no handler")


# -- fencing and aborts ---------------------------------------------------------------
async def test_fencing_refuses_stale_expired_unknown_and_repeated(
    store: SqliteStore, clock: Clock
) -> None:
    good = await leased(store, "a", token="new")
    await leased(store, "late", expires=T0)  # expired at now
    result = await store.settle(
        [
            settled(LeaseRef("a", "q", "old"), SettleKind.DEAD),
            settled(LeaseRef("a", "q", ""), SettleKind.DEAD),
            settled(LeaseRef("late", "q", "tok"), SettleKind.DEAD),
            settled(LeaseRef("nope", "q", "tok"), SettleKind.DEAD),
            settled(good, SettleKind.RETRY, error="first"),
            settled(good, SettleKind.DEAD, error="second"),
        ]
    )
    assert result.settled == (False, False, False, False, True, False)
    row = await row_of(store, "a")
    assert row is not None and (row["state"], row["last_error"]) == ("retry_wait", "first")
    late = await row_of(store, "late")
    assert late is not None and late["state"] == "leased"


async def test_nothing_found_refuses_all(store: SqliteStore) -> None:
    result = await store.settle([settled(LeaseRef("x", "q", "t"), SettleKind.DEAD)] * 2)
    assert result.settled == (False, False)


async def test_an_abort_overrides_kinds_that_run_again(store: SqliteStore) -> None:
    r = await leased(store, "r", abort_reason="stop it")
    ok = await leased(store, "ok", abort_reason="stop it")
    result = await store.settle(
        [settled(r, SettleKind.RETRY, error="x"), settled(ok, SettleKind.SUCCEEDED)]
    )
    assert result.settled == (True, True)
    assert result.aborted == frozenset({0})
    row = await row_of(store, "r")
    assert row is not None and (row["state"], row["last_error"]) == ("aborted", "stop it")
    assert await row_of(store, "ok") is None  # succeeded, nothing keeps it


# -- unique keys and slots ------------------------------------------------------------
async def test_unique_keys_given_back_and_a_throttle_kept(store: SqliteStore) -> None:
    spec_t = '{"mode": "throttle", "ttl": 30}'
    spec_u = '{"mode": "until_done", "ttl": null}'
    t = await leased(store, "t", unique_key="kt", unique_spec=spec_t)
    u = await leased(store, "u", unique_key="ku", unique_spec=spec_u)
    f = await leased(store, "f", unique_key="kf", unique_spec=spec_t)
    for key, holder in (("kt", "t"), ("ku", "u"), ("kf", "f")):
        mode = "until_done" if key == "ku" else "throttle"
        await sql(store, "INSERT INTO unique_locks VALUES ('q', ?, ?, ?, NULL)", key, holder, mode)
    await sql(store, "INSERT INTO unique_locks VALUES ('q', 'other', 'zzz', 'throttle', NULL)")
    await store.settle(
        [
            settled(t, SettleKind.SUCCEEDED),
            settled(u, SettleKind.SUCCEEDED),
            settled(f, SettleKind.DEAD),
        ]
    )
    locks = await sql(store, "SELECT key, expires_at FROM unique_locks ORDER BY key")
    assert locks == [("kt", T0 + 30), ("other", None)]


async def test_concurrency_slots_are_freed(store: SqliteStore) -> None:
    control = JobControl(caps=(("ck", 1),))
    a = await leased(store, "a", control=control.encode())
    await sql(store, "INSERT INTO slots VALUES ('q', 'ck', 'a'), ('q', 'ck', 'other')")
    await store.settle([settled(a, SettleKind.RETRY)])
    assert await sql(store, "SELECT job_id FROM slots") == [("other",)]


# -- result waiters -------------------------------------------------------------------
async def test_a_waiter_keeps_a_finished_job_readable(store: SqliteStore, clock: Clock) -> None:
    ref = await leased(store, "a")
    await leased(store, "b")

    def register(conn: sqlite3.Connection) -> object:
        return _results.register_waiter(conn, JobRef("a", "q"), "me", 10, clock())

    assert await store._db.write(register, what="test") is JobState.LEASED
    await sql(store, "INSERT INTO result_waiters VALUES ('b', 'lapsed', ?)", T0 - 1)
    await store.settle(
        [
            settled(ref, SettleKind.DISCARD, error="no"),
            settled(LeaseRef("b", "q", "tok"), SettleKind.SUCCEEDED),
        ]
    )
    row = await row_of(store, "a")
    assert row is not None
    assert (row["state"], row["discarded"], row["retain_until"]) == ("dead", 1, T0 + WAITED_KEEP)
    assert await row_of(store, "b") is None  # its waiter had lapsed
    assert await sql(store, "SELECT * FROM result_waiters WHERE job_id = 'a'") == []
    out = await store.outcome(JobRef("a", None))
    assert out is not None and out.state is JobState.DEAD and out.last_error == "no"


async def test_a_keep_outcome_mark_lives_as_long_as_its_job(store: SqliteStore) -> None:
    """A job marked as waited on is stored with a waiter that never lapses:
    forgotten by the settle that finishes the job (kept readable), and by
    whatever else ends it or removes it (an abort while it waits, a
    delete, a purge), so it never outlives its job."""
    ids = ("a", "b", "c", "d", "e")
    marked = [NewJob(job_id, "q", "k", b"1", keep_outcome=True) for job_id in ids]
    await store.enqueue_many([*marked, NewJob("plain", "q", "k", b"1")])
    waiters = await sql(store, "SELECT job_id, waiter, expires_at FROM result_waiters")
    assert sorted(waiters) == [(job_id, "keep_outcome", math.inf) for job_id in ids]
    jobs = await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)
    [a] = jobs.jobs
    assert a.job.id == "a"
    await store.settle([Settlement(a.ref, SettleKind.SUCCEEDED)])
    assert (await row_of(store, "a") or {}).get("state") == "succeeded"

    async def marks() -> list[str]:
        return [row[0] for row in await sql(store, "SELECT job_id FROM result_waiters")]

    assert sorted(await marks()) == ["b", "c", "d", "e"]
    assert await store.abort("b") is AbortResult.ABORTED
    assert await store.delete_job("c")
    assert sorted(await marks()) == ["d", "e"]
    assert (await store.purge_queue("q", limit=10)).count == 4  # b (aborted), d, e, plain
    assert await marks() == []


async def test_register_waiter_only_while_pending_and_forgets_lapsed(
    store: SqliteStore, clock: Clock
) -> None:
    await leased(store, "done", state="succeeded", lease_token="", lease_expires_at=None)
    await sql(store, "INSERT INTO result_waiters VALUES ('x', 'old', ?)", T0 - 61)
    await sql(store, "INSERT INTO result_waiters VALUES ('x', 'recent', ?)", T0 - 59)

    def register(ref: JobRef) -> Callable[[sqlite3.Connection], object]:
        return lambda conn: _results.register_waiter(conn, ref, "me", 5, clock())

    assert await store._db.write(register(JobRef("done", "q")), what="t") is JobState.SUCCEEDED
    assert await store._db.write(register(JobRef("none", "q")), what="t") is None
    assert await store._db.write(register(JobRef("done", "other")), what="t") is None
    waiters = await sql(store, "SELECT job_id, waiter FROM result_waiters ORDER BY waiter")
    assert waiters == [("x", "recent")]


async def test_state_of_and_outcome_show_due_jobs_ready(store: SqliteStore, clock: Clock) -> None:
    await leased(store, "s", state="scheduled", lease_token="", run_at=T0 + 5)

    def state(ref: JobRef) -> Callable[[sqlite3.Connection], object]:
        return lambda conn: _results.state_of(conn, ref)

    assert await store._db.read(state(JobRef("s", None)), what="t") is JobState.SCHEDULED
    assert await store._db.read(state(JobRef("s", "other")), what="t") is None
    out = await store.outcome(JobRef("s", "q"))
    assert out is not None and out.state is JobState.SCHEDULED
    clock.t = T0 + 5
    out = await store.outcome(JobRef("s", "q"))
    assert out is not None and out.state is JobState.READY
    assert await store._db.read(state(JobRef("s", "q")), what="t") is JobState.SCHEDULED


# -- probe ----------------------------------------------------------------------------
async def test_probe(store: SqliteStore, clock: Clock) -> None:
    def probe(*queues: str) -> Callable[[sqlite3.Connection], object]:
        return lambda conn: _results.probe(conn, list(queues), clock())

    assert await store._db.read(probe("q"), what="t") == (False, None)
    await leased(store, "s", state="scheduled", lease_token="", run_at=T0 + 5)
    await leased(store, "w", state="retry_wait", lease_token="", run_at=T0 + 3)
    assert await store._db.read(probe("q", "q"), what="t") == (False, T0 + 3)
    await leased(store, "r", queue="p", state="ready", lease_token="", run_at=T0)
    assert await store._db.read(probe("q", "p"), what="t") == (True, T0 + 3)
    await sql(store, "INSERT INTO queues VALUES ('p', 1)")
    assert await store._db.read(probe("q", "p"), what="t") == (False, T0 + 3)
    clock.t = T0 + 3
    assert await store._db.read(probe("q"), what="t") == (True, T0 + 5)


# -- workflows ------------------------------------------------------------------------
async def test_a_continuation_goes_to_the_outbox(store: SqliteStore) -> None:
    a = await leased(store, "a", then_step='{"next": 1}')
    b = await leased(store, "b", queue="other", then_step="{}")
    await store.settle(
        [
            settled(a, SettleKind.SUCCEEDED, result=b"ra", result_ttl=5),
            settled(b, SettleKind.SUCCEEDED),
        ]
    )
    row = await row_of(store, "a")
    assert row is not None
    assert (row["continuation"], row["retained"], row["retain_until"]) == (
        1,
        1,
        T0 + WORKFLOW_KEEP,
    )
    found = await store.continuations(["q"], 10)
    assert [(c.job_id, c.then, c.result) for c in found] == [("a", '{"next": 1}', b"ra")]
    assert await store.continuations(["q"], 0) == []
    await store.finish_continuations(found)
    assert await store.continuations(["q"], 10) == []
    assert [c.job_id for c in await store.continuations(["q", "other"], 10)] == ["b"]


async def test_group_arrive(store: SqliteStore, clock: Clock) -> None:
    def arrival(group: str, index: int, result: bytes | None, size: int = 3) -> Arrival:
        return Arrival(group, index, size, result, None)

    got = await store.group_arrive(
        [arrival("g", 0, b"a"), arrival("g", 2, None), arrival("g", 0, b"again")], ttl=10
    )
    assert got == [None, None, None]
    got = await store.group_arrive([arrival("g", 1, b"b"), arrival("h", 0, b"x", 1)], ttl=10)
    assert got == [[b"a", b"b", None], [b"x"]]
    # past its expiry a group starts afresh (and a lapsed one is forgotten)
    await store.group_arrive([arrival("old", 0, b"o", 2)], ttl=10)
    clock.t = T0 + 10
    assert await store.group_arrive([arrival("g", 0, b"new", 2)], ttl=10) == [None]
    assert await sql(store, "SELECT id FROM flow_groups ORDER BY id") == [("g",)]
    assert await sql(store, "SELECT count(*) FROM flow_group_members") == [(1,)]


# -- the cost of a batch --------------------------------------------------------------
async def test_a_batch_of_100_is_a_handful_of_statements(store: SqliteStore) -> None:
    refs = [await leased(store, f"j{i:03}") for i in range(100)]
    statements: list[str] = []

    def work(conn: sqlite3.Connection) -> tuple[Any, float, int]:
        prepared: set[str] = set()

        def trace(text: str) -> None:
            statements.append(text)
            prepared.add(text.split("WHERE")[0])

        conn.set_trace_callback(trace)
        try:
            start = time.perf_counter()
            out = _settle.settle(
                conn,
                [settled(r, SettleKind.SUCCEEDED, retain_for=i % 2) for i, r in enumerate(refs)],
                T0,
            )
            return out, time.perf_counter() - start, len(prepared)
        finally:
            conn.set_trace_callback(None)

    (result, _), _took, distinct = await store._db.write(work, what="test")
    assert result.settled == (True,) * 100
    # one SELECT, one UPDATE (run per kept row), one DELETE of the 50 dropped
    assert distinct == 3, statements[:5]
    assert len(statements) == 1 + 50 + 1
    assert len(await sql(store, "SELECT id FROM jobs")) == 50


async def test_probe_does_not_walk_jobs_scheduled_for_later(
    store: SqliteStore, clock: Clock
) -> None:
    rows = [(f"s{i}", T0 + 100 + i) for i in range(5000)]
    await sql(store, "INSERT INTO queues VALUES ('q', 0)")

    def fill(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO jobs (id, queue, kind, payload, run_at, state, max_retries, timeout,"
            " created_at) VALUES (?, 'q', 'k', x'00', ?, 'scheduled', 3, 10, 0)",
            rows,
        )

    await store._db.write(fill, what="test")
    ticks: list[int] = []

    def probe(conn: sqlite3.Connection) -> tuple[bool, float | None]:
        conn.set_progress_handler(lambda: ticks.append(1) and 0, 100)  # every 100 VM steps
        try:
            return _results.probe(conn, ["q"], clock())
        finally:
            conn.set_progress_handler(None, 0)

    assert await store._db.read(probe, what="t") == (False, T0 + 100)
    assert len(ticks) < 20, f"{len(ticks) * 100} VM steps: the probe walked the schedule"
