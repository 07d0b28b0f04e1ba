"""Schedules kept in the store (added, changed, paused, resumed and removed
at run time, :class:`~chronos_trio.store.ScheduleStoreRole`): their
definition text and the set the leader fires.

* **The definition** is a :class:`Schedule`'s fields as JSON (the payload
  base64), without its id: the id is the stored row's, so a change keeps
  it. Decoding validates it exactly as a schedule declared in code is
  validated (spec, interval, timezone, misfire, options).
* **Code stays authoritative**: :func:`fired_schedules` merges the code's
  schedules with the stored ones that are not paused; a stored schedule
  whose id a code schedule has is left out (the caller logs it), as is one
  whose definition cannot be read.
* **A changed spec keeps the id**, so its trigger bookkeeping (last fired
  time) carries over: the store never fires a trigger time at or before
  the last one fired, so a change cannot fire a (schedule, time) twice; the
  new spec's triggers start after the last fired one.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._log import log_event
from ..store import ScheduleStoreRole, StoredSchedule, StoredSchedules
from ._schedule import Schedule

#: The definition format this code writes (and the only one it reads).
DEFINITION_FORMAT = 1


def encode_definition(schedule: Schedule) -> str:
    """``schedule``'s definition (everything but its id) as JSON text."""
    return json.dumps(
        {
            "format": DEFINITION_FORMAT,
            "kind": schedule.kind,
            "payload": base64.b64encode(schedule.payload).decode("ascii"),
            "cron": schedule.cron,
            "interval": schedule.interval,
            "tz": schedule.tz,
            "misfire": schedule.misfire,
            "queue": schedule.queue,
            "max_retries": schedule.max_retries,
            "timeout": schedule.timeout,
            "external": schedule.external,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def decode_definition(schedule_id: str, text: str) -> Schedule:
    """The :class:`Schedule` a stored definition describes, validated as
    one declared in code; ``ValueError`` naming what is wrong otherwise."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"stored schedule {schedule_id!r}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != DEFINITION_FORMAT:
        raise ValueError(
            f"stored schedule {schedule_id!r}: not a definition of format {DEFINITION_FORMAT}"
        )
    try:
        payload = base64.b64decode(data["payload"], validate=True)
        return Schedule(
            id=schedule_id,
            kind=data["kind"],
            payload=payload,
            cron=data["cron"],
            interval=data["interval"],
            tz=data["tz"],
            misfire=data["misfire"],
            queue=data["queue"],
            max_retries=data["max_retries"],
            timeout=data["timeout"],
            external=data["external"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"stored schedule {schedule_id!r}: {exc!r}") from None


@attrs.frozen
class StoredEntry:
    """A stored schedule as the API lists it: its :class:`Schedule` (None
    when its definition cannot be read, ``error`` says why), whether it is
    paused, when it was last edited (store clock) and whether a code
    schedule of the same id shadows it."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    schedule: Schedule | None
    paused: bool
    updated_at: float
    shadowed: bool = False
    error: str = ""


def entries(stored: StoredSchedules, code: Sequence[Schedule]) -> list[StoredEntry]:
    """Each stored schedule decoded, by id."""
    code_ids = {s.id for s in code}
    return [_entry(row, row.id in code_ids) for row in stored.schedules]


def _entry(row: StoredSchedule, shadowed: bool) -> StoredEntry:
    try:
        schedule: Schedule | None = decode_definition(row.id, row.definition)
        error = ""
    except ValueError as exc:
        schedule, error = None, str(exc)
    return StoredEntry(row.id, schedule, row.paused, row.updated_at, shadowed, error)


def fired_schedules(
    code: Sequence[Schedule], stored: Sequence[StoredEntry]
) -> tuple[list[Schedule], list[StoredEntry]]:
    """What a leader fires: the code's schedules, then each stored one that
    is readable, not paused and not shadowed by a code schedule's id; and
    the stored entries left out for a reason to log (shadowed or unreadable;
    paused ones are not reasons to log)."""
    fired = list(code)
    left_out = []
    for entry in stored:
        if entry.shadowed or entry.schedule is None:
            left_out.append(entry)
        elif not entry.paused:
            fired.append(entry.schedule)
    return fired, left_out


class ScheduleFeed:
    """The schedules a leader fires, following the store: each
    :meth:`current` costs one version read (:meth:`ScheduleStoreRole.
    schedules_version`) and reads the stored schedules only when the
    version moved. Without the role (a store that keeps none) it is the
    code's schedules. Left-out stored schedules are logged once per
    version they are seen at."""

    def __init__(self, store: object, name: str, code: Sequence[Schedule], log: Any) -> None:
        self._store = store if isinstance(store, ScheduleStoreRole) else None
        self._name = name
        self._code = code
        self._log = log
        self._version = -1
        self._stored: list[StoredEntry] = []

    @property
    def version(self) -> int:
        """The stored schedules' version last read (-1: none read yet)."""
        return self._version

    async def current(self) -> list[Schedule]:
        """Raises StoreError when the store cannot be reached."""
        if self._store is None:
            return list(self._code)
        version = await self._store.schedules_version(self._name)
        if version != self._version:
            stored = await self._store.stored_schedules(self._name)
            self._stored = [attrs.evolve(e, shadowed=False) for e in entries(stored, ())]
            self._version = stored.version
            fired, left_out = self._merge()
            for entry in left_out:
                self._log_left_out(entry)
            return fired
        return self._merge()[0]

    def _merge(self) -> tuple[list[Schedule], list[StoredEntry]]:
        code_ids = {s.id for s in self._code}
        stored = [attrs.evolve(e, shadowed=True) if e.id in code_ids else e for e in self._stored]
        return fired_schedules(self._code, stored)

    def _log_left_out(self, entry: StoredEntry) -> None:
        why = (
            "a schedule declared in code has its id (code wins)" if entry.shadowed else entry.error
        )
        log_event(
            self._log,
            logging.WARNING,
            "stored schedule ignored",
            schedule=entry.id,
            reason=why,
            version=self._version,
        )


__all__ = [
    "DEFINITION_FORMAT",
    "ScheduleFeed",
    "StoredEntry",
    "decode_definition",
    "encode_definition",
    "entries",
    "fired_schedules",
]
