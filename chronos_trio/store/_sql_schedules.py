"""Stored schedules in SQL (:class:`~chronos_trio.store.ScheduleStoreRole`),
shared by the PostgreSQL and SQLite stores: the statements, run on the
driver's connection inside the store's transaction.

Tables (PostgreSQL migration ``0004_schedules``, SQLite schema version 4):

* ``schedules`` (leader, id, definition, paused, updated_at): one row per
  stored schedule of a leadership name;
* ``schedule_versions`` (leader, version): the name's version, one more
  per applied edit.

An edit first locks the name's version row (``FOR UPDATE`` on PostgreSQL;
an SQLite write transaction holds the file's write lock from its BEGIN),
so edits of one name apply one after the other and an ADD's "is it
stored?" cannot race another ADD; then it changes the schedule's row and
moves the version up, all in one transaction.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._results import ScheduleEdit, StoredSchedule, StoredSchedules
from ._schedule_edits import check_edit, paused_after


class _Connection(Protocol):
    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


def edit(
    conn: _Connection,
    mark: str,
    lock: str,
    name: str,
    kind: ScheduleEdit,
    schedule_id: str,
    definition: str | None,
    now: float,
) -> int | None:
    """One edit (see :meth:`ScheduleStoreRole.edit_schedule`) in the
    caller's transaction. ``mark``: the driver's placeholder (``%s`` or
    ``?``); ``lock``: what locks a selected row (`` FOR UPDATE`` or '')."""
    kind = check_edit(kind, schedule_id, definition)
    m = mark
    conn.execute(
        f"INSERT INTO schedule_versions (leader, version) VALUES ({m}, 0)"
        " ON CONFLICT (leader) DO NOTHING",
        (name,),
    )
    (version,) = conn.execute(
        f"SELECT version FROM schedule_versions WHERE leader = {m}{lock}", (name,)
    ).fetchone()
    row = conn.execute(
        f"SELECT paused FROM schedules WHERE leader = {m} AND id = {m}", (name, schedule_id)
    ).fetchone()
    if (row is None) != (kind is ScheduleEdit.ADD):
        return None
    if kind is ScheduleEdit.REMOVE:
        conn.execute(f"DELETE FROM schedules WHERE leader = {m} AND id = {m}", (name, schedule_id))
    elif kind is ScheduleEdit.ADD:
        conn.execute(
            "INSERT INTO schedules (leader, id, definition, paused, updated_at)"
            f" VALUES ({m}, {m}, {m}, 0, {m})",
            (name, schedule_id, definition, now),
        )
    else:
        paused = paused_after(kind, bool(row[0]))
        conn.execute(
            f"UPDATE schedules SET definition = coalesce({m}, definition), paused = {m},"
            f" updated_at = {m} WHERE leader = {m} AND id = {m}",
            (definition, int(paused), now, name, schedule_id),
        )
    conn.execute(
        f"UPDATE schedule_versions SET version = {m} WHERE leader = {m}",
        (int(version) + 1, name),
    )
    return int(version) + 1


def version(conn: _Connection, mark: str, name: str) -> int:
    row = conn.execute(
        f"SELECT version FROM schedule_versions WHERE leader = {mark}", (name,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def read(conn: _Connection, mark: str, name: str) -> StoredSchedules:
    """Every stored schedule of ``name`` and their version, in one statement
    (one snapshot, at any isolation level)."""
    rows = conn.execute(
        "SELECT v.version, s.id, s.definition, s.paused, s.updated_at"
        " FROM schedule_versions v LEFT JOIN schedules s ON s.leader = v.leader"
        f" WHERE v.leader = {mark} ORDER BY s.id",
        (name,),
    ).fetchall()
    if not rows:
        return StoredSchedules(0, ())
    return StoredSchedules(
        int(rows[0][0]),
        tuple(
            StoredSchedule(r[1], r[2], bool(r[3]), float(r[4])) for r in rows if r[1] is not None
        ),
    )
