"""Notes (progress and log lines, ``records._notes``) on the SQL stores
(PostgreSQL and SQLite): stored in three columns of the job's row, so they
live and die with it (retention, trim, delete, a success nobody keeps)
with nothing more to do, and decided in Python from the rows a write holds
locked (the PostgreSQL store's ``FOR UPDATE``, the SQLite file's write lock).

Columns (:data:`NOTES_COLUMNS`):

* ``notes_progress``: the latest progress, the JSON array ``[fraction,
  message, attempt, at]``; NULL: none reported;
* ``notes_lines``: the newest :data:`~chronos_trio.records._notes.MAX_NOTE_LINES`
  log lines, oldest first, one a line, each the JSON array ``[attempt, at,
  text]`` (JSON escapes a text's line breaks); NULL: none;
* ``notes_dropped``: how many older lines the bound pushed out.

A value that does not read (edited by hand) reads as none: notes are
advisory, never a job's damage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..records._jobs import JobRef
from ..records._notes import MAX_NOTE_LINES, JobNotes, JobProgress, NoteLine, NoteWrite, check_write
from ._results import NotesResult

#: The notes' columns of the ``jobs`` table, in :class:`Noted`'s order.
NOTES_COLUMNS = "notes_progress, notes_lines, notes_dropped"
#: What a write reads of each of its rows: the fence, the attempt, the notes.
LOCK_COLUMNS = f"id, state, lease_token, lease_expires_at, attempts, {NOTES_COLUMNS}"


@attrs.define
class Noted:
    """One locked row as a write sees it (:data:`LOCK_COLUMNS`), and the
    notes the write leaves it (``changed`` when it must be written)."""

    state: str
    token: str
    expires_at: float | None
    attempts: int
    progress: str | None
    lines: list[str]
    dropped: int
    changed: bool = False

    @classmethod
    def of(cls, row: Sequence[Any]) -> tuple[str, Noted]:
        """(job id, its :class:`Noted`) of a row selected as :data:`LOCK_COLUMNS`."""
        job_id, state, token, expires_at, attempts, progress, lines, dropped = row
        kept = lines.split("\n") if lines else []
        return job_id, cls(state, token, expires_at, attempts, progress, kept, dropped or 0)

    def held(self, token: str, now: float) -> bool:
        """Whether ``token`` holds the row's lease at ``now`` (the settle's fence)."""
        return (
            self.state == "leased"
            and bool(token)
            and self.token == token
            and self.expires_at is not None
            and self.expires_at > now
        )

    def stored(self) -> tuple[str | None, str | None, int]:
        """The three columns as written."""
        return self.progress, "\n".join(self.lines) or None, self.dropped


def to_write(writes: Sequence[NoteWrite]) -> bool:
    """Whether ``writes`` has anything to write, each checked first
    (``records._notes.check_write``: ValueError or TypeError, before
    anything is written, for one that breaks the bounds)."""
    for w in writes:
        check_write(w)
    return bool(writes)


def read_query(ref: JobRef, mark: str) -> tuple[str, tuple[str, ...]]:
    """The statement reading the notes of ``ref``'s job (its queue, then
    :data:`NOTES_COLUMNS`) and its parameters; ``mark``: the driver's
    parameter mark (``%s``, ``?``)."""
    query = f"SELECT queue, {NOTES_COLUMNS} FROM jobs WHERE id = {mark}"
    if ref.queue is None:
        return query, (ref.job_id,)
    return f"{query} AND queue = {mark}", (ref.job_id, ref.queue)


def read_notes(ref: JobRef, row: Sequence[Any] | None) -> JobNotes | None:
    """The notes of ``ref``'s job from the row :func:`read_query` read (None: no such job)."""
    return None if row is None else notes_of(ref.job_id, row[0], row[1:])


def plan_notes(writes: Sequence[NoteWrite], rows: Mapping[str, Noted], now: float) -> NotesResult:
    """Apply ``writes`` (already checked) in order to the locked ``rows``
    (by job ID; a job not there is refused): each write whose lease is held
    replaces the progress and appends its lines stamped with the job's
    attempts and ``now``, keeping the newest :data:`MAX_NOTE_LINES`. The
    rows it changed are marked; what it did is returned."""
    written: list[str] = []
    refused: list[str] = []
    pushed = 0
    for w in writes:
        row = rows.get(w.lease.job_id)
        if row is None or not row.held(w.lease.token, now):
            refused.append(w.lease.job_id)
            continue
        if w.progress is not None:
            p = w.progress
            row.progress = json.dumps([float(p.fraction), p.message, row.attempts, now])
        row.lines += (json.dumps([row.attempts, now, text]) for text in w.lines)
        over = len(row.lines) - MAX_NOTE_LINES
        if over > 0:
            del row.lines[:over]
            row.dropped += over
            pushed += over
        row.changed = True
        written.append(w.lease.job_id)
    return NotesResult(tuple(written), tuple(refused), pushed)


def _progress(text: str | None) -> JobProgress | None:
    if not text:
        return None
    try:
        fraction, message, attempt, at = json.loads(text)
        if not (math.isfinite(fraction) and isinstance(message, str)):
            return None
        return JobProgress(float(fraction), message, int(attempt), float(at))
    except (ValueError, TypeError):
        return None


def _line(text: str) -> NoteLine | None:
    try:
        attempt, at, line = json.loads(text)
        return NoteLine(int(attempt), float(at), line) if isinstance(line, str) else None
    except (ValueError, TypeError):
        return None


def notes_of(job_id: str, queue: str, row: Sequence[Any]) -> JobNotes:
    """The :class:`JobNotes` of a job from its :data:`NOTES_COLUMNS` values."""
    progress, lines, dropped = row
    read = (_line(text) for text in lines.split("\n")) if lines else ()
    return JobNotes(
        job_id, queue, _progress(progress), tuple(x for x in read if x is not None), dropped or 0
    )
