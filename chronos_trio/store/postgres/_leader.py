"""The PostgreSQL store's leadership leases and schedule triggers (a part
of PostgresStore: LeadershipRole).

A leadership is one row of ``leaders`` (name, holder, epoch, expiry on the
server's clock), changed only by single statements that judge expiry
themselves: never a session advisory lock, which a pooler in transaction
mode (PgBouncer) would tie to whatever session ran it. The row stays when
its holder resigns or lapses (its expiry in the past), so its ``epoch``
only ever grows: a new holder takes ``epoch + 1``.

A trigger (:meth:`LeaderPart.enqueue_trigger`) is one transaction: it
locks the leadership row ``FOR SHARE`` while checking the caller's epoch
is the live one (so a new leader's acquisition waits for it to commit and
then takes the next epoch: a deposed leader's trigger is either before the
handover or refused); it moves the schedule's row of ``triggers`` forward
to ``fire_at`` by an upsert that only moves it forward (its row lock makes
two racing callers of one fire time apply one after the other, and the
second finds it fired); and it enqueues the job. All three commit together
or not at all, so a recorded trigger always has its job: there is never a
trigger to finish after a crash, and a new leader has none to pick up.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...records._jobs import NewJob
from .._roles import Leadership, LeadershipRole, TriggerResult
from ._base import PostgresPart, now_of
from ._enqueue import enqueue_params, enqueue_query, enqueue_results


def _acquire(
    conn: psycopg.Connection[Any], name: str, holder: str, ttl: float
) -> Leadership | None:
    now = now_of(conn)
    row = conn.execute(
        "INSERT INTO leaders AS l (name, holder, epoch, expires_at)"
        " VALUES (%(name)s, %(holder)s, 1, %(until)s)"
        " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder,"
        " expires_at = EXCLUDED.expires_at,"
        " epoch = CASE WHEN l.expires_at > %(now)s THEN l.epoch ELSE l.epoch + 1 END"
        " WHERE l.expires_at <= %(now)s OR l.holder = EXCLUDED.holder"
        " RETURNING epoch, expires_at",
        {"name": name, "holder": holder, "now": now, "until": now + ttl},
    ).fetchone()
    return None if row is None else Leadership(name, holder, int(row[0]), float(row[1]))


def _renew(conn: psycopg.Connection[Any], name: str, holder: str, epoch: int, ttl: float) -> bool:
    cur = conn.execute(
        "UPDATE leaders SET expires_at = chronos_now() + %s"
        " WHERE name = %s AND holder = %s AND epoch = %s AND expires_at > chronos_now()",
        (ttl, name, holder, epoch),
    )
    return cur.rowcount == 1


def _resign(conn: psycopg.Connection[Any], name: str, holder: str, epoch: int) -> bool:
    # the row stays, lapsed, so the next holder still takes epoch + 1
    cur = conn.execute(
        "UPDATE leaders SET expires_at = chronos_now()"
        " WHERE name = %s AND holder = %s AND epoch = %s AND expires_at > chronos_now()",
        (name, holder, epoch),
    )
    return cur.rowcount == 1


def _current(conn: psycopg.Connection[Any], name: str) -> Leadership | None:
    row = conn.execute(
        "SELECT holder, epoch, expires_at FROM leaders"
        " WHERE name = %s AND expires_at > chronos_now()",
        (name,),
    ).fetchone()
    return None if row is None else Leadership(name, row[0], int(row[1]), float(row[2]))


def fire(
    conn: psycopg.Connection[Any],
    schema: str,
    name: str,
    epoch: int,
    schedule_id: str,
    fire_at: float,
    job: NewJob,
) -> TriggerResult:
    """One trigger in the caller's transaction (see the module docstring)."""
    live = conn.execute(
        "SELECT 1 FROM leaders WHERE name = %s AND epoch = %s AND expires_at > chronos_now()"
        " FOR SHARE",
        (name, epoch),
    ).fetchone()
    if live is None:
        return TriggerResult.STALE_EPOCH
    recorded = conn.execute(
        "INSERT INTO triggers AS t (leader, schedule, fire_time, job_id, epoch)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (leader, schedule) DO UPDATE"
        " SET fire_time = EXCLUDED.fire_time, job_id = EXCLUDED.job_id, epoch = EXCLUDED.epoch"
        " WHERE t.fire_time < EXCLUDED.fire_time RETURNING 1",
        (name, schedule_id, fire_at, job.id, epoch),
    ).fetchone()
    if recorded is None:
        return TriggerResult.ALREADY_FIRED
    # the worker part's enqueue, in this transaction (it wakes the queue at commit)
    rows = conn.execute(enqueue_query(schema, [job]), enqueue_params([job])).fetchall()
    enqueue_results(rows, [job])  # checks it answered the one job
    return TriggerResult.ENQUEUED


def _last_fired(conn: psycopg.Connection[Any], name: str) -> dict[str, float]:
    return {
        schedule: float(fire_time)
        for schedule, fire_time in conn.execute(
            "SELECT schedule, fire_time FROM triggers WHERE leader = %s", (name,)
        )
    }


class LeaderPart(PostgresPart, LeadershipRole):
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        """See :meth:`LeadershipRole.acquire_leadership`. A trigger's record
        and its job commit together, so there is no predecessor's trigger
        to finish here."""
        return await self._db.run(
            lambda conn: _acquire(conn, name, holder, ttl), what="acquire_leadership"
        )

    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        return await self._db.run(
            lambda conn: _renew(conn, name, holder, epoch, ttl), what="renew_leadership"
        )

    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        return await self._db.run(
            lambda conn: _resign(conn, name, holder, epoch), what="resign_leadership"
        )

    async def current_leader(self, name: str) -> Leadership | None:
        return await self._db.run(lambda conn: _current(conn, name), what="current_leader")

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        """See :meth:`LeadershipRole.enqueue_trigger` and the module
        docstring: one transaction, so a trigger recorded is a job enqueued."""
        schema = self._db.schema
        return await self._db.run(
            lambda conn: fire(conn, schema, name, epoch, schedule_id, fire_at, job),
            what="enqueue_trigger",
        )

    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        return await self._db.run(lambda conn: _last_fired(conn, name), what="schedule_last_fired")
