"""The judgement of the SQL stores' checkers (PostgreSQL and SQLite), pure:
what is wrong with one job row, and the finding for a concurrency slot or
unique lock whose holder does not stand as it says. Reading the rows is
each backend's (``postgres/_judge``, ``sqlite/_judge``); nothing here
touches a database.

Each finding carries what a repair re-checks before it acts: for a job,
the version of the row it was judged on (``row_version``: PostgreSQL's
``xmin``, SQLite's digest of the row; any write since makes another); for
a slot or lock, its key (the repair's own statement re-reads the holder).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs

from ..records._jobs import Job, JobState
from ..records._placement import NO_PLACEMENT
from ..records._workflow import holds_failure_handling
from ._roles import DAMAGED_RECORD, Finding, Problem
from ._topology_placement import topology_placement

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


@attrs.frozen
class Judged:
    """A finding, and what its repair needs: the row version judged
    (``row_version``, "" for a slot or lock finding) and, for a slot or
    lock, its key."""

    finding: Finding
    row_version: str = ""
    key: str = ""


@attrs.frozen
class Row:
    """One job row as a checker's walk reads it: its version (see the
    module docstring), the job, and the flags no Job field holds."""

    row_version: str
    job: Job
    discarded: bool
    continuation: bool
    abort_reason: str


def judge_row(row: Row, now: float, grace: float) -> Judged | None:
    """What is wrong with one job row at ``now`` (a lease counts as lost
    ``grace`` seconds after it expired), or None."""
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
        return Judged(attrs.evolve(finding, detail=damage), row.row_version)
    if row.continuation and not _outboxed(job):
        what = (
            f"{job.state} record" if job.then is not None else f"{job.state} record without a step"
        )
        held = (*finding.indexes, "outbox")
        detail = f"{what} in the workflow outbox"
        return Judged(
            attrs.evolve(finding, problem=Problem.WRONG_INDEX, detail=detail, indexes=held),
            row.row_version,
        )
    if row.discarded and job.state is not JobState.DEAD:
        detail = f"{job.state} record marked discarded: listed and counted nowhere"
        return Judged(
            attrs.evolve(finding, problem=Problem.NO_INDEX, detail=detail), row.row_version
        )
    if job.state is JobState.LEASED and job.lease_expires_at is not None:
        late = now - job.lease_expires_at
        if late >= grace:
            owner = job.lease_owner or "a worker"
            detail = f"lease of {owner} expired {late:.0f}s ago and was not recovered"
            return Judged(
                attrs.evolve(finding, problem=Problem.EXPIRED_LEASE, detail=detail),
                row.row_version,
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


def held_by(
    queue: str,
    key: str,
    job_id: str,
    state: str | None,
    version: int | None,
    part: int | None,
    what: str,
) -> Judged:
    """The finding for ``what`` (a concurrency slot or unique lock of
    ``queue`` and ``key``) held by ``job_id``, a job that is gone (``state``
    None: NO_RECORD) or whose ``state`` (with its routing ``version`` and
    ``part``) does not hold it (WRONG_INDEX)."""
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


def is_slot(finding: Finding) -> bool:
    """Whether a holder finding (see :func:`held_by`) is a concurrency
    slot's (else a unique lock's)."""
    return finding.indexes[-1].startswith("concurrency slot")


#: Runs one read of a check on the backend's connection (the backend's
#: driver: a sqlite3 or psycopg connection) and returns its result.
Reader = Callable[[Callable[[Any], Any]], Awaitable[Any]]


@attrs.frozen
class Walk:
    """How a SQL store's check reads: ``rows(conn, queue, after, batch)``
    gives the next rows of a queue after job ID ``after`` (in ID order);
    ``strays(conn, queues, now)`` the judged slots and unique locks held by
    no live job, and how many such entries it looked at."""

    rows: Callable[[Any, str, str, int], list[Row]]
    strays: Callable[[Any, list[str], float], tuple[list[Judged], int]]


async def check_rows(
    read: Reader,
    walk: Walk,
    names: list[str],
    *,
    now: float,
    batch: int,
    lease_grace: float,
) -> tuple[list[Judged], int, int]:
    """Walk every row of ``names`` (``batch`` at a time, each read one
    snapshot) and the stray slots and locks, judging each as
    :func:`judge_row` does: the judged, the rows walked and the index
    entries looked at (each row is in the one index its state names)."""
    judged: list[Judged] = []
    records = entries = 0
    for queue in names:
        after = ""
        while True:
            rows: list[Row] = await read(partial(_rows_of, walk, queue, after, batch))
            records += len(rows)
            entries += len(rows)
            judged.extend(j for j in (judge_row(row, now, lease_grace) for row in rows) if j)
            if len(rows) < batch:
                break
            after = rows[-1].job.id
    strays, held = await read(partial(_strays_of, walk, names, now))
    return judged + strays, records, entries + held


def _rows_of(walk: Walk, queue: str, after: str, batch: int, conn: Any) -> list[Row]:
    return walk.rows(conn, queue, after, batch)


def _strays_of(walk: Walk, names: list[str], now: float, conn: Any) -> tuple[list[Judged], int]:
    return walk.strays(conn, names, now)


def _outboxed(job: Job) -> bool:
    """Whether ``job`` may be in the workflow outbox: succeeded with a
    continuation, or dead with one that holds failure handling."""
    if job.state is JobState.SUCCEEDED:
        return job.then is not None
    return job.state is JobState.DEAD and holds_failure_handling(job.then)
