"""The SQLite store's checker on rows no operation writes (planted with
plain SQL in the file): what it finds, how ``repair`` fixes each, that a
repair leaves alone a row changed since it was inspected, and that the
walk reads the same in batches of any size. (A sound store, expired
leases left by real leases and unique keys given back are the conformance
suite's ``-k check``.)"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from chronos_trio.store import DAMAGED_RECORD, Problem, Repair
from chronos_trio.store.sqlite import SqliteStore, _check

pytestmark = pytest.mark.sqlite

NOW = 1_000_000.0


class Clock:
    """The store's clock, set by the test."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SqliteStore]:
    made = SqliteStore.from_url(sqlite_url, clock=Clock())
    try:
        with trio.fail_after(30):
            await made.check()  # opens the file: the schema
            yield made
    finally:
        await made.aclose()


def sql(store: SqliteStore, query: str, params: Any = ()) -> list[Any]:
    """Run ``query`` on a connection of the test's own, committed."""
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def plant(store: SqliteStore, job_id: str, state: str = "ready", **columns: Any) -> None:
    """A job row of queue ``q`` (unless ``queue=``) in ``state``, with
    ``columns`` set as given (they are the schema's names)."""
    row = {
        "id": job_id,
        "queue": "q",
        "kind": "k",
        "payload": b"{}",
        "run_at": NOW - 100,
        "state": state,
        "max_retries": 3,
        "timeout": 30.0,
        "created_at": NOW - 200,
        **columns,
    }
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    sql(store, f"INSERT INTO jobs ({names}) VALUES ({marks})", tuple(row.values()))
    sql(store, "INSERT OR IGNORE INTO queues (name) VALUES (?)", (row["queue"],))


def leased(expires: float, **columns: Any) -> dict[str, Any]:
    return {
        "lease_token": "t",
        "lease_owner": "w1",
        "lease_expires_at": expires,
        "attempts": 1,
        **columns,
    }


def lock(store: SqliteStore, key: str, holder: str, mode: str = "until_done", **kw: Any) -> None:
    sql(
        store,
        "INSERT INTO unique_locks (queue, key, holder, mode, expires_at) VALUES ('q', ?, ?, ?, ?)",
        (key, holder, mode, kw.get("expires_at")),
    )


def one(store: SqliteStore, job_id: str, columns: str) -> tuple[Any, ...]:
    [row] = sql(store, f"SELECT {columns} FROM jobs WHERE id = ?", (job_id,))
    return tuple(row)


def plant_problems(store: SqliteStore) -> None:
    """One row (or slot, or lock) per problem, and rows that are sound."""
    plant(store, "tokenless", "leased", **leased(NOW + 60, lease_token="", unique_key="kt"))
    lock(store, "kt", "tokenless")
    sql(store, "INSERT INTO slots VALUES ('q', 'db', 'tokenless')")
    plant(store, "garbled", control="{not json")
    plant(store, "slotted")
    sql(store, "INSERT INTO slots VALUES ('q', 'db', 'slotted'), ('q', 'db', 'gone')")
    plant(store, "outboxed", continuation=1)
    plant(store, "hidden", discarded=1)
    plant(store, "finished", "dead", finished_at=NOW - 50, last_error="x")
    lock(store, "kd", "finished")
    plant(store, "again", "leased", **leased(NOW - 120))
    plant(store, "last", "leased", **leased(NOW - 120, max_retries=0, unique_key="kl"))
    lock(store, "kl", "last")
    plant(store, "stopped", "leased", **leased(NOW - 120, abort_reason="aborted: late"))
    # sound: a lease expired within the grace, a damaged job already set
    # aside, a throttle's hold after its job succeeded, a lapsed lock
    plant(store, "fresh", "leased", **leased(NOW - 10))
    plant(store, "set-aside", "dead", control="{", last_error=DAMAGED_RECORD + "control")
    plant(store, "done", "succeeded", finished_at=NOW - 5)
    lock(store, "kthrottle", "done", mode="throttle", expires_at=NOW + 60)
    lock(store, "klapsed", "nobody", expires_at=NOW - 1)


EXPECTED = {
    "tokenless": Problem.DAMAGED,
    "garbled": Problem.DAMAGED,
    "slotted": Problem.WRONG_INDEX,
    "gone": Problem.NO_RECORD,
    "outboxed": Problem.WRONG_INDEX,
    "hidden": Problem.NO_INDEX,
    "finished": Problem.WRONG_INDEX,
    "again": Problem.EXPIRED_LEASE,
    "last": Problem.EXPIRED_LEASE,
    "stopped": Problem.EXPIRED_LEASE,
}


