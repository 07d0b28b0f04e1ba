"""Schedules: cron and interval triggers that enqueue a task's job.

A :class:`Schedule` is pure data plus trigger arithmetic; the ``scheduler``
actor fires it on the elected leader through the store's fenced
``enqueue_trigger``. Guarantees:

* **Stable identity.** A schedule's ID defaults to a digest of its task kind,
  trigger spec, timezone and encoded payload, so every process that registers
  the same schedule computes the same ID; pass ``schedule_id=`` to keep the ID
  (and the trigger history) when you change the spec.
* **Deterministic trigger jobs.** The job of the trigger at ``fire_at`` has the
  ID ``sched:<schedule id>:<fire_at in ms>``, so a failover that fires the same
  trigger again cannot create a second job.
* **Cron is wall-clock time in ``tz``** (default UTC), DST-correct: a time that
  a spring-forward skips fires once, at the first instant after the gap; in the
  hour a fall-back repeats, a schedule with a fixed hour (``30 2 * * *``) fires
  once (on the first pass) while an every-hour schedule (``0 * * * *``) fires
  on both passes, once per elapsed hour. (The rules of ISC/Vixie cron.)
* **Intervals are aligned to the Unix epoch** (``every(60)`` fires on each UTC
  minute), so every process computes the same trigger times whenever it
  started.
* **Misfires** (triggers not fired within the grace window of their time,
  e.g. while no leader ran): ``skip`` drops them and resumes on schedule;
  ``fire_once`` fires one catch-up job for the latest of them, then resumes.
  A schedule that has never fired has missed nothing.
* Bad specs, intervals under 1 s, unknown misfire policies and unknown
  timezones raise ``ValueError`` at registration.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ..records._jobs import NewJob

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo
from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT,
    check_bool,
    check_options,
    check_queue,
)

MisfirePolicy = Literal["skip", "fire_once"]


class JobDefaultsOf(Protocol):
    """Where a trigger's job takes the defaults the schedule does not set: the
    task it fires (a ``TaskSpec`` or an App's ``Task``)."""

    @property
    def queue(self) -> str: ...

    @property
    def max_retries(self) -> int: ...

    @property
    def timeout(self) -> float: ...


MISFIRE_POLICIES: tuple[str, ...] = ("skip", "fire_once")

#: Shortest interval: a trigger per second is the finest the leader promises.
MIN_INTERVAL = 1.0

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _croniter() -> tuple[Any, type[Exception]]:
    """croniter and its "never fires" error, imported on first use: it costs
    tens of milliseconds at start-up, and most workers have no cron schedule."""
    from croniter import CroniterBadDateError, croniter

    return croniter, CroniterBadDateError


def leadership_name(app_name: str) -> str:
    """The store leadership that guards an app's singleton duties (schedule
    triggers, janitor); trigger bookkeeping lives under the same name."""
    return f"{app_name}:leader"


def trigger_job_id(schedule_id: str, fire_at: float) -> str:
    """The deterministic job ID of one trigger."""
    return f"sched:{schedule_id}:{round(fire_at * 1000)}"


def _zone(tz: str) -> ZoneInfo:
    # here: an app without schedules never needs zoneinfo (it reads the tz
    # database's paths at import)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(
            f"unknown timezone {tz!r}: use an IANA name such as 'Europe/Berlin'"
        ) from exc


def _zone_key(tz: Any) -> Any:
    """A ZoneInfo's key; anything else (not a str either) as it is."""
    from zoneinfo import ZoneInfo

    return tz.key if isinstance(tz, ZoneInfo) else tz


def _normalize_cron(spec: str) -> str:
    if not isinstance(spec, str):
        raise ValueError(f"cron spec must be a string, got {type(spec).__name__}")
    text = " ".join(spec.split())
    text = _MACROS.get(text.lower(), text)
    if len(text.split()) != 5:
        raise ValueError(
            f"bad cron spec {spec!r}: expected 5 fields 'minute hour day-of-month month "
            "day-of-week' (e.g. '*/5 * * * *') or one of " + ", ".join(_MACROS)
        )
    return text


def _interval_seconds(interval: float | dt.timedelta) -> float:
    seconds = interval.total_seconds() if isinstance(interval, dt.timedelta) else interval
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"interval must be seconds or a timedelta, got {interval!r}")
    if not math.isfinite(seconds) or seconds < MIN_INTERVAL:
        raise ValueError(f"interval must be at least {MIN_INTERVAL:g} second, got {interval!r}")
    # Whole milliseconds: trigger times are computed in integer ms, so every
    # process gets bit-identical trigger times (and job IDs).
    return round(seconds * 1000) / 1000


