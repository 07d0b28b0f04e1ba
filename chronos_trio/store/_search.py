"""Searching jobs (:class:`~chronos_trio.store.SearchRole`): the query, the
page it returns, and the one predicate every store applies.

A search looks at jobs in a store-defined order (each backend's cheapest
walk: the MemoryStore and the SQL stores by queue then job ID, the
RedisStore partition by partition through its state indexes), narrowing
first by what its indexes give (queue, state) and then testing each record
it reads with :func:`matches`. It reads at most ``scan_limit`` records per
call: a call returns when it has ``limit`` matching jobs *or* has read
``scan_limit`` records, and then hands back a cursor to go on from. So a
page costs O(records read), bounded per call, whatever the store holds; a
rare match over many jobs is found by following cursors ("keep
searching"), never by one call that blocks the store.

The filters (all given ones must hold):

* ``queues``/``states``: any of them (empty: all); ``kind``: exactly.
* ``error``: a substring of ``last_error``, case-insensitive for ASCII
  letters (as SQL's ``lower`` is on every backend).
* ``payload``: a substring of the payload's bytes (its UTF-8), case-sensitive
  (a payload is data: ``"user_id": 42`` is searched as written).
* ``worker``: the worker that holds the job's lease now, or ran one of its
  attempts that ended without success (``Job.history``: the stores keep
  who ran each such attempt; the worker of a success is not kept).
* ``created``/``finished``/``due``: :class:`TimeRange` of ``created_at``,
  ``finished_at`` and ``run_at`` (store clock), start included, end not.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable
from typing import Any

import attrs

from ..records._jobs import Job, JobState
from ._search_limits import MAX_PAGE as MAX_PAGE
from ._search_limits import SCAN_LIMIT as SCAN_LIMIT

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """``text`` with ASCII letters lowered (what SQL's ``lower`` surely does)."""
    return text.translate(_ASCII_LOWER)


def _check_time(value: float | None, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be epoch seconds (a number) or None, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of epoch seconds, got {value!r}")


@attrs.frozen
class TimeRange:
    """Times from ``start`` (included) to ``end`` (excluded), epoch seconds
    on the store's clock; None leaves that side open. A job whose time is
    not set (``finished_at`` of a job that has not finished) is outside
    every range that is not fully open. ``ValueError`` when ``end`` is
    before ``start``, ``TypeError`` for a non-number."""

    start: float | None = None
    end: float | None = None

    def __attrs_post_init__(self) -> None:
        _check_time(self.start, "a time range's start")
        _check_time(self.end, "a time range's end")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"a time range ends ({self.end}) before it starts ({self.start})")

    @property
    def open(self) -> bool:
        """Whether it holds every time (no bound)."""
        return self.start is None and self.end is None

    def holds(self, t: float | None) -> bool:
        """Whether time ``t`` is in the range."""
        if self.open:
            return True
        if t is None:
            return False
        return (self.start is None or t >= self.start) and (self.end is None or t < self.end)


ANY_TIME = TimeRange()


def _texts(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _states(value: Any) -> tuple[JobState, ...]:
    if isinstance(value, str):
        value = (value,)
    return tuple(s if isinstance(s, JobState) else JobState.parse(s) for s in value)


def _text_filter(_: Any, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"the {attribute.name} filter must be text, got {value!r}")


@attrs.frozen
class JobQuery:
    """What to search for (see the module docstring); the default finds
    every listed job. ``states`` takes ``JobState`` values or their names
    (``ValueError`` listing the valid ones for a bad name); text filters
    must be ``str`` (``TypeError`` otherwise), "" meaning no filter."""

    queues: tuple[str, ...] = attrs.field(default=(), converter=_texts)
    states: tuple[JobState, ...] = attrs.field(default=(), converter=_states)
    kind: str = attrs.field(default="", validator=_text_filter)
    error: str = attrs.field(default="", validator=_text_filter)
    payload: str = attrs.field(default="", validator=_text_filter)
    worker: str = attrs.field(default="", validator=_text_filter)
    created: TimeRange = ANY_TIME
    finished: TimeRange = ANY_TIME
    due: TimeRange = ANY_TIME

    def __attrs_post_init__(self) -> None:
        for name in self.queues:
            if not isinstance(name, str) or not name:
                raise TypeError(f"queues must be non-empty names, got {name!r}")
        for name in ("created", "finished", "due"):
            if not isinstance(getattr(self, name), TimeRange):
                raise TypeError(f"the {name} filter must be a TimeRange")

    def in_states(self, state: JobState) -> bool:
        return not self.states or state in self.states

    def in_queues(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


def matches(job: Job, query: JobQuery) -> bool:
    """Whether ``job`` (read with its ``history`` when ``query.worker`` is
    set) passes every filter of ``query``: the one judgement every store
    applies (the SQL stores narrow first in SQL, then apply it)."""
    if not query.in_queues(job.queue) or not query.in_states(job.state):
        return False
    if query.kind and job.kind != query.kind:
        return False
    if query.error and ascii_lower(query.error) not in ascii_lower(job.last_error):
        return False
    if query.payload and query.payload.encode("utf-8", "surrogatepass") not in job.payload:
        return False
    if query.worker and not (
        job.lease_owner == query.worker or any(a.worker == query.worker for a in job.history)
    ):
        return False
    return (
        query.created.holds(job.created_at)
        and query.finished.holds(job.finished_at)
        and query.due.holds(job.run_at)
    )


@attrs.frozen
class SearchPage:
    """One page of a search: ``jobs`` that match (at most the ``limit``
    asked, in the store's search order), and ``cursor``, to pass back for
    the next page, None when the search has looked at every job.
    ``scanned`` is how many records this call read. ``partial`` is True
    when the call stopped at its scan bound before it filled the page: the
    page is short, yet more may match (follow the cursor)."""

    jobs: tuple[Job, ...]
    cursor: str | None
    scanned: int
    partial: bool = False

    @property
    def complete(self) -> bool:
        """Whether the search has looked at every job (no cursor)."""
        return self.cursor is None


def check_search(limit: int, scan_limit: int) -> None:
    """The bounds a search call takes: ``ValueError`` (saying the range) otherwise."""
    for name, value, top in (("limit", limit, MAX_PAGE), ("scan_limit", scan_limit, None)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < 1 or (top is not None and value > top):
            bound = f"between 1 and {top}" if top is not None else ">= 1"
            raise ValueError(f"{name} must be {bound}, got {value}")


def collect(
    candidates: Iterable[tuple[Any, Job]], query: JobQuery, limit: int, scan_limit: int
) -> tuple[list[Job], Any, int, bool]:
    """Walk ``candidates`` ((position, job) in search order, read lazily)
    until ``limit`` match or ``scan_limit`` were read. Returns the matches,
    the position of the last one read (None: none read), how many were
    read, and whether the walk stopped before the candidates ran out."""
    found: list[Job] = []
    last: Any = None
    scanned = 0
    for position, job in candidates:
        if len(found) >= limit or scanned >= scan_limit:
            return found, last, scanned, True
        scanned += 1
        last = position
        if matches(job, query):
            found.append(job)
    return found, last, scanned, False


def page_of(found: list[Job], last: Any, scanned: int, stopped: bool, limit: int) -> SearchPage:
    """The page of a :func:`collect` walk (its cursor the last position read)."""
    cursor = encode_cursor(last) if stopped else None
    return SearchPage(tuple(found), cursor, scanned, partial=stopped and len(found) < limit)


def encode_cursor(position: Any) -> str:
    """An opaque cursor for ``position`` (a JSON value a backend chose)."""
    text = json.dumps(position, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Any:
    """The position of a cursor :func:`encode_cursor` made; ``ValueError``
    (saying to search again without one) for anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        raise ValueError(
            f"search cursor {cursor[:40]!r} is not one this store gave; "
            "search again without a cursor"
        ) from None


def bad_cursor(cursor: str) -> ValueError:
    """The error for a cursor that decodes but is not this store's."""
    return ValueError(
        f"search cursor {cursor[:40]!r} is not one this store gave; search again without a cursor"
    )


__all__ = [
    "ANY_TIME",
    "MAX_PAGE",
    "SCAN_LIMIT",
    "JobQuery",
    "SearchPage",
    "TimeRange",
    "ascii_lower",
    "bad_cursor",
    "check_search",
    "collect",
    "decode_cursor",
    "encode_cursor",
    "matches",
    "page_of",
]
