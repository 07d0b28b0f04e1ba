"""Rows of the SQL stores' ``jobs`` table (PostgreSQL and SQLite share its
columns) and the :class:`Job` they stand for.

:data:`JOB_COLUMNS` is the select list every read of whole jobs uses, and
:func:`job_from_row` turns one such row back into a ``Job``. Columns are
typed and checked by the schema, so a row cannot be half-written; a text
column that does not decode (``control``, ``headers``) is reported as the
job's ``damage`` rather than raised. A job's placement is its routing
``(version, partition)`` (columns ``version`` and ``part``), as on the
stores with versioned queues.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..records._attempts import decode_history
from ..records._control import JobControl, decode_control
from ..records._jobs import Job, JobState, with_history
from ..records._options import decode_headers, encode_headers
from ._topology_placement import topology_placement

#: Where a job of a queue never promoted lives: version 1, partition 0 (the
#: default topology, see ``_topology``), as ``TopologyRole.locate`` reads it.
PLACEMENT = topology_placement(1, 0)

#: The columns of a whole job, in :func:`job_from_row`'s order.
JOB_COLUMNS = (
    "id, queue, kind, payload, run_at, state, attempts, max_retries, timeout, "
    "lease_token, lease_owner, lease_expires_at, last_error, created_at, finished_at, "
    "result, result_until, headers, then_step, control, unclaimed_since, version, part"
)

_STATES = {state.value: state for state in JobState}

#: The column of a job's attempt history (``records._attempts``: the
#: attempts that ended without success, one line each; NULL: none), read
#: only by reads that show the whole record (:func:`job_with_history`) and
#: by settle and recovery, which add to it.
HISTORY_COLUMN = "attempt_history"


def job_from_row(row: Sequence[Any]) -> Job:
    """The ``Job`` of a row selected with :data:`JOB_COLUMNS`."""
    (
        job_id,
        queue,
        kind,
        payload,
        run_at,
        state,
        attempts,
        max_retries,
        timeout,
        lease_token,
        lease_owner,
        lease_expires_at,
        last_error,
        created_at,
        finished_at,
        result,
        result_until,
        headers,
        then_step,
        control,
        unclaimed_since,
        version,
        part,
    ) = row
    damage = []
    try:
        decoded_headers = decode_headers(headers)
    except ValueError as exc:
        decoded_headers = ()
        damage.append(f"headers {headers!r}: {exc}")
    try:
        decoded_control = decode_control(control)
    except ValueError as exc:
        decoded_control = None
        damage.append(f"control {control!r}: {exc}")
    return Job(
        id=job_id,
        queue=queue,
        kind=kind,
        payload=bytes(payload),
        run_at=run_at,
        state=_STATES[state],
        attempts=attempts,
        max_retries=max_retries,
        timeout=timeout,
        lease_token=lease_token,
        lease_owner=lease_owner,
        lease_expires_at=lease_expires_at,
        last_error=last_error,
        created_at=created_at,
        finished_at=finished_at,
        result=None if result is None else bytes(result),
        result_until=result_until,
        headers=decoded_headers,
        then=then_step,
        control=decoded_control,
        unclaimed_since=unclaimed_since,
        placement=topology_placement(version, part),
        damage="; ".join(damage),
    )


def job_with_history(row: Sequence[Any]) -> Job:
    """The ``Job`` of a row selected with :data:`JOB_COLUMNS` then
    :data:`HISTORY_COLUMN`, its ``history`` filled (an unreadable line is
    skipped, never damage)."""
    job = job_from_row(row[:-1])
    history = decode_history(row[-1])
    return with_history(job, history)


def shown(job: Job, now: float) -> Job:
    """``job`` as reads show it at ``now``: a due scheduled or retry_wait
    job is ready (the SQL stores run no promoter: their claim leases such a
    job as a ready one)."""
    if job.state in (JobState.SCHEDULED, JobState.RETRY_WAIT) and job.run_at <= now:
        return with_history(attrs.evolve(job, state=JobState.READY), job.history)
    return job


def control_text(control: JobControl | None) -> str:
    """A job's ``control`` column."""
    return "" if control is None else control.encode()


def headers_text(headers: tuple[tuple[str, str], ...]) -> str:
    """A job's ``headers`` column."""
    return encode_headers(headers).decode()
