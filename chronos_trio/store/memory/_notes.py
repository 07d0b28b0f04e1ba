"""The memory store's notes of one job (see :class:`~chronos_trio.store.NotesRole`):
held on the job's record, so they live and die with it."""

from __future__ import annotations

import collections

import attrs

from ...records._notes import MAX_NOTE_LINES, JobNotes, JobProgress, NoteLine, NoteWrite


def _lines() -> collections.deque[NoteLine]:
    return collections.deque(maxlen=MAX_NOTE_LINES)


@attrs.define
class Notes:
    """A job's latest progress, its newest lines and how many older ones
    the bound pushed out."""

    progress: JobProgress | None = None
    lines: collections.deque[NoteLine] = attrs.field(factory=_lines)
    dropped: int = 0

    def write(self, write: NoteWrite, attempt: int, now: float) -> int:
        """Apply ``write`` (already checked and fenced) of attempt
        ``attempt`` at store time ``now``; return how many old lines it
        pushed out."""
        if write.progress is not None:
            p = write.progress
            self.progress = JobProgress(float(p.fraction), p.message, attempt, now)
        pushed = max(0, len(self.lines) + len(write.lines) - MAX_NOTE_LINES)
        self.lines.extend(NoteLine(attempt, now, text) for text in write.lines)
        self.dropped += pushed
        return pushed

    def shown(self, job_id: str, queue: str) -> JobNotes:
        """The notes as a reader sees them."""
        return JobNotes(job_id, queue, self.progress, tuple(self.lines), self.dropped)
