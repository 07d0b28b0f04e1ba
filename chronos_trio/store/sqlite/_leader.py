"""The SQLite store's leadership leases and schedule triggers (a part of
SqliteStore: LeadershipRole), as on PostgreSQL.

A leadership is one row of ``leaders`` (name, holder, epoch, expiry on the
store's clock), changed only in write transactions, which hold the file's
write lock from their BEGIN: every acquisition, renewal, resignation and
trigger of every process on the file runs one after the other, each
judging expiry at its own time. The row stays when its holder resigns or
lapses (its expiry in the past), so its ``epoch`` only ever grows: a new
holder takes ``epoch + 1``.

A trigger (:meth:`LeaderPart.enqueue_trigger`) is one write transaction:
it checks the caller's epoch is the live one (an acquisition cannot come
between the check and the commit: a deposed leader's trigger is either
before the handover or refused); it moves the schedule's row of
``triggers`` forward to ``fire_at`` by an upsert that only moves it forward
(a second caller of one fire time finds it fired); and it enqueues the
job (``_enqueue.enqueue``). All three commit together or not at all, so a
recorded trigger always has its job: there is never a trigger to finish
after a crash, and a new leader has none to pick up.
"""

from __future__ import annotations

import sqlite3

from ...records._jobs import NewJob
from .._roles import Leadership, LeadershipRole, TriggerResult
from . import _enqueue
from ._base import SqlitePart


def _acquire(
    conn: sqlite3.Connection, name: str, holder: str, ttl: float, now: float
) -> Leadership | None:
    row = conn.execute(
        "INSERT INTO leaders AS l (name, holder, epoch, expires_at)"
        " VALUES (:name, :holder, 1, :until)"
        " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
        " expires_at = excluded.expires_at,"
        " epoch = CASE WHEN l.expires_at > :now THEN l.epoch ELSE l.epoch + 1 END"
        " WHERE l.expires_at <= :now OR l.holder = excluded.holder"
        " RETURNING epoch, expires_at",
        {"name": name, "holder": holder, "now": now, "until": now + ttl},
    ).fetchall()
    if not row:
        return None
    ((epoch, until),) = row
    return Leadership(name, holder, int(epoch), float(until))


def _renew(
    conn: sqlite3.Connection, name: str, holder: str, epoch: int, ttl: float, now: float
) -> bool:
    cur = conn.execute(
        "UPDATE leaders SET expires_at = ?"
        " WHERE name = ? AND holder = ? AND epoch = ? AND expires_at > ?",
        (now + ttl, name, holder, epoch, now),
    )
    return cur.rowcount == 1


def _resign(conn: sqlite3.Connection, name: str, holder: str, epoch: int, now: float) -> bool:
    # the row stays, lapsed, so the next holder still takes epoch + 1
    cur = conn.execute(
        "UPDATE leaders SET expires_at = ?"
        " WHERE name = ? AND holder = ? AND epoch = ? AND expires_at > ?",
        (now, name, holder, epoch, now),
    )
    return cur.rowcount == 1


def _current(conn: sqlite3.Connection, name: str, now: float) -> Leadership | None:
    row = conn.execute(
        "SELECT holder, epoch, expires_at FROM leaders WHERE name = ? AND expires_at > ?",
        (name, now),
    ).fetchone()
    return None if row is None else Leadership(name, row[0], int(row[1]), float(row[2]))


def fire(
    conn: sqlite3.Connection,
    name: str,
    epoch: int,
    schedule_id: str,
    fire_at: float,
    job: NewJob,
    now: float,
) -> TriggerResult:
    """One trigger in the caller's write transaction (see the module
    docstring). Raises what the enqueue raises (ValueError for a unique
    job whose key is not resolved), and RuntimeError if it does not answer
    the one job: the transaction then rolls back, trigger and all."""
    live = conn.execute(
        "SELECT 1 FROM leaders WHERE name = ? AND epoch = ? AND expires_at > ?",
        (name, epoch, now),
    ).fetchone()
    if live is None:
        return TriggerResult.STALE_EPOCH
    recorded = conn.execute(
        "INSERT INTO triggers AS t (leader, schedule, fire_time, job_id, epoch)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (leader, schedule) DO UPDATE"
        " SET fire_time = excluded.fire_time, job_id = excluded.job_id, epoch = excluded.epoch"
        " WHERE t.fire_time < excluded.fire_time RETURNING 1",
        (name, schedule_id, fire_at, job.id, epoch),
    ).fetchall()
    if not recorded:
        return TriggerResult.ALREADY_FIRED
    results = _enqueue.enqueue(conn, [job], now)
    if len(results) != 1:
        raise RuntimeError(f"the enqueue answered {len(results)} results for one trigger's job")
    return TriggerResult.ENQUEUED


def _last_fired(conn: sqlite3.Connection, name: str) -> dict[str, float]:
    return {
        schedule: float(fire_time)
        for schedule, fire_time in conn.execute(
            "SELECT schedule, fire_time FROM triggers WHERE leader = ?", (name,)
        )
    }


class LeaderPart(SqlitePart, LeadershipRole):
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        """See :meth:`LeadershipRole.acquire_leadership`. A trigger's record
        and its job commit together, so there is no predecessor's trigger
        to finish here."""
        db = self._db
        return await db.write(
            lambda conn: _acquire(conn, name, holder, ttl, db.now()),
            what="acquire_leadership",
            wake=False,
        )

    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        db = self._db
        return await db.write(
            lambda conn: _renew(conn, name, holder, epoch, ttl, db.now()),
            what="renew_leadership",
            wake=False,
        )

    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        db = self._db
        return await db.write(
            lambda conn: _resign(conn, name, holder, epoch, db.now()),
            what="resign_leadership",
            wake=False,
        )

    async def current_leader(self, name: str) -> Leadership | None:
        db = self._db
        return await db.read(lambda conn: _current(conn, name, db.now()), what="current_leader")

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        """See :meth:`LeadershipRole.enqueue_trigger` and the module
        docstring: one write transaction, so a trigger recorded is a job
        enqueued. Wakes this process's idle workers at commit."""
        db = self._db
        return await db.write(
            lambda conn: fire(conn, name, epoch, schedule_id, fire_at, job, db.now()),
            what="enqueue_trigger",
        )

    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        return await self._db.read(lambda conn: _last_fired(conn, name), what="schedule_last_fired")
