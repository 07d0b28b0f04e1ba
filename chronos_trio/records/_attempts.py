"""Attempt history: every attempt of a job, with its worker, start, end,
outcome and error (issue 28, item 3).

The stores keep only the attempts that ended *without* success, written by
the same atomic, fenced settle or recovery that ends them (a success costs
nothing more than before): at most :data:`HISTORY_LIMIT` entries, the oldest
dropped first. The attempt that succeeded, or the one running, is derived
from the record when it is read (``records._history.attempt_history``).

The stored form (Redis hash field ``ah``, SQL column ``attempt_history``)
is text, one entry a line, each line a JSON array ``[number, outcome,
worker, started, ended, error]`` with the times as text (store clock, epoch
seconds; "" unknown). It is advisory: a line that does not read is skipped,
never damage, so a record of any age reads, and a worker that predates the
field ignores it (it needs no new record format).
"""

from __future__ import annotations

import enum
import json
import math

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr

#: The most attempts that ended without success a job keeps (the oldest go first).
HISTORY_LIMIT = 20
#: The most bytes (UTF-8) of an attempt's error its entry keeps (cut at a
#: character's start; ``Job.last_error`` keeps the last error whole).
ERROR_BYTES = 1000
#: The error of an attempt whose lease ran out and recovery took back
#: (the job went back to ready; a dead-lettered one keeps its own text).
LEASE_EXPIRED = "lease expired (worker lost)"


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"  # the handler returned
    RETRIED = "retried"  # failed; retried later
    DEAD = "dead"  # failed for good (retries exhausted, SkipRetry, bad payload)
    DISCARDED = "discarded"  # failed for good and not kept (shown while waiters read it)
    EXPIRED = "expired"  # its lease ran out (worker lost); recovery took it back
    ABORTED = "aborted"  # an abort stopped it
    RELEASED = "released"  # handed back unfinished (worker shutdown); not counted
    DEFERRED = "deferred"  # rate limited upstream: run later; not counted
    UNCLAIMED = "unclaimed"  # its worker had no handler for the kind; not counted
    RUNNING = "running"  # it holds the lease now


@attrs.frozen
class Attempt:
    """One attempt of a job.

    ``number`` is the job's attempt count when it ran (an attempt given
    back, RELEASED, DEFERRED or UNCLAIMED, is not counted, so the next one
    carries the same number). ``worker`` is the lease owner's worker ID,
    ``started`` when its lease was granted and ``ended`` when the store
    ended it (store clock; None: not known, e.g. the start of an attempt
    whose lease expired, or the worker of the one that succeeded). ``error``
    is what it ended with ("" for a success)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    number: int
    outcome: AttemptOutcome
    worker: str = ""
    started: float | None = None
    ended: float | None = None
    error: str = ""


def _time(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def cut_error(error: str) -> str:
    """``error`` cut to :data:`ERROR_BYTES` bytes of UTF-8, at a character's start."""
    if len(error) * 4 <= ERROR_BYTES:
        return error
    return error.encode("utf-8", "surrogatepass")[:ERROR_BYTES].decode("utf-8", "ignore")


def encode_attempt(attempt: Attempt) -> str:
    """One stored line (see the module's docstring); its error cut by
    :func:`cut_error`."""
    return json.dumps(
        [
            attempt.number,
            attempt.outcome.value,
            attempt.worker,
            _time(attempt.started),
            _time(attempt.ended),
            cut_error(attempt.error),
        ],
        ensure_ascii=False,
    )


def _read_time(value: object) -> float | None:
    """A stored time (text, or a number), or None: absent or unreadable."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _read_line(line: str) -> Attempt | None:
    try:
        number, outcome, worker, started, ended, error = json.loads(line)
        if type(number) is not int or number < 0:
            return None
        return Attempt(
            number,
            AttemptOutcome(outcome),
            worker if isinstance(worker, str) else "",
            _read_time(started),
            _read_time(ended),
            error if isinstance(error, str) else "",
        )
    except (ValueError, TypeError):
        return None


def decode_history(stored: str | bytes | None) -> tuple[Attempt, ...]:
    """The attempts a stored history holds, oldest first (None or "": none).
    Never raises: a line that does not read is skipped."""
    if not stored:
        return ()
    text = stored.decode("utf-8", "replace") if isinstance(stored, bytes) else stored
    return tuple(a for a in map(_read_line, text.split("\n")) if a is not None)


def append_history(stored: str | None, attempt: Attempt) -> str:
    """``stored`` with ``attempt`` added, keeping the last :data:`HISTORY_LIMIT`."""
    lines = stored.split("\n") if stored else []
    lines.append(encode_attempt(attempt))
    return "\n".join(lines[-HISTORY_LIMIT:])


def added(history: tuple[Attempt, ...], attempt: Attempt) -> tuple[Attempt, ...]:
    """``history`` with ``attempt`` added (its error cut by :func:`cut_error`),
    keeping the last :data:`HISTORY_LIMIT`: what a store that keeps
    ``Attempt`` objects (the MemoryStore) holds."""
    kept = attrs.evolve(attempt, error=cut_error(attempt.error))
    return (*history, kept)[-HISTORY_LIMIT:]


def encode_history(attempts: tuple[Attempt, ...]) -> str | None:
    """The stored form of ``attempts`` (None for none)."""
    return "\n".join(map(encode_attempt, attempts[-HISTORY_LIMIT:])) or None
