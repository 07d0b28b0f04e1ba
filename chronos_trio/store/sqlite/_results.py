"""Results, waiting and workflows on SQLite (STUB: to be written)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...records._jobs import JobOutcome, JobRef, JobState
from ...records._workflow import Arrival
from .._roles import Continuation


def probe(conn: sqlite3.Connection, queues: Sequence[str], now: float) -> tuple[bool, float | None]:
    """Whether a queue of ``queues`` that is not paused has a due job, and
    the next due time of a scheduled or retry_wait job of them (None)."""
    raise NotImplementedError


def outcome(conn: sqlite3.Connection, ref: JobRef, now: float) -> JobOutcome | None:
    raise NotImplementedError


def state_of(conn: sqlite3.Connection, ref: JobRef) -> JobState | None:
    """The job's stored state (None: no such job, or not of ``ref.queue``)."""
    raise NotImplementedError


def register_waiter(
    conn: sqlite3.Connection, ref: JobRef, waiter: str, ttl: float, now: float
) -> JobState | None:
    """Register ``waiter`` for ``ref`` (while the job is pending) until
    ``now + ttl``; the job's state (None: no such job)."""
    raise NotImplementedError


def unregister_waiter(conn: sqlite3.Connection, job_id: str, waiter: str) -> None:
    raise NotImplementedError


def continuations(
    conn: sqlite3.Connection, queues: Sequence[str], limit: int
) -> list[Continuation]:
    raise NotImplementedError


def finish_continuations(conn: sqlite3.Connection, done: Sequence[Continuation]) -> None:
    raise NotImplementedError


def group_arrive(
    conn: sqlite3.Connection, arrivals: Sequence[Arrival], ttl: float, now: float
) -> list[list[bytes | None] | None]:
    raise NotImplementedError
