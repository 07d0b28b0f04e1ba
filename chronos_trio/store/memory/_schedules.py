"""The memory store's stored schedules (see
:class:`~chronos_trio.store.ScheduleStoreRole`): a table per leadership
name and its version, changed without a checkpoint, so each edit is atomic."""

from __future__ import annotations

import attrs

from .._results import ScheduleEdit, StoredSchedule, StoredSchedules
from .._schedule_edits import check_edit, paused_after


@attrs.define
class _Table:
    version: int = 0
    rows: dict[str, StoredSchedule] = attrs.field(factory=dict)


class ScheduleTables:
    """Every leadership name's stored schedules."""

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}

    def edit(
        self,
        name: str,
        edit: ScheduleEdit,
        schedule_id: str,
        definition: str | None,
        now: float,
    ) -> int | None:
        edit = check_edit(edit, schedule_id, definition)
        table = self._tables.setdefault(name, _Table())
        row = table.rows.get(schedule_id)
        if (row is None) != (edit is ScheduleEdit.ADD):
            return None
        if edit is ScheduleEdit.REMOVE:
            del table.rows[schedule_id]
        else:
            text = definition if definition is not None else row.definition  # type: ignore[union-attr]
            paused = paused_after(edit, row.paused if row is not None else False)
            table.rows[schedule_id] = StoredSchedule(schedule_id, text, paused, now)
        table.version += 1
        return table.version

    def version(self, name: str) -> int:
        table = self._tables.get(name)
        return 0 if table is None else table.version

    def read(self, name: str) -> StoredSchedules:
        table = self._tables.get(name)
        if table is None:
            return StoredSchedules(0, ())
        return StoredSchedules(table.version, tuple(table.rows[k] for k in sorted(table.rows)))
