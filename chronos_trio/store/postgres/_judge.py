"""What the PostgreSQL store checker judges wrong, without changing
anything: one job row, and the flow-control slots and unique locks whose
holder does not stand as they say (see ``_check``).

Each finding carries what a repair re-checks before it acts: for a job,
the row version it was judged on (its ``xmin``: any write since makes a
new one); for a slot or lock, the holder's state, re-read by the repair's
own statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import psycopg

from ...records._jobs import PENDING_STATES, Job, JobState
from ...records._placement import NO_PLACEMENT
from .._roles import DAMAGED_RECORD, Finding, Problem
from .._rows import JOB_COLUMNS, job_from_row
from .._topology_placement import topology_placement

#: The partial index a row of each state is in (for a finding's ``indexes``).
INDEX_OF = {
    JobState.SCHEDULED: "claim",
    JobState.READY: "claim",
    JobState.RETRY_WAIT: "claim",
    JobState.LEASED: "leased",
    JobState.SUCCEEDED: "finished",
    JobState.DEAD: "finished",
    JobState.ABORTED: "finished",
}

_PENDING = [state.value for state in PENDING_STATES]


@attrs.frozen
class Judged:
    """A finding, and what its repair needs: the row version judged
    (``xmin``, "" for a slot or lock finding) and, for a slot or lock, its
    key."""

    finding: Finding
    xmin: str = ""
    key: str = ""


@attrs.frozen
class Row:
    """One job row as the walk reads it."""

    xmin: str
    job: Job
    discarded: bool
    continuation: bool
    abort_reason: str


#: The walk's select list: the row version, the job, and the flags.
ROW_COLUMNS = f"xmin::text, {JOB_COLUMNS}, discarded, continuation, abort_reason"


def read_rows(conn: psycopg.Connection[Any], queue: str, after: str, batch: int) -> list[Row]:
    """The next ``batch`` rows of ``queue`` after job ID ``after`` (by ID)."""
    out = []
    for raw in conn.execute(
        f'SELECT {ROW_COLUMNS} FROM jobs WHERE queue = %s AND id COLLATE "C" > %s'
        ' ORDER BY id COLLATE "C" LIMIT %s',
        (queue, after, batch),
    ):
        discarded, continuation, abort_reason = raw[-3:]
        out.append(Row(raw[0], job_from_row(raw[1:-3]), discarded, continuation, abort_reason))
    return out


def judge_row(row: Row, now: float, grace: float) -> Judged | None:
    """What is wrong with one job row, or None."""
    job = row.job
    finding = Finding(
        problem=Problem.DAMAGED,
        job_id=job.id,
        queue=job.queue,
        placement=job.placement,
        detail="",
        state=job.state.value,
        indexes=(INDEX_OF[job.state],),
    )
    set_aside = job.state is JobState.DEAD and job.last_error.startswith(DAMAGED_RECORD)
    damage = "" if set_aside else _damage(job)
    if damage:
        return Judged(attrs.evolve(finding, detail=damage), row.xmin)
    if row.continuation and (job.state is not JobState.SUCCEEDED or job.then is None):
        what = (
            f"{job.state} record" if job.then is not None else f"{job.state} record without a step"
        )
        held = (*finding.indexes, "outbox")
        detail = f"{what} in the workflow outbox"
        return Judged(
            attrs.evolve(finding, problem=Problem.WRONG_INDEX, detail=detail, indexes=held),
            row.xmin,
        )
    if row.discarded and job.state is not JobState.DEAD:
        detail = f"{job.state} record marked discarded: listed and counted nowhere"
        return Judged(attrs.evolve(finding, problem=Problem.NO_INDEX, detail=detail), row.xmin)
    if job.state is JobState.LEASED and job.lease_expires_at is not None:
        late = now - job.lease_expires_at
        if late >= grace:
            owner = job.lease_owner or "a worker"
            detail = f"lease of {owner} expired {late:.0f}s ago and was not recovered"
            return Judged(
                attrs.evolve(finding, problem=Problem.EXPIRED_LEASE, detail=detail), row.xmin
            )
    return None


def _damage(job: Job) -> str:
    """What a row holds that no operation writes ("" when nothing): text
    columns that do not decode, and a lease without its token or expiry.
    (Types, states and required columns are the schema's to enforce.)"""
    found = [job.damage] if job.damage else []
    if job.state is JobState.LEASED:
        if not job.lease_token:
            found.append("leased record without a lease token")
        if job.lease_expires_at is None:
            found.append("leased record without a lease expiry")
    return "; ".join(found)


def stray_slots(conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[Judged]:
    """Concurrency slots held by a job that is not leased, or is gone."""
    out = []
    for queue, key, job_id, state, version, part in conn.execute(
        "SELECT s.queue, s.key, s.job_id, j.state, j.version, j.part"
        " FROM slots s LEFT JOIN jobs j ON j.id = s.job_id"
        " WHERE s.queue = ANY(%s) AND (j.id IS NULL OR j.state <> 'leased')",
        (list(queues),),
    ):
        out.append(_held_by(queue, key, job_id, state, version, part, f"concurrency slot {key!r}"))
    return out


def stray_locks(conn: psycopg.Connection[Any], queues: Sequence[str], now: float) -> list[Judged]:
    """Unique locks in force (not lapsed, and not a throttle's hold after
    its job succeeded) whose holder is gone or no longer pending."""
    out = []
    for queue, key, holder, state, version, part in conn.execute(
        "SELECT u.queue, u.key, u.holder, j.state, j.version, j.part"
        " FROM unique_locks u LEFT JOIN jobs j ON j.id = u.holder"
        " WHERE u.queue = ANY(%s) AND (u.expires_at IS NULL OR u.expires_at > %s)"
        " AND NOT (u.mode = 'throttle' AND u.expires_at IS NOT NULL)"
        " AND (j.id IS NULL OR j.state <> ALL(%s))",
        (list(queues), now, _PENDING),
    ):
        out.append(_held_by(queue, key, holder, state, version, part, f"unique lock {key!r}"))
    return out


def _held_by(
    queue: str,
    key: str,
    job_id: str,
    state: str | None,
    version: int | None,
    part: int | None,
    what: str,
) -> Judged:
    if state is None:
        finding = Finding(
            problem=Problem.NO_RECORD,
            job_id=job_id,
            queue=queue,
            placement=NO_PLACEMENT,
            detail=f"{what} held by a job that is gone",
            indexes=(what,),
        )
    else:
        assert version is not None and part is not None
        finding = Finding(
            problem=Problem.WRONG_INDEX,
            job_id=job_id,
            queue=queue,
            placement=topology_placement(version, part),
            detail=f"{state} record holds {what}",
            state=state,
            indexes=(INDEX_OF[JobState(state)], what),
        )
    return Judged(finding, key=key)
