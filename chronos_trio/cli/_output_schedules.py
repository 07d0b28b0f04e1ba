"""How the command line shows schedules: each one's next fires in its own
time zone with UTC beside it (``2026-12-03 09:00 Europe/Paris (08:00
UTC)``), across DST changes with the offset of each fire's day."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..app._inspector import ScheduleInfo
from ..app._inspector import relative_text as relative
from ..runtime._schedule import zoned_time
from ._output import iso, table


def state_text(row: ScheduleInfo) -> str:
    """``active``, ``paused`` or ``ignored: why``."""
    if row.ignored:
        return f"ignored: {row.ignored}"
    return "paused" if row.paused else "active"


def schedule_json(row: ScheduleInfo) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "spec": row.spec,
        "tz": row.tz,
        "misfire": row.misfire,
        "queue": row.queue,
        "source": row.source,
        "state": state_text(row),
        "next_run": iso(row.next_run),
        "next_runs": [{"utc": iso(t), "local": zoned_time(t, row.tz)} for t in row.next_runs],
        "last_run": iso(row.last_run),
        "leader": row.leader,
        "epoch": row.epoch,
    }


def schedules_table(rows: Sequence[ScheduleInfo], now: float) -> str:
    """The table, then each schedule's next fires in its zone beside UTC."""
    if not rows:
        return "no schedules"
    text = table(
        ["ID", "KIND", "SPEC", "TZ", "QUEUE", "SOURCE", "STATE", "NEXT RUN", "LAST RUN", "LEADER"],
        [
            [
                r.id,
                r.kind,
                r.spec,
                r.tz,
                r.queue,
                r.source,
                state_text(r),
                relative(r.next_run, now),
                relative(r.last_run, now),
                f"{r.leader} (epoch {r.epoch})" if r.leader else None,
            ]
            for r in rows
        ],
    )
    lines = [text, "", "next fires (each in its schedule's time zone, UTC beside):"]
    width = max(len(r.id) for r in rows)
    for r in rows:
        fires = [zoned_time(t, r.tz) for t in r.next_runs] or [state_text(r)]
        for n, fire in enumerate(fires):
            lines.append(f"  {(r.id if n == 0 else ''):<{width}}  {fire}")
    return "\n".join(lines)


__all__ = ["schedule_json", "schedules_table", "state_text"]
