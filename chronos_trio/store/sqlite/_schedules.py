"""The SQLite store's stored schedules (a part of SqliteStore:
ScheduleStoreRole): the shared statements of ``store._sql_schedules``, an
edit in one write transaction (the file's write lock orders every edit),
a read in one statement, stamped with the store's clock."""

from __future__ import annotations

from .. import _sql_schedules
from .._roles import ScheduleEdit, ScheduleStoreRole, StoredSchedules
from .._schedule_edits import check_edit
from ._base import SqlitePart


class SchedulesPart(SqlitePart, ScheduleStoreRole):
    async def edit_schedule(
        self, name: str, edit: ScheduleEdit, schedule_id: str, definition: str | None = None
    ) -> int | None:
        check_edit(edit, schedule_id, definition)  # before opening
        db = self._db
        return await db.write(
            lambda conn: _sql_schedules.edit(
                conn, "?", "", name, edit, schedule_id, definition, db.now()
            ),
            what="edit_schedule",
            wake=False,
        )

    async def schedules_version(self, name: str) -> int:
        return await self._db.read(
            lambda conn: _sql_schedules.version(conn, "?", name), what="schedules_version"
        )

    async def stored_schedules(self, name: str) -> StoredSchedules:
        return await self._db.read(
            lambda conn: _sql_schedules.read(conn, "?", name), what="stored_schedules"
        )
