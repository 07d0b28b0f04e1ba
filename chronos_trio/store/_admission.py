"""Flow-control rules the backends that decide in Python share (the
MemoryStore and the PostgreSQL store; the RedisStore's Lua, lease.lua,
follows the same rules): whether a ready job of a given control may start
now, and what a start takes.

A rate limit is a GCRA: its key holds a theoretical arrival time (TAT); a
start is allowed at ``now`` when ``now >= tat - tolerance`` (tolerance =
``(burst - 1)`` intervals) and moves the TAT one interval past
``max(tat, now)``. A concurrency limit admits a start while fewer than its
limit of the key's slots are held.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from ..records._control import JobControl


class Verdict(enum.Enum):
    """What a lease does with one ready job."""

    LEASE = "lease"
    EXPIRED = "expired"
    HELD = "held"


def tolerance(interval: float, burst: int) -> float:
    """How far ahead of its arrival time a rate key admits a start (s)."""
    return (burst - 1) * interval


def judge(
    control: JobControl,
    now: float,
    tat_of: Callable[[str], float | None],
    running_of: Callable[[str], int],
) -> tuple[Verdict, float | None]:
    """The verdict on a ready job of ``control`` at ``now``, given each rate
    key's TAT (None: none yet) and each concurrency key's held slots; with
    HELD, when its next permit comes (None: a concurrency limit held it).
    EXPIRED when its expiry has passed."""
    if control.expires_at is not None and now >= control.expires_at:
        return Verdict.EXPIRED, None
    until: float | None = None
    for key, count, per, burst in control.rates:
        tat = tat_of(key)
        allowed_at = (now if tat is None else tat) - tolerance(per / count, burst)
        if now < allowed_at:
            until = allowed_at if until is None else max(until, allowed_at)
    if until is not None:
        return Verdict.HELD, until
    for key, limit in control.caps:
        if running_of(key) >= limit:
            return Verdict.HELD, None
    return Verdict.LEASE, None


def next_tat(tat: float | None, now: float, count: int, per: float) -> float:
    """A rate key's TAT after one start at ``now``."""
    return max(now if tat is None else tat, now) + per / count
