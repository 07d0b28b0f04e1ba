"""Flow-control rules the backends that decide in Python share (the
MemoryStore and the SQL stores; the RedisStore's Lua, lease.lua,
follows the same rules): whether a ready job of a given control may start
now, and what a start takes.

A rate limit is a GCRA: its key holds a theoretical arrival time (TAT); a
start is allowed at ``now`` when ``now >= tat - tolerance`` (tolerance =
``(burst - 1)`` intervals) and moves the TAT one interval past
``max(tat, now)``. A concurrency limit admits a start while fewer than its
limit of the key's slots are held. :class:`KeyStates` applies these rules
to one claim of a SQL store, over the key states its backend read.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

import attrs

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


@attrs.define
class KeyStates:
    """The limit state of one queue's keys during one claim of a SQL store
    (PostgreSQL, SQLite), judged in memory: each rate key's TAT and each
    concurrency key's held slots as the backend read them
    (:meth:`unread` says which keys it must still read), and what the
    claim's admissions changed (``changed_tats``, ``new_slots``), which the
    backend writes back and then clears."""

    queue: str
    now: float
    tats: dict[str, float] = attrs.Factory(dict)
    running: dict[str, int] = attrs.Factory(dict)
    loaded: set[str] = attrs.Factory(set)
    changed_tats: dict[str, float] = attrs.Factory(dict)
    new_slots: list[tuple[str, str]] = attrs.Factory(list)

    def unread(self, controls: Iterable[JobControl]) -> tuple[list[str], list[str]]:
        """The rate keys and the concurrency keys of ``controls`` not read
        yet, each sorted; from now on they count as read."""
        rates: set[str] = set()
        caps: set[str] = set()
        for control in controls:
            rates.update(key for key, *_ in control.rates)
            caps.update(key for key, _ in control.caps)
        rates -= self.loaded
        caps -= self.loaded
        self.loaded |= rates | caps
        return sorted(rates), sorted(caps)

    def judge(self, control: JobControl) -> tuple[Verdict, float | None]:
        """What the claim does with a ready job of ``control`` now (its keys
        read): see :func:`judge`."""
        return judge(control, self.now, self.tats.get, lambda key: self.running.get(key, 0))

    def take(self, control: JobControl, job_id: str) -> None:
        """Take the permits and slots of an admitted job."""
        now = self.now
        for key, count, per, _burst in control.rates:
            self.tats[key] = self.changed_tats[key] = next_tat(self.tats.get(key), now, count, per)
        for key, _limit in control.caps:
            self.running[key] = self.running.get(key, 0) + 1
            self.new_slots.append((key, job_id))
