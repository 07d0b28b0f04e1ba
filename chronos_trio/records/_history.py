"""A job's whole attempt history: the attempts its store kept
(``Job.history``, see ``records._attempts``) and the one its record
describes (running, or succeeded)."""

from __future__ import annotations

from ._attempts import Attempt, AttemptOutcome
from ._jobs import Job, JobState


def attempt_history(job: Job) -> tuple[Attempt, ...]:
    """Every attempt of ``job`` it still knows of, oldest first: the stored
    ones (``job.history``: those that ended without success, as read by
    ``AdminRole.get_job``), then the one derived from the record: RUNNING
    while it is leased, SUCCEEDED once it has succeeded. Never raises."""
    history = job.history
    if job.state is JobState.LEASED:
        return (
            *history,
            Attempt(job.attempts, AttemptOutcome.RUNNING, job.lease_owner),
        )
    if job.state is JobState.SUCCEEDED:
        return (
            *history,
            Attempt(job.attempts, AttemptOutcome.SUCCEEDED, ended=job.finished_at),
        )
    return history