@attrs.frozen
class Schedule:
    """A periodic trigger for one task. Build it with ``app.cron(...)`` or
    ``app.every(...)``; constructing it directly validates it the same way.

    Exactly one of ``cron`` (5-field spec, wall-clock time in ``tz``) and
    ``interval`` (seconds, epoch-aligned) is set. ``queue``, ``max_retries``
    and ``timeout`` override the task's defaults when not None.
    ``external``: its task is registered by another program sharing the
    store, not by this app (a worker then does not refuse to start for
    want of it, see :meth:`~chronos_trio.App.every`).
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    kind: str
    payload: bytes
    cron: str | None = None
    interval: float | None = None
    tz: str = "UTC"
    misfire: MisfirePolicy = "skip"
    queue: str | None = None
    max_retries: int | None = None
    timeout: float | None = None
    external: bool = False
    _zone: ZoneInfo = attrs.field(init=False, repr=False, eq=False)
    _fixed_hour: bool = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if (self.cron is None) == (self.interval is None):
            raise ValueError("a schedule has exactly one of cron= and interval=")
        if not self.id or len(self.id) > 100 or any(c.isspace() for c in self.id):
            raise ValueError(f"bad schedule id {self.id!r}: 1-100 characters, no whitespace")
        if not self.kind:
            raise ValueError("a schedule needs a task kind")
        if self.misfire not in MISFIRE_POLICIES:
            raise ValueError(
                f"unknown misfire policy {self.misfire!r}; expected one of: "
                + ", ".join(MISFIRE_POLICIES)
            )
        check_options(max_retries=self.max_retries, timeout=self.timeout)
        if self.queue is not None:
            check_queue(self.queue)
        check_bool("external", self.external)
        object.__setattr__(self, "_zone", _zone(self.tz))
        object.__setattr__(self, "_fixed_hour", False)
        if self.interval is not None:
            if self.interval != _interval_seconds(self.interval):
                raise ValueError(
                    f"interval must be >= {MIN_INTERVAL:g} s in whole milliseconds, "
                    f"got {self.interval!r}"
                )
            return
        assert self.cron is not None
        if self.cron != _normalize_cron(self.cron):
            raise ValueError(f"cron spec {self.cron!r} is not normalized; use app.cron()")
        croniter, bad_date = _croniter()
        try:
            it = croniter(self.cron, dt.datetime.now(self._zone))
            it.get_next(float)
        except bad_date as exc:
            raise ValueError(f"cron spec {self.cron!r} never fires") from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"bad cron spec {self.cron!r}: {exc}") from exc
        hours = it.expanded[1]
        object.__setattr__(self, "_fixed_hour", not (hours == ["*"] or len(set(hours)) >= 24))

    # -- construction -----------------------------------------------------------------
    @classmethod
    def build(
        cls,
        kind: str,
        payload: bytes,
        *,
        cron: str | None = None,
        interval: float | dt.timedelta | None = None,
        tz: str | ZoneInfo = "UTC",
        schedule_id: str | None = None,
        misfire: str = "skip",
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        external: bool = False,
    ) -> Schedule:
        """Validate and normalize the parts; derive the ID unless given."""
        tz_name = tz if isinstance(tz, str) else _zone_key(tz)
        spec = None if cron is None else _normalize_cron(cron)
        seconds = None if interval is None else _interval_seconds(interval)
        if schedule_id is None:
            what = f"cron:{spec}@{tz_name}" if spec is not None else f"every:{seconds!r}"
            digest = hashlib.sha256(f"{kind}\n{what}\n".encode() + payload).hexdigest()
            schedule_id = f"{kind}:{digest[:16]}"
        if misfire not in MISFIRE_POLICIES:
            raise ValueError(
                f"unknown misfire policy {misfire!r}; expected one of: "
                + ", ".join(MISFIRE_POLICIES)
            )
        return cls(
            id=schedule_id,
            kind=kind,
            payload=payload,
            cron=spec,
            interval=seconds,
            tz=tz_name if spec is not None else "UTC",
            misfire=misfire,  # type: ignore[arg-type]  # checked just above
            queue=queue,
            max_retries=max_retries,
            timeout=timeout,
            external=external,
        )

    # -- trigger arithmetic --------------------------------------------------------------
    @property
    def spec(self) -> str:
        """Human-readable trigger: the cron spec, or ``every <n>s``."""
        return self.cron if self.cron is not None else f"every {self.interval:g}s"

    def next_after(self, t: float) -> float:
        """The first trigger time strictly after ``t`` (epoch seconds)."""
        if self.interval is not None:
            ms = round(self.interval * 1000)
            k = math.floor(t * 1000 / ms) + 1
            while k * ms / 1000 <= t:  # float rounding must never yield t itself
                k += 1
            return k * ms / 1000
        assert self.cron is not None
        # From the whole second: a datetime rounds to microseconds, which could
        # step past a trigger a hair after t. Triggers fall on whole seconds,
        # so none lies in (floor(t), t].
        croniter, _ = _croniter()
        it = croniter(self.cron, dt.datetime.fromtimestamp(math.floor(t), self._zone))
        while True:
            x = float(it.get_next(float))
            if x > t and not self._repeated(x):
                return x

    def latest_at_or_before(self, t: float) -> float | None:
        """The last trigger time at or before ``t``, or None (cron: none
        within croniter's search horizon)."""
        if self.interval is not None:
            ms = round(self.interval * 1000)
            k = math.floor(t * 1000 / ms)
            while k * ms / 1000 > t:
                k -= 1
            while (k + 1) * ms / 1000 <= t:
                k += 1
            return k * ms / 1000
        # Cron triggers fall on whole minutes, so "strictly before the next
        # whole second" is "at or before t".
        assert self.cron is not None
        start = dt.datetime.fromtimestamp(math.floor(t) + 1, self._zone)
        croniter, bad_date = _croniter()
        it = croniter(self.cron, start)
        try:
            while True:
                x = float(it.get_prev(float))
                if x <= t and not self._repeated(x):
                    return x
        except bad_date:
            return None

    def _repeated(self, t: float) -> bool:
        """True for the second pass of a fall-back hour of a fixed-hour spec."""
        return self._fixed_hour and dt.datetime.fromtimestamp(t, self._zone).fold == 1

    def due_triggers(self, last_fired: float | None, now: float, grace: float) -> list[float]:
        """Trigger times to fire at ``now``, oldest first.

        On time: every trigger in ``(now - grace, now]`` after ``last_fired``.
        Missed: triggers in ``(last_fired, now - grace]``; ``skip`` drops them,
        ``fire_once`` returns the latest of them first (one catch-up). With no
        ``last_fired`` (never fired) nothing counts as missed.
        """
        if not grace > 0:
            raise ValueError(f"grace must be > 0, got {grace!r}")
        floor = now - grace
        fires: list[float] = []
        if last_fired is not None and self.misfire == "fire_once":
            missed = self.latest_at_or_before(floor)
            if missed is not None and missed > last_fired:
                fires.append(missed)
        t = self.next_after(floor if last_fired is None else max(last_fired, floor))
        while t <= now:
            fires.append(t)
            t = self.next_after(t)
        return fires

    # -- jobs ------------------------------------------------------------------------------
    def job_id(self, fire_at: float) -> str:
        return trigger_job_id(self.id, fire_at)

    def new_job(self, fire_at: float, task: JobDefaultsOf | None = None) -> NewJob:
        """The job of the trigger at ``fire_at``: due at that time, with the
        schedule's options, else ``task``'s defaults (looked up when the
        trigger fires, so a task registered after the schedule still counts)."""
        max_retries = task.max_retries if task is not None else DEFAULT_MAX_RETRIES
        timeout = task.timeout if task is not None else DEFAULT_TIMEOUT
        return NewJob(
            id=self.job_id(fire_at),
            queue=self.resolved_queue(task),
            kind=self.kind,
            payload=self.payload,
            run_at=fire_at,
            max_retries=self.max_retries if self.max_retries is not None else max_retries,
            timeout=self.timeout if self.timeout is not None else timeout,
        )

    def next_fires(self, t: float, count: int) -> list[float]:
        """The next ``count`` trigger times strictly after ``t``."""
        out: list[float] = []
        while len(out) < count:
            t = self.next_after(t)
            out.append(t)
        return out

    def resolved_queue(self, task: JobDefaultsOf | None = None) -> str:
        if self.queue is not None:
            return self.queue
        return task.queue if task is not None else DEFAULT_QUEUE


def zoned_time(t: float, tz: str) -> str:
    """Trigger time ``t`` (epoch seconds) as people read it: in zone ``tz``
    with UTC beside it, ``2026-12-03 09:00 Europe/Paris (08:00 UTC)``; the
    UTC date too when it differs from the zone's, ``(2026-12-02 23:30
    UTC)``; just ``2026-12-03 08:00 UTC`` for UTC. Seconds are shown only
    when not zero. The offset is the zone's at ``t``, so a time across a
    DST change shows that day's offset. ``ValueError`` for an unknown zone."""
    utc = dt.datetime.fromtimestamp(t, dt.UTC)
    shape = "%H:%M" if utc.second == 0 and utc.microsecond == 0 else "%H:%M:%S"
    if tz == "UTC":
        return utc.strftime(f"%Y-%m-%d {shape}") + " UTC"
    local = dt.datetime.fromtimestamp(t, _zone(tz))
    beside = utc.strftime(shape if local.date() == utc.date() else f"%Y-%m-%d {shape}")
    return f"{local.strftime(f'%Y-%m-%d {shape}')} {tz} ({beside} UTC)"


__all__ = [
    "MISFIRE_POLICIES",
    "MisfirePolicy",
    "Schedule",
    "leadership_name",
    "trigger_job_id",
    "zoned_time",
]
