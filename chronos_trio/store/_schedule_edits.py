"""What every backend of :class:`~chronos_trio.store.ScheduleStoreRole`
shares: the argument check of ``edit_schedule`` and the rule each edit
follows, so memory, Lua and SQL decide the same way."""

from __future__ import annotations

from ._results import ScheduleEdit

#: Edits that carry a definition.
WITH_DEFINITION = frozenset({ScheduleEdit.ADD, ScheduleEdit.CHANGE})


def check_edit(edit: ScheduleEdit, schedule_id: str, definition: str | None) -> ScheduleEdit:
    """The edit as a :class:`ScheduleEdit`; raises ``ValueError`` (changing
    nothing) for an unknown edit, an empty or non-string ``schedule_id``, or
    a ``definition`` missing for ADD/CHANGE or given for the others."""
    try:
        edit = ScheduleEdit(edit)
    except ValueError:
        raise ValueError(
            f"unknown schedule edit {edit!r}; expected one of: "
            + ", ".join(e.value for e in ScheduleEdit)
        ) from None
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError(f"a stored schedule needs a non-empty string id, got {schedule_id!r}")
    if edit in WITH_DEFINITION:
        if not isinstance(definition, str) or not definition:
            raise ValueError(f"schedule edit {edit.value} needs a definition (non-empty text)")
    elif definition is not None:
        raise ValueError(f"schedule edit {edit.value} takes no definition")
    return edit


def paused_after(edit: ScheduleEdit, paused: bool) -> bool:
    """A stored schedule's paused flag after ``edit`` (ADD: not paused)."""
    if edit is ScheduleEdit.PAUSE:
        return True
    if edit in (ScheduleEdit.RESUME, ScheduleEdit.ADD):
        return False
    return paused


__all__ = ["WITH_DEFINITION", "check_edit", "paused_after"]
