"""Stored schedules on Redis (:class:`~chronos_trio.store.ScheduleStoreRole`).

A leadership name's schedules are one hash and a version counter beside its
leadership keys (same hash tag, so each script touches one slot): an edit
is ``schedule_edit.lua``, a full read ``schedules_read.lua``, and the
leader's per-tick check one ``GET`` of the counter.

A stored value that cannot be read (no ``|`` separators, an unreadable
time) is logged and left out of the read, never raised: one damaged entry
does not stop the other schedules from firing.
"""

from __future__ import annotations

import logging

from ...records._log import log_event
from .._results import ScheduleEdit, StoredSchedule, StoredSchedules
from .._schedule_edits import check_edit
from . import _scripts as S
from ._codec import ident, parse_number
from ._context import StoreContext
from ._core import Call, Plan
from ._scripts import Op

log = logging.getLogger("chronos_trio.store.redis")


def edit(
    ctx: StoreContext, name: str, kind: ScheduleEdit, schedule_id: str, definition: str | None
) -> Plan[int | None]:
    kind = check_edit(kind, schedule_id, definition)
    keys = ctx.keys.leader(name)
    (reply,) = yield Call(
        [
            Op.script_call(
                S.SCHEDULE_EDIT,
                [keys.schedules, keys.schedules_version],
                [kind.value, schedule_id, definition or ""],
            )
        ]
    )
    return int(reply) or None


def version(ctx: StoreContext, name: str) -> Plan[int]:
    keys = ctx.keys.leader(name)
    (reply,) = yield Call([Op.command(keys.schedules_version, "GET", keys.schedules_version)])
    return 0 if reply is None else int(reply)


def read(ctx: StoreContext, name: str) -> Plan[StoredSchedules]:
    keys = ctx.keys.leader(name)
    (reply,) = yield Call(
        [Op.script_call(S.SCHEDULES_READ, [keys.schedules, keys.schedules_version], [])]
    )
    raw_version, flat = reply
    rows = []
    for key, value in zip(flat[0::2], flat[1::2], strict=True):
        row = _decode(ident(key), value)
        if row is None:
            log_event(
                log,
                logging.WARNING,
                "stored schedule unreadable: left out",
                schedule=ident(key),
                lock=name,
                value=repr(value)[:80],
            )
            continue
        rows.append(row)
    rows.sort(key=lambda r: r.id)
    return StoredSchedules(int(raw_version) if raw_version else 0, tuple(rows))


def _decode(schedule_id: str, value: bytes) -> StoredSchedule | None:
    parts = value.split(b"|", 2)
    if len(parts) != 3 or parts[0] not in (b"0", b"1"):
        return None
    at = parse_number(parts[1])
    try:
        definition = parts[2].decode()
    except UnicodeDecodeError:
        return None
    if at is None or not definition:
        return None
    return StoredSchedule(schedule_id, definition, parts[0] == b"1", at)
