"""How the ``batch`` command prints a batch's live counts (text and JSON)."""

from __future__ import annotations

from typing import Any

import attrs

from ..app._batch import BatchStatus, callback_id


def batch_json(status: BatchStatus) -> dict[str, Any]:
    """The JSON of ``batch --json``: the counts, ``complete``, the failed
    members' IDs and the callback's state (null: none, or not made yet)."""
    out = attrs.asdict(status)
    out["failed_job_ids"] = list(status.failed_job_ids)
    out["complete"] = status.complete
    return out


def batch_lines(status: BatchStatus) -> str:
    """A batch's counts for people, a few lines."""
    done = "complete" if status.complete else "running"
    lines = [
        f"batch {status.batch_id}: {status.total} members, {status.succeeded} succeeded, "
        f"{status.failed} failed, {status.pending} pending ({done})"
    ]
    if status.failed_job_ids:
        lines.append("failed: " + ", ".join(status.failed_job_ids))
    callback = status.callback or ("not yet" if not status.complete else "none")
    lines.append(f"on_complete: {callback_id(status.batch_id)} {callback}")
    return "\n".join(lines)