async def test_checker_finds_and_repairs_rows_no_operation_writes(store: SqliteStore) -> None:
    plant_problems(store)
    with trio.fail_after(30):
        report = await store.check(lease_grace=60)
    assert {f.job_id: f.problem for f in report.findings} == EXPECTED, report.findings
    assert all(f.repair is Repair.NONE for f in report.findings)
    assert not report.ok and report.queues == ("q",) and report.partitions == 1
    assert report.records == 12 and report.now == NOW
    assert report.index_entries == 12 + 3 + 5  # the rows, the slots and the locks
    by_id = {f.job_id: f for f in report.findings}
    assert "leased record without a lease token" in by_id["tokenless"].detail
    assert "control" in by_id["garbled"].detail
    assert by_id["gone"].indexes == ("concurrency slot 'db'",)
    assert by_id["finished"].indexes == ("finished", "unique lock 'kd'")
    assert "lease of w1 expired 120s ago" in by_id["again"].detail
    assert one(store, "again", "state")[0] == "leased", "reporting changes nothing"

    with trio.fail_after(30):
        repaired = await store.check(repair=True, lease_grace=60)
    assert {f.job_id: f.repair for f in repaired.findings} == {
        "tokenless": Repair.DEAD_LETTERED,
        "garbled": Repair.DEAD_LETTERED,
        "slotted": Repair.REINDEXED,
        "gone": Repair.REINDEXED,
        "outboxed": Repair.REINDEXED,
        "hidden": Repair.REINDEXED,
        "finished": Repair.REINDEXED,
        "again": Repair.RECOVERED,
        "last": Repair.DEAD_LETTERED,
        "stopped": Repair.RECOVERED,
    }, repaired.findings
    assert repaired.ok
    state, error, token, finished = one(
        store, "tokenless", "state, last_error, lease_token, finished_at"
    )
    assert (state, token, finished) == ("dead", "", NOW)
    assert error.startswith(DAMAGED_RECORD + "leased record without a lease token")
    assert one(store, "outboxed", "continuation, state") == (0, "ready")
    assert one(store, "hidden", "discarded, state") == (0, "ready")
    assert one(store, "again", "state, run_at, lease_token, lease_expires_at") == (
        "ready",
        NOW,
        "",
        None,
    )
    state, error = one(store, "last", "state, last_error")
    assert state == "dead" and error.endswith("(worker lost); retries exhausted"), error
    assert one(store, "stopped", "state, last_error") == ("aborted", "aborted: late")
    assert sql(store, "SELECT job_id FROM slots") == []
    assert sorted(k for (k,) in sql(store, "SELECT key FROM unique_locks")) == [
        "klapsed",
        "kthrottle",
    ]
    with trio.fail_after(30):
        assert (await store.check(lease_grace=60)).findings == ()


async def test_repair_leaves_alone_what_changed_since_it_was_inspected(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the walk and the repairs, an operator gives the tokenless
    lease its token, a worker renews the expired lease, and the slot's
    holder is leased: each repair is skipped and changes nothing."""
    plant(store, "tokenless", "leased", **leased(NOW + 60, lease_token=""))
    plant(store, "expired", "leased", **leased(NOW - 120))
    plant(store, "slotted")
    sql(store, "INSERT INTO slots VALUES ('q', 'db', 'slotted')")
    original = _check._repair
    meddled: list[str] = []

    def meddle_then_repair(
        conn: sqlite3.Connection, judged: Any, clock: Callable[[], float]
    ) -> Any:
        if not meddled:  # before the first repair's re-read: all three change
            conn.execute("UPDATE jobs SET lease_token = 'fixed' WHERE id = 'tokenless'")
            conn.execute("UPDATE jobs SET lease_expires_at = ? WHERE id = 'expired'", (NOW + 60,))
            conn.execute(
                "UPDATE jobs SET state = 'leased', lease_token = 't', lease_expires_at = ?"
                " WHERE id = 'slotted'",
                (NOW + 60,),
            )
        meddled.append(judged.finding.job_id)
        return original(conn, judged, clock)

    monkeypatch.setattr(_check, "_repair", meddle_then_repair)
    with trio.fail_after(30):
        report = await store.check(repair=True, lease_grace=60)
    assert {f.job_id: f.repair for f in report.findings} == {
        "tokenless": Repair.SKIPPED,
        "expired": Repair.SKIPPED,
        "slotted": Repair.SKIPPED,
    }, report.findings
    assert not report.ok, "skipped: check again"
    assert all("changed since it was inspected" in f.repair_detail for f in report.findings)
    assert one(store, "tokenless", "state, lease_token") == ("leased", "fixed")
    assert one(store, "expired", "state, lease_expires_at") == ("leased", NOW + 60)
    assert sql(store, "SELECT job_id FROM slots") == [("slotted",)]
    monkeypatch.setattr(_check, "_repair", original)
    with trio.fail_after(30):
        assert (await store.check(repair=True, lease_grace=60)).findings == ()


async def test_the_walk_reads_the_same_in_batches_of_any_size(store: SqliteStore) -> None:
    for n in range(7):
        plant(store, f"j{n}", discarded=1 if n % 3 == 0 else 0)
    plant(store, "other", queue="q2")
    sql(store, "INSERT INTO queue_versions VALUES ('q2', 1, 2, 'draining'), ('q2', 2, 3, 'active')")
    with trio.fail_after(30):
        reports = [await store.check(batch=b) for b in (1, 2, 7, 500)]
    for report in reports:
        assert report.queues == ("q", "q2") and report.records == 8
        assert report.partitions == 1 + 5
        assert [f.job_id for f in report.findings] == ["j0", "j3", "j6"]
    with trio.fail_after(30):
        only = await store.check(["q2", "unknown", "q2"])
    assert only.queues == ("q2", "unknown") and only.records == 1 and only.partitions == 5
    for bad in ({"batch": 0}, {"lease_grace": -1.0}):
        with pytest.raises(ValueError):
            await store.check(**bad)
