"""Flow control a job carries: its priority, its expiry, and the rate limits
and concurrency limits that govern when it may start.

The control travels with the job (the store keeps it in the job's record,
as :meth:`JobControl.encode` writes it), so every worker of the fleet
applies the same rules to it, whatever its own configuration, and the store
applies them in the very step that leases: a job over a limit is never
leased (no lease-then-requeue, no attempt burned).

* ``priority`` (``PRIORITY_MIN`` .. ``PRIORITY_MAX``, default 0, higher
  first): within a queue, ready jobs lease highest priority first, due
  order within a level.
* ``expires_at`` (epoch seconds, store clock): a job not started by then is
  dead-lettered with the reason ``expired`` instead of run.
* :class:`RateLimit`: at most ``count`` starts per ``per`` seconds among
  all jobs naming its key, with up to ``burst`` back to back (a GCRA: over
  any window of ``w`` seconds at most ``burst + w * count / per`` start).
* :class:`ConcurrencyLimit`: at most ``limit`` jobs naming its key leased
  at once, fleet-wide; a slot is taken by the lease and given back by the
  fenced settle, or, when its holder died, once its lease has expired.

Keys are per queue, like unique keys. On Redis a limit's state lives in the
slot of the job's partition: a job routes to the partition of its first key
(its unique key, else its first concurrency key, else its first rate
limit's), so that key is exact on a Cluster and with several partitions;
further keys of the same job are counted per partition (exact whenever the
jobs sharing them route to one partition, e.g. a queue of one partition,
the default).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._checks import check_positive_int

PRIORITY_MIN = -10
PRIORITY_MAX = 10
#: A limit key is at most this long.
MAX_LIMIT_KEY_LENGTH = 200

#: A key given as text, or made from the job's payload at enqueue (e.g.
#: ``lambda p: f"tenant:{p.tenant}"``); None: the job's kind.
LimitKey = str | Callable[[Any], str] | None


def _check_key(key: object) -> None:
    if key is None or callable(key):
        return
    if (
        not isinstance(key, str)
        or not key
        or len(key) > MAX_LIMIT_KEY_LENGTH
        or any(ord(c) < 32 for c in key)  # the record separates items by control characters
    ):
        raise ValueError(
            f"a limit key must be a non-empty string of at most {MAX_LIMIT_KEY_LENGTH} "
            f"characters without control characters, got {key!r}"
        )


@attrs.frozen
class RateLimit:
    """At most ``count`` jobs start per ``per`` seconds, fleet-wide, among the
    jobs whose limit has the same key, with up to ``burst`` back to back.

    ``key``: text, a function of the payload (called at enqueue), or None:
    the task's kind (a limit per task). Raises ``ValueError`` for a count,
    period or burst out of range or a key that is not usable text."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    count: int
    per: float = 1.0
    burst: int = 1
    key: LimitKey = None

    def __attrs_post_init__(self) -> None:
        check_positive_int("rate limit count", self.count)
        check_positive_int("rate limit burst", self.burst)
        if not (isinstance(self.per, int | float) and math.isfinite(self.per) and self.per > 0):
            raise ValueError(f"rate limit period must be finite seconds > 0, got {self.per!r}")
        _check_key(self.key)

    @property
    def interval(self) -> float:
        """Seconds between two starts at the sustained rate."""
        return self.per / self.count


