"""The SQL stores' kept outbox entries of deleted workflow jobs (table
``flow_kept``: SQLite schema version 7, PostgreSQL migration 7), as the
memory store keeps them in a dict and Redis in ``<tag>:gone:<id>`` hashes.

A delete (``delete_job``, ``purge_queue``) returns what it deleted
(:data:`DELETED_COLUMNS`); :func:`kept_rows` picks what keeps its place in
its flow, inserted (:func:`insert_kept`) in the same transaction: an end
still in the outbox (succeeded, or dead with failure handling, not
continued yet), whole; a job that never ended (scheduled, ready,
retry_wait) whose continuation holds failure handling, as failed
(:data:`~chronos_trio.records._flow_outcomes.DELETED_ERROR`). The outbox
read takes them beside the jobs' entries (``kept`` set), and finishing
them deletes the rows. Pure: the statements' text and the rows, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..records._flow_outcomes import DELETED_ERROR
from ..records._jobs import Job, JobState
from ..records._workflow import holds_failure_handling

#: What a delete returns for :func:`kept_rows`, after the columns it needs
#: itself: the job's end (finished_at) or, for one that never ended, now.
DELETED_COLUMNS = (
    "id, queue, then_step, result, version, part, state, last_error, attempts, kind,"
    " continuation, coalesce(finished_at, {now})"
)

#: The columns of ``flow_kept``, in :func:`kept_rows`' order.
_KEPT = (
    "id, queue, then_step, result, version, part, state, last_error, attempts, kind, finished_at"
)

_ENDS = frozenset({JobState.SUCCEEDED.value, JobState.DEAD.value, JobState.ABORTED.value})
_UNENDED = frozenset({JobState.SCHEDULED.value, JobState.READY.value, JobState.RETRY_WAIT.value})


def kept_rows(deleted: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The ``flow_kept`` rows of the deleted rows (each :data:`DELETED_COLUMNS`)
    that keep their place in their flows (see the module doc)."""
    out: list[tuple[Any, ...]] = []
    for row in deleted:
        job_id, queue, then, result, version, part, state, error, attempts, kind, outboxed, at = row
        if then is None:
            continue
        if outboxed and state in _ENDS:
            pass  # its end, whole
        elif state in _UNENDED and holds_failure_handling(then):
            result, state, error = None, JobState.DEAD.value, DELETED_ERROR
        else:
            continue
        out.append((job_id, queue, then, result, version, part, state, error, attempts, kind, at))
    return out


def discarded_row(job: Job, version: int, part: int, error: str, now: float) -> tuple[Any, ...]:
    """The ``flow_kept`` row of workflow job ``job`` discarded at ``now``
    (placed in ``version``, ``part``): its failed end, ``error``."""
    assert job.then is not None
    return (
        job.id, job.queue, job.then, None, version, part,
        JobState.DEAD.value, error, job.attempts, job.kind, now,
    )  # fmt: skip


def insert_kept(mark: str) -> str:
    """The insert of one kept row (placeholders ``mark``); a row of that ID
    already kept stands."""
    marks = ", ".join([mark] * 11)
    return f"INSERT INTO flow_kept ({_KEPT}) VALUES ({marks}) ON CONFLICT (id) DO NOTHING"


def kept_entries(in_queues: str, limit: str) -> str:
    """The outbox read's second part: kept rows of the queues (``in_queues``:
    the condition on ``k.queue``), earliest first, at most ``limit``; the
    columns of the jobs' part, then 1 (kept)."""
    return (
        "SELECT k.id, k.queue, k.then_step, k.result, k.version, k.part, k.state,"
        " k.last_error, k.attempts, k.kind, 1 FROM flow_kept k"
        f" WHERE k.queue {in_queues} ORDER BY k.finished_at, k.id LIMIT {limit}"
    )


def finish_kept(done: Sequence[Any]) -> list[str]:
    """The IDs of the kept rows among handled entries (none: no statement)."""
    return sorted({c.job_id for c in done if c.kept})
