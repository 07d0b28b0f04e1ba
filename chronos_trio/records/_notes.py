"""A running job's notes: its progress and its log lines (issue 28).

A handler reports progress (``await job.progress(0.4, "resized 4 of 10")``)
and appends log lines (``job.log("...")``); the worker keeps the latest
progress and the new lines of each job and writes them in batches, fenced by
the job's lease (:class:`~chronos_trio.store.NotesRole`). Readers (job
handles, the command line, the dashboard) get a :class:`JobNotes`.

The bounds, kept by every store and documented in ``docs/progress.md``:

* a progress fraction is a finite number in [0, 1] (0.4 is 40 %: "4 of
  10" is ``4 / 10``); anything else is a ``ValueError``;
* a progress message is at most :data:`MAX_PROGRESS_MESSAGE` characters
  (longer is a ``ValueError``: a message is a short status, not a log);
* a log line is at most :data:`MAX_LINE_CHARS` characters (a worker cuts a
  longer one and ends it with :data:`CUT_MARK`; a store refuses one);
* a job keeps its newest :data:`MAX_NOTE_LINES` lines, over all its
  attempts: a line past the bound pushes the oldest out, and
  :attr:`JobNotes.dropped` counts the lines pushed out.
"""

from __future__ import annotations

import math

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._checks import is_number
from ._jobs import LeaseRef

#: The most characters a progress message may have.
MAX_PROGRESS_MESSAGE = 200
#: The most characters a log line may have.
MAX_LINE_CHARS = 500
#: The most log lines a job keeps (its newest), over all its attempts.
MAX_NOTE_LINES = 100
#: What ends a log line a worker cut to :data:`MAX_LINE_CHARS`.
CUT_MARK = " [cut]"


def check_fraction(value: object) -> float:
    """``value`` as a float if it is a finite real number in [0, 1] (never a
    bool); else ``ValueError`` naming it."""
    if is_number(value) and math.isfinite(value) and 0 <= value <= 1:
        return float(value)
    raise ValueError(f"progress must be a finite number from 0 to 1 (a fraction), got {value!r}")


def check_message(value: object) -> str:
    """``value`` if it is a string of at most :data:`MAX_PROGRESS_MESSAGE`
    characters; else ``TypeError`` (not a string) or ``ValueError`` (too long)."""
    if not isinstance(value, str):
        raise TypeError(f"a progress message must be a str, got {type(value).__name__}")
    if len(value) > MAX_PROGRESS_MESSAGE:
        raise ValueError(
            f"a progress message must be at most {MAX_PROGRESS_MESSAGE} characters, "
            f"got {len(value)} (log long text with job.log)"
        )
    return value


def cut_line(value: object) -> str:
    """``value`` as a log line: the string itself when it is at most
    :data:`MAX_LINE_CHARS` characters, else its start ending with
    :data:`CUT_MARK` (exactly :data:`MAX_LINE_CHARS` long). Raises
    ``TypeError`` when it is not a string."""
    if not isinstance(value, str):
        raise TypeError(f"a log line must be a str, got {type(value).__name__}")
    if len(value) <= MAX_LINE_CHARS:
        return value
    return value[: MAX_LINE_CHARS - len(CUT_MARK)] + CUT_MARK


@attrs.frozen
class Progress:
    """A progress report as a handler gives it: a fraction in [0, 1] and a
    short message (see the module's bounds)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    fraction: float
    message: str = ""


@attrs.frozen
class NoteWrite:
    """What one job's lease writes in one batch: its latest progress (None:
    unchanged) and its new log lines, oldest first."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    lease: LeaseRef
    progress: Progress | None = None
    lines: tuple[str, ...] = ()


@attrs.frozen
class NoteLine:
    """One log line of a job: the attempt that wrote it (the job's
    ``attempts`` then: 1 for the first run) and when the store wrote it
    (store clock, epoch seconds; at most a flush interval after the handler
    logged it)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    attempt: int
    at: float
    text: str


@attrs.frozen
class JobProgress:
    """A job's latest progress as stored: the fraction and message, the
    attempt that reported it and when the store wrote it (store clock)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    fraction: float
    message: str
    attempt: int
    at: float


@attrs.frozen
class JobNotes:
    """A job's notes as readers see them: its latest progress (None: never
    reported) and its log lines, oldest first (at most
    :data:`MAX_NOTE_LINES`; ``dropped`` older ones were pushed out)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    queue: str
    progress: JobProgress | None
    lines: tuple[NoteLine, ...] = ()
    dropped: int = 0


def check_write(write: NoteWrite) -> None:
    """Refuse a write that breaks the bounds (``ValueError``/``TypeError``
    naming what): what a store checks of a whole batch before it writes."""
    if write.progress is not None:
        check_fraction(write.progress.fraction)
        check_message(write.progress.message)
    for line in write.lines:
        if cut_line(line) != line:
            raise ValueError(
                f"a log line must be at most {MAX_LINE_CHARS} characters, got {len(line)} "
                f"(job {write.lease.job_id!r})"
            )