@attrs.frozen
class ConcurrencyLimit:
    """At most ``limit`` jobs whose limit has the same key run at once,
    across every worker process and host. ``key`` as for :class:`RateLimit`.
    Raises ``ValueError`` for a limit < 1 or an unusable key."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    limit: int
    key: LimitKey = None

    def __attrs_post_init__(self) -> None:
        check_positive_int("concurrency limit", self.limit)
        _check_key(self.key)


@attrs.frozen
class JobControl:
    """One job's flow control as the store keeps it: keys resolved to text.
    Built by :func:`resolve_control`; None on a job stands for all defaults."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    priority: int = 0
    expires_at: float | None = None
    #: (key, count, per, burst) per rate limit.
    rates: tuple[tuple[str, int, float, int], ...] = ()
    #: (key, limit) per concurrency limit.
    caps: tuple[tuple[str, int], ...] = ()
    #: A new job's expiry relative to the store's now when it stores the
    #: job (it then keeps ``expires_at``); None on a stored job.
    expires_in: float | None = None

    @property
    def routing_key(self) -> str | None:
        """The key whose partition the job routes to: its first concurrency
        key, else its first rate key (a unique key comes before both)."""
        if self.caps:
            return self.caps[0][0]
        if self.rates:
            return self.rates[0][0]
        return None

    def encode(self) -> str:
        """The record's text (field ``fc`` on Redis): items separated by
        newlines, the priority first (``p<n>``), then ``c<limit>/<key>`` per
        concurrency limit, ``r<count>/<per>/<burst>/<key>`` per rate limit,
        and last the expiry: ``e<epoch>``, or ``E<seconds>`` that the store
        turns into its own now + seconds when it stores the job."""
        items = []
        if self.priority:
            items.append(f"p{self.priority}")
        items += [f"c{limit}/{key}" for key, limit in self.caps]
        items += [f"r{count}/{per!r}/{burst}/{key}" for key, count, per, burst in self.rates]
        if self.expires_in is not None:
            items.append(f"E{float(self.expires_in)!r}")
        elif self.expires_at is not None:
            items.append(f"e{float(self.expires_at)!r}")
        return "\n".join(items)

    def stored(self, now: float) -> JobControl:
        """As a store keeps it when it stores the job at ``now``."""
        if self.expires_in is None:
            return self
        return attrs.evolve(self, expires_at=now + self.expires_in, expires_in=None)


@functools.lru_cache(maxsize=1024)
def decode_control(text: str) -> JobControl | None:
    """A record's control back (None for '' or defaults). Raises
    ``ValueError`` naming the item that is not one."""
    if not text:
        return None
    priority, expires_at = 0, None
    rates: list[tuple[str, int, float, int]] = []
    caps: list[tuple[str, int]] = []
    for item in text.split("\n"):
        tag, rest = item[:1], item[1:]
        try:
            if tag == "p":
                priority = int(rest)
            elif tag == "e":
                expires_at = float(rest)
            elif tag == "c":
                limit, key = rest.split("/", 1)
                caps.append((key, int(limit)))
            elif tag == "r":
                count, per, burst, key = rest.split("/", 3)
                rates.append((key, int(count), float(per), int(burst)))
            else:
                raise ValueError(item)
        except ValueError:
            raise ValueError(f"flow control item {item!r} is not one") from None
    control = JobControl(priority, expires_at, tuple(rates), tuple(caps))
    return None if control == JobControl() else control


def expired_error(expires_at: float) -> str:
    """The ``last_error`` of a job dead-lettered because it was not started
    by ``expires_at``: the time in UTC, ISO 8601 to the millisecond
    (``expired: not started by 2026-12-01T10:33:56.169Z (its expires_at)``).
    ``lua/lease.lua`` writes the same text (its ``iso_utc``), so both stores
    answer alike: whole milliseconds, rounded down, from the epoch."""
    ms = math.floor(expires_at * 1000)
    seconds, millis = divmod(ms, 1000)
    when = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"expired: not started by {when}.{millis:03d}Z (its expires_at)"


