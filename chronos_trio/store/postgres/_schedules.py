"""The PostgreSQL store's stored schedules (a part of PostgresStore:
ScheduleStoreRole): the shared statements of ``store._sql_schedules``, an
edit in one transaction that locks the name's version row ``FOR UPDATE``,
a read in one statement, stamped with the server's clock."""

from __future__ import annotations

from .. import _sql_schedules
from .._roles import ScheduleEdit, ScheduleStoreRole, StoredSchedules
from .._schedule_edits import check_edit
from ._base import PostgresPart, now_of


class SchedulesPart(PostgresPart, ScheduleStoreRole):
    async def edit_schedule(
        self, name: str, edit: ScheduleEdit, schedule_id: str, definition: str | None = None
    ) -> int | None:
        check_edit(edit, schedule_id, definition)  # before connecting
        return await self._db.run(
            lambda conn: _sql_schedules.edit(
                conn, "%s", " FOR UPDATE", name, edit, schedule_id, definition, now_of(conn)
            ),
            what="edit_schedule",
        )

    async def schedules_version(self, name: str) -> int:
        return await self._db.run(
            lambda conn: _sql_schedules.version(conn, "%s", name),
            what="schedules_version",
            transaction=False,
        )

    async def stored_schedules(self, name: str) -> StoredSchedules:
        return await self._db.run(
            lambda conn: _sql_schedules.read(conn, "%s", name),
            what="stored_schedules",
            transaction=False,
        )
