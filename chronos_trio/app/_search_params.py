"""A job search as text: the parameters of the dashboard's search URL and
of the command line's filters, read into a :class:`~chronos_trio.JobQuery`
and written back (so a search can be linked, and a bulk action's
confirmation carries exactly the search it confirms).

Parameters (each optional; ``queue`` and ``state`` may repeat):
``queue``, ``state``, ``kind``, ``error``, ``payload``, ``worker``, and
the time bounds ``created_from``/``created_to``, ``finished_from``/
``finished_to``, ``due_from``/``due_to``. A time is epoch seconds
(``1764750000``), an ISO 8601 date or time (``2026-12-03``,
``2026-12-03T11:30``; without a zone it is UTC), or a span back from now
(``90s``, ``15m``, ``2h``, ``7d``: that long ago).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence

from ..records._jobs import JobState
from ..store import JobQuery, TimeRange

#: The time filters: (JobQuery field, parameter prefix, what it is).
TIME_FILTERS: tuple[tuple[str, str, str], ...] = (
    ("created", "created", "created"),
    ("finished", "finished", "finished"),
    ("due", "due", "due (run at)"),
)
#: The text filters, in the order forms show them.
TEXT_FILTERS: tuple[str, ...] = ("kind", "error", "payload", "worker")
#: Every parameter a search takes.
PARAMS: tuple[str, ...] = (
    "queue",
    "state",
    *TEXT_FILTERS,
    *(f"{p}_{side}" for _, p, _ in TIME_FILTERS for side in ("from", "to")),
)

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_time(text: str, now: float) -> float:
    """Epoch seconds from ``text`` (see the module docstring); ``ValueError``
    saying the forms it takes otherwise."""
    text = text.strip()
    span = _SPAN.match(text)
    if span:
        return now - float(span.group(1)) * _UNIT[span.group(2)]
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value == value and abs(value) != float("inf"):
            return value
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"cannot read the time {text!r}: give epoch seconds, an ISO 8601 date or "
            "time (UTC unless it names a zone), or a span back from now such as 15m, 2h, 7d"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def query_from_params(get: Callable[[str], Sequence[str]], now: float) -> JobQuery:
    """The query of search parameters (``get(name)``: the values given for
    ``name``, none when absent; empty values are ignored). ``ValueError``
    naming the parameter for a bad state or time."""

    def values(name: str) -> list[str]:
        return [v.strip() for v in get(name) if v.strip()]

    def one(name: str) -> str:
        given = values(name)
        return given[-1] if given else ""

    ranges = {}
    for field, prefix, _ in TIME_FILTERS:
        bounds = []
        for side in ("from", "to"):
            text = one(f"{prefix}_{side}")
            try:
                bounds.append(parse_time(text, now) if text else None)
            except ValueError as exc:
                raise ValueError(f"{prefix}_{side}: {exc}") from None
        try:
            ranges[field] = TimeRange(bounds[0], bounds[1])
        except ValueError as exc:
            raise ValueError(f"{prefix}: {exc}") from None
    states = tuple(JobState.parse(s) for s in values("state"))
    return JobQuery(
        queues=tuple(dict.fromkeys(values("queue"))),
        states=tuple(dict.fromkeys(states)),
        kind=one("kind"),
        error=one("error"),
        payload=one("payload"),
        worker=one("worker"),
        **ranges,
    )


def query_from_mapping(params: Mapping[str, Sequence[str]], now: float) -> JobQuery:
    """:func:`query_from_params` of a mapping of parameter -> values."""
    return query_from_params(lambda name: params.get(name, ()), now)


def query_params(query: JobQuery) -> list[tuple[str, str]]:
    """The parameters that give ``query`` back (times as epoch seconds)."""
    out = [("queue", q) for q in query.queues] + [("state", s.value) for s in query.states]
    out += [(name, getattr(query, name)) for name in TEXT_FILTERS if getattr(query, name)]
    for field, prefix, _ in TIME_FILTERS:
        r: TimeRange = getattr(query, field)
        if r.start is not None:
            out.append((f"{prefix}_from", repr(float(r.start))))
        if r.end is not None:
            out.append((f"{prefix}_to", repr(float(r.end))))
    return out


def describe(query: JobQuery) -> str:
    """The query in words, for a confirmation ("every job" when it filters nothing)."""
    parts = []
    if query.queues:
        parts.append("queue " + " or ".join(query.queues))
    if query.states:
        parts.append("state " + " or ".join(s.value for s in query.states))
    for name in TEXT_FILTERS:
        value = getattr(query, name)
        if value:
            parts.append(f"{name} {'is' if name in ('kind', 'worker') else 'contains'} {value!r}")
    for field, _, what in TIME_FILTERS:
        r: TimeRange = getattr(query, field)
        if r.start is not None:
            parts.append(f"{what} from {_iso(r.start)}")
        if r.end is not None:
            parts.append(f"{what} before {_iso(r.end)}")
    return "; ".join(parts) if parts else "every job"


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


__all__ = [
    "PARAMS",
    "TEXT_FILTERS",
    "TIME_FILTERS",
    "describe",
    "parse_time",
    "query_from_mapping",
    "query_from_params",
    "query_params",
]