def check_priority(priority: object) -> int:
    """``priority`` if it is an int in range, else ``ValueError``."""
    if (
        not isinstance(priority, int)
        or isinstance(priority, bool)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise ValueError(
            f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, got {priority!r}"
        )
    return priority


def check_expires(expires: object) -> float:
    """A relative expiry (seconds > 0) as a float, else ``ValueError``."""
    if not (isinstance(expires, int | float) and math.isfinite(expires) and expires > 0):
        raise ValueError(f"expires must be finite seconds > 0 (or a datetime), got {expires!r}")
    return float(expires)


def limits_of(
    given: object, cls: type[RateLimit] | type[ConcurrencyLimit], name: str
) -> tuple[Any, ...]:
    """A task's or an enqueue's ``rate_limit`` / ``concurrency_limit`` as a
    tuple (None: none; one limit or a sequence of them). ``TypeError`` for
    anything else."""
    if given is None:
        return ()
    if isinstance(given, cls):
        return (given,)
    if isinstance(given, Sequence) and all(isinstance(g, cls) for g in given):
        return tuple(given)
    raise TypeError(f"{name} must be a {cls.__name__} or a sequence of them, got {given!r}")


def _resolved_key(key: LimitKey, kind: str, payload: Any) -> str:
    if key is None:
        return kind
    if isinstance(key, str):
        return key
    made = key(payload)
    _check_key(made)
    if not isinstance(made, str):
        raise ValueError(f"a limit key function must return a string, got {made!r}")
    return made


def resolve_control(
    kind: str,
    payload: Any,
    *,
    priority: int = 0,
    expires_at: float | None = None,
    expires_in: float | None = None,
    rate_limits: Sequence[RateLimit] = (),
    concurrency_limits: Sequence[ConcurrencyLimit] = (),
) -> JobControl | None:
    """One job's control (None when everything is the default), keys
    resolved against its kind and payload. Raises ``ValueError`` for a key
    function's result that is not usable text (and what the function raises)."""
    if not (
        priority
        or expires_at is not None
        or expires_in is not None
        or rate_limits
        or concurrency_limits
    ):
        return None
    return JobControl(
        priority,
        expires_at,
        tuple(
            (_resolved_key(r.key, kind, payload), r.count, float(r.per), r.burst)
            for r in rate_limits
        ),
        tuple((_resolved_key(c.key, kind, payload), c.limit) for c in concurrency_limits),
        expires_in,
    )


#: A ready index's score for due time ``run_at`` and ``priority``: one
#: priority level is this many seconds earlier, more than any due time
#: spans, so ready jobs order by priority first and due time within it
#: (priority 0: the score is the due time itself).
PRIORITY_STEP = 1e10


def ready_score(run_at: float, priority: int) -> float:
    return run_at - priority * PRIORITY_STEP


@attrs.frozen
class ControlDefaults:
    """A task's flow-control defaults for its jobs (``App.task`` options)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    priority: int = 0
    #: Seconds after enqueue by which a job must have started (None: never expires).
    expires: float | None = None
    rate_limits: tuple[RateLimit, ...] = ()
    concurrency_limits: tuple[ConcurrencyLimit, ...] = ()


def control_defaults(
    *,
    priority: int = 0,
    expires: float | None = None,
    rate_limit: RateLimit | Sequence[RateLimit] | None = None,
    concurrency_limit: ConcurrencyLimit | Sequence[ConcurrencyLimit] | None = None,
) -> ControlDefaults | None:
    """A task's defaults, checked (None when all are defaults). Raises
    ``ValueError`` for a priority or expiry out of range, ``TypeError`` for
    limits that are not limits."""
    check_priority(priority)
    if expires is not None:
        expires = check_expires(expires)
    rates = limits_of(rate_limit, RateLimit, "rate_limit")
    caps = limits_of(concurrency_limit, ConcurrencyLimit, "concurrency_limit")
    if not (priority or expires is not None or rates or caps):
        return None
    return ControlDefaults(priority, expires, rates, caps)


def job_control(
    defaults: ControlDefaults | None, kind: str, payload: Any, options: Mapping[str, Any]
) -> JobControl | None:
    """One new job's control: ``options`` (an enqueue's ``priority``,
    ``expires``, ``rate_limit``, ``concurrency_limit``) over the task's
    ``defaults``. ``expires`` is seconds from the store's now when it
    stores the job, or a timezone-aware datetime. Raises ``ValueError`` /
    ``TypeError`` for an option out of range."""
    d = defaults or _NO_DEFAULTS
    priority = check_priority(options["priority"]) if "priority" in options else d.priority
    expires_in, expires_at = d.expires, None
    if "expires" in options and options["expires"] is not None:
        given = options["expires"]
        if isinstance(given, dt.datetime):
            if given.tzinfo is None:
                raise ValueError("expires must be timezone-aware when a datetime")
            expires_in, expires_at = None, given.timestamp()
        else:
            expires_in = check_expires(given)
    rates = (
        limits_of(options["rate_limit"], RateLimit, "rate_limit")
        if "rate_limit" in options
        else d.rate_limits
    )
    caps = (
        limits_of(options["concurrency_limit"], ConcurrencyLimit, "concurrency_limit")
        if "concurrency_limit" in options
        else d.concurrency_limits
    )
    return resolve_control(
        kind,
        payload,
        priority=priority,
        expires_at=expires_at,
        expires_in=expires_in,
        rate_limits=rates,
        concurrency_limits=caps,
    )


_NO_DEFAULTS = ControlDefaults()
