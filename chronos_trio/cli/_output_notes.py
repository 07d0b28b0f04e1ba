"""How the command line shows a job's notes (progress, log lines) under
``job ID``: as text after the job's details, and as JSON fields."""

from __future__ import annotations

from typing import Any

from ..app._inspector import relative_text as relative
from ..records._notes import JobNotes
from ._output import iso


def notes_lines(notes: JobNotes | None, now: float) -> str:
    """The text block shown after a job's details: its progress and its log
    lines (each with its attempt and time), oldest first; "" when the store
    keeps no notes (``notes`` None)."""
    if notes is None:
        return ""
    out = [""]
    p = notes.progress
    if p is None:
        out.append("progress: -")
    else:
        message = f" {p.message}" if p.message else ""
        out.append(
            f"progress: {p.fraction:.0%}{message} "
            f"(attempt {p.attempt}, written {relative(p.at, now)})"
        )
    if not notes.lines:
        out.append("log: -")
        return "\n".join(out)
    dropped = f", {notes.dropped} older dropped" if notes.dropped else ""
    count = len(notes.lines)
    out.append(f"log ({count} line{'' if count == 1 else 's'}{dropped}):")
    out.extend(f"  #{line.attempt} {iso(line.at)}  {line.text}" for line in notes.lines)
    return "\n".join(out)


def notes_json(notes: JobNotes | None) -> dict[str, Any]:
    """The JSON fields ``progress`` and ``log`` of a job (both None when the
    store keeps no notes)."""
    if notes is None:
        return {"progress": None, "log": None}
    p = notes.progress
    progress = (
        None
        if p is None
        else {"fraction": p.fraction, "message": p.message, "attempt": p.attempt, "at": iso(p.at)}
    )
    return {
        "progress": progress,
        "log": {
            "dropped": notes.dropped,
            "lines": [
                {"attempt": line.attempt, "at": iso(line.at), "text": line.text}
                for line in notes.lines
            ],
        },
    }
