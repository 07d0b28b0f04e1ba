"""The SQLite store's checker (a part of SqliteStore: CheckRole).

What cannot happen here, and so is never reported: a job in two indexes
or in the wrong one (a row's indexes are partial indexes over its own
``state`` column, kept by SQLite), an index entry without its row
(NO_RECORD for a job), a half-written record (a row is written whole, in
one transaction), a field of the wrong type, a state no version knows or a
required field missing (``STRICT`` tables, ``NOT NULL`` and ``CHECK``-ed
columns), and a record of a newer format (the schema version is checked
when the file is opened). Nothing is ever quarantined.

What can still be wrong is judged as on PostgreSQL (``store._sql_judge``,
on rows read by ``_judge``):

* DAMAGED: a ``control`` or ``headers`` text that does not decode, or a
  leased row without its lease token or expiry. Repair: dead-lettered with
  ``last_error`` DAMAGED_RECORD + the detail, its lease cleared, its unique
  key and slots given back.
* EXPIRED_LEASE: a lease expired ``lease_grace`` or more seconds ago and
  not recovered. Repair: taken back as recovery does (ready, due now; dead
  when its attempts are used up; aborted when an abort was asked), its
  slots given back (and its unique key, when it ends).
* WRONG_INDEX: a job in the workflow outbox (``continuation``) that is
  not a succeeded workflow step; a concurrency slot or a unique lock in
  force held by a job that is not pending (not leased, for a slot).
  Repair: the flag cleared, the slot or lock removed.
* NO_INDEX: a row marked ``discarded`` that is not dead, so listed and
  counted nowhere. Repair: the mark cleared.
* NO_RECORD: a slot or a unique lock in force held by a job that is gone.
  Repair: removed.

The walk reads ``batch`` rows per read transaction (a snapshot; a reader
never blocks writers in WAL mode). Each repair is one write transaction,
which holds the file's write lock from its BEGIN: it re-reads the row and
acts only if it is still the version judged (the digest of its columns),
or, for a slot or lock, only if its holder still is not as it should be;
otherwise SKIPPED.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from functools import partial

import attrs

from .._checking import asked_queues
from .._roles import (
    DAMAGED_RECORD,
    LEASE_GRACE,
    CheckReport,
    CheckRole,
    Finding,
    Problem,
    Repair,
    finding_order,
)
from .._sql_judge import Judged, Row, Walk, check_rows, is_slot
from . import _judge
from ._base import SqlitePart
from ._inspect import known_queues
from ._operate import release_unique
from ._topology import partition_counts

_SKIPPED = "the job changed since it was inspected: left alone (check again)"


def _start(
    conn: sqlite3.Connection, names: list[str] | None, now: float
) -> tuple[float, list[str], dict[str, int]]:
    queues = known_queues(conn) if names is None else names
    return now, queues, partition_counts(conn, queues)


def _strays(conn: sqlite3.Connection, queues: list[str], now: float) -> tuple[list[Judged], int]:
    """Slot and lock findings, and how many slot and lock rows were seen."""
    found = _judge.stray_slots(conn, queues) + _judge.stray_locks(conn, queues, now)
    return found, _judge.held_rows(conn, queues)


#: How this store's check reads its rows and stray entries.
_WALK = Walk(_judge.read_rows, _strays)


# -- repairs: each one write transaction, acting only on what was judged ---------------
def _repair(conn: sqlite3.Connection, judged: Judged, clock: Callable[[], float]) -> Finding:
    finding = judged.finding
    now = clock()  # read with the write lock held
    if judged.key:
        return _repair_holder(conn, judged)
    row = _judge.read_row(conn, finding.job_id)
    if row is None or row.row_version != judged.row_version:
        return _skipped(finding)
    if finding.problem is Problem.DAMAGED:
        return _dead_letter(conn, finding, now)
    if finding.problem is Problem.EXPIRED_LEASE:
        return _recover(conn, finding, row, now)
    if finding.problem is Problem.WRONG_INDEX:
        conn.execute("UPDATE jobs SET continuation = 0 WHERE id = ?", (finding.job_id,))
        return _done(finding, Repair.REINDEXED, "taken out of the workflow outbox")
    conn.execute("UPDATE jobs SET discarded = 0 WHERE id = ?", (finding.job_id,))
    return _done(finding, Repair.REINDEXED, "the discarded mark cleared: listed again")


def _skipped(finding: Finding) -> Finding:
    return attrs.evolve(finding, repair=Repair.SKIPPED, repair_detail=_SKIPPED)


def _done(finding: Finding, repair: Repair, detail: str) -> Finding:
    return attrs.evolve(finding, repair=repair, repair_detail=detail)


def _release(conn: sqlite3.Connection, job_id: str, queue: str, key: str | None) -> None:
    """Give back the slots and the unique key (if any) ``job_id`` holds."""
    conn.execute("DELETE FROM slots WHERE job_id = ?", (job_id,))
    release_unique(conn, queue, key, job_id)


def _dead_letter(conn: sqlite3.Connection, finding: Finding, now: float) -> Finding:
    error = DAMAGED_RECORD + finding.detail
    queue, key = conn.execute(
        "UPDATE jobs SET state = 'dead', last_error = ?, finished_at = ?,"
        " lease_token = '', lease_owner = '', lease_expires_at = NULL, continuation = 0"
        " WHERE id = ? RETURNING queue, unique_key",
        (error, now, finding.job_id),
    ).fetchone()
    _release(conn, finding.job_id, queue, key)
    return _done(finding, Repair.DEAD_LETTERED, error)


def _recover(conn: sqlite3.Connection, finding: Finding, row: Row, now: float) -> Finding:
    """An expired lease taken back as recovery takes it: aborted when an
    abort was asked, dead when its attempts are used up, else ready (due
    now); its lease cleared and its slots given back."""
    job = row.job
    finished: float | None
    if row.abort_reason:
        state, error, finished, run_at = "aborted", row.abort_reason, now, job.run_at
    elif job.attempts > job.max_retries:
        state, finished, run_at = "dead", now, job.run_at
        error = (
            f"lease expired on attempt {job.attempts} of {job.max_retries + 1} "
            "(worker lost); retries exhausted"
        )
    else:
        state, error, finished, run_at = "ready", job.last_error, job.finished_at, now
    queue, key = conn.execute(
        "UPDATE jobs SET state = ?, last_error = ?, finished_at = ?, run_at = ?,"
        " lease_token = '', lease_owner = '', lease_expires_at = NULL"
        " WHERE id = ? RETURNING queue, unique_key",
        (state, error, finished, run_at, finding.job_id),
    ).fetchone()
    if state == "ready":
        conn.execute("DELETE FROM slots WHERE job_id = ?", (finding.job_id,))
        return _done(finding, Repair.RECOVERED, "ready again (due now)")
    _release(conn, finding.job_id, queue, key)
    if state == "aborted":
        return _done(finding, Repair.RECOVERED, f"aborted (an abort was asked): {error}")
    return _done(finding, Repair.DEAD_LETTERED, error)


def _repair_holder(conn: sqlite3.Connection, judged: Judged) -> Finding:
    """Remove a slot or lock whose holder still is not as it must be."""
    finding = judged.finding
    if is_slot(finding):
        gone = conn.execute(
            "DELETE FROM slots WHERE queue = ? AND key = ? AND job_id = ? AND NOT EXISTS"
            " (SELECT 1 FROM jobs WHERE id = ? AND state = 'leased')",
            (finding.queue, judged.key, finding.job_id, finding.job_id),
        ).rowcount
        if not gone:
            return _skipped(finding)
        return _done(finding, Repair.REINDEXED, "the slot given back")
    gone = conn.execute(
        "DELETE FROM unique_locks WHERE queue = ? AND key = ? AND holder = ?"
        " AND NOT (mode = 'throttle' AND expires_at IS NOT NULL) AND NOT EXISTS"
        f" (SELECT 1 FROM jobs WHERE id = ? AND state IN ({_judge.PENDING_SQL}))",
        (finding.queue, judged.key, finding.job_id, finding.job_id),
    ).rowcount
    if not gone:
        return _skipped(finding)
    return _done(finding, Repair.REINDEXED, "the unique key given back")


class CheckPart(SqlitePart, CheckRole):
    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """See :meth:`CheckRole.check` and the module docstring. Never
        reports NO_RECORD for a job, TWO_INDEXES, NEWER_FORMAT or
        QUARANTINED. Raises ValueError for ``batch`` < 1 or a negative
        ``lease_grace``, StoreError when the file cannot be read or written
        (repairs already applied stay applied)."""
        asked = asked_queues(queues, batch=batch, lease_grace=lease_grace)
        db = self._db
        now, names, partitions = await db.read(
            lambda conn: _start(conn, asked, db.now()), what="check"
        )
        judged, records, entries = await check_rows(
            lambda work: db.read(work, what="check"),
            _WALK,
            names,
            now=now,
            batch=batch,
            lease_grace=lease_grace,
        )
        findings = [j.finding for j in judged]
        if repair:
            findings = [
                await db.write(partial(_repair, judged=j, clock=db.now), what="check repair")
                for j in judged
            ]
        return CheckReport(
            queues=tuple(names),
            repair=repair,
            lease_grace=lease_grace,
            now=now,
            findings=tuple(sorted(findings, key=finding_order)),
            partitions=sum(partitions.get(q, 0) for q in names),
            records=records,
            index_entries=entries,
        )
