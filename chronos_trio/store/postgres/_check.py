"""The PostgreSQL store's checker (a part of PostgresStore: CheckRole).

What cannot happen here, and so is never reported: a job in two indexes
or in the wrong one (a row's indexes are partial indexes over its own
``state`` column, kept by the server), an index entry without its row
(NO_RECORD for a job), a half-written record, a field of the wrong type, a
state no version knows or a required field missing (typed, ``NOT NULL``
and ``CHECK``-ed columns; a row is written whole by one statement), and a
record of a newer format (the schema version is checked before the first
operation). Nothing is ever quarantined.

What can still be wrong, and is judged (``store._sql_judge``, on rows read by
``_judge``):

* DAMAGED: a ``control`` or ``headers`` text that does not decode, or a
  leased row without its lease token or expiry (columns a ``CHECK``
  constraint does not tie to the state). Repair: dead-lettered with
  ``last_error`` DAMAGED_RECORD + the detail, its lease cleared, its unique
  key and slots given back.
* EXPIRED_LEASE: a lease expired ``lease_grace`` or more seconds ago and
  not recovered. Repair: taken back as recovery does (ready, due now; dead
  when its attempts are used up; aborted when an abort was asked), its
  slots given back.
* WRONG_INDEX: a job in the workflow outbox (``continuation``) that is
  not a succeeded workflow step; a concurrency slot or a unique lock in
  force held by a job that is not pending (not leased, for a slot).
  Repair: the flag cleared, the slot or lock removed.
* NO_INDEX: a row marked ``discarded`` that is not dead, so listed and
  counted nowhere. Repair: the mark cleared.
* NO_RECORD: a slot or a unique lock in force held by a job that is gone.
  Repair: removed.

The walk reads ``batch`` rows per statement, each its own transaction, so
it never holds locks or a snapshot for long; each repair is one
transaction that acts only if the row is still the version judged
(``xmin``), or for a slot or lock, only if its holder still is not as it
should be: otherwise SKIPPED.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import attrs
import psycopg

from ...records._jobs import PENDING_STATES
from .. import _checking
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
from .._sql_judge import Judged, Walk, check_rows, is_slot
from . import _judge, _topology
from ._base import PostgresPart, now_of
from ._inspect import known_queues
from ._operate import release_unique
from ._wake import wake_queues, wake_waiters

_SKIPPED = "the job changed since it was inspected: left alone (check again)"
_PENDING = [state.value for state in PENDING_STATES]


def _start(
    conn: psycopg.Connection[Any], names: list[str] | None
) -> tuple[float, list[str], dict[str, int]]:
    now = now_of(conn)
    queues = known_queues(conn) if names is None else names
    return now, queues, _topology.partition_counts(conn, queues)


def _strays(
    conn: psycopg.Connection[Any], queues: list[str], now: float
) -> tuple[list[Judged], int]:
    """Slot and lock findings, and how many slot and lock rows were seen."""
    found = _judge.stray_slots(conn, queues) + _judge.stray_locks(conn, queues, now)
    row = conn.execute(
        "SELECT (SELECT count(*) FROM slots WHERE queue = ANY(%s))"
        " + (SELECT count(*) FROM unique_locks WHERE queue = ANY(%s))",
        (queues, queues),
    ).fetchone()
    return found, int(row[0]) if row else 0


#: How this store's check reads its rows and stray entries.
_WALK = Walk(_judge.read_rows, _strays)


# -- repairs: each one transaction, acting only on what was judged --------------------
def _repair(conn: psycopg.Connection[Any], schema: str, judged: Judged) -> Finding:
    finding = judged.finding
    if judged.key:
        return _repair_holder(conn, judged)
    if finding.problem is Problem.DAMAGED:
        return _dead_letter(conn, schema, judged)
    if finding.problem is Problem.EXPIRED_LEASE:
        return _recover(conn, schema, judged)
    if finding.problem is Problem.WRONG_INDEX:
        done = conn.execute(
            "UPDATE jobs SET continuation = false WHERE id = %s AND xmin = %s::xid",
            (finding.job_id, judged.row_version),
        ).rowcount
        return _done(finding, done, Repair.REINDEXED, "taken out of the workflow outbox")
    done = conn.execute(
        "UPDATE jobs SET discarded = false WHERE id = %s AND xmin = %s::xid",
        (finding.job_id, judged.row_version),
    ).rowcount
    return _done(finding, done, Repair.REINDEXED, "the discarded mark cleared: listed again")


def _done(finding: Finding, applied: int, repair: Repair, detail: str) -> Finding:
    if not applied:
        return attrs.evolve(finding, repair=Repair.SKIPPED, repair_detail=_SKIPPED)
    return attrs.evolve(finding, repair=repair, repair_detail=detail)


def _dead_letter(conn: psycopg.Connection[Any], schema: str, judged: Judged) -> Finding:
    finding = judged.finding
    error = DAMAGED_RECORD + finding.detail
    row = conn.execute(
        "UPDATE jobs SET state = 'dead', last_error = %s, finished_at = chronos_now(),"
        " lease_token = '', lease_owner = '', lease_expires_at = NULL, continuation = false"
        " WHERE id = %s AND xmin = %s::xid RETURNING queue, unique_key",
        (error, finding.job_id, judged.row_version),
    ).fetchone()
    if row is None:
        return _done(finding, 0, Repair.DEAD_LETTERED, "")
    release_unique(conn, row[0], row[1], finding.job_id)
    conn.execute("DELETE FROM slots WHERE job_id = %s", (finding.job_id,))
    wake_waiters(conn, schema, [finding.job_id])
    return _done(finding, 1, Repair.DEAD_LETTERED, error)


#: An expired lease taken back as recovery takes it (the abort first, then
#: the attempts), its lease cleared; the state it ends in and its text.
_RECOVER = """
UPDATE jobs SET
    state = CASE WHEN abort_reason <> '' THEN 'aborted'
                 WHEN attempts > max_retries THEN 'dead' ELSE 'ready' END,
    last_error = CASE WHEN abort_reason <> '' THEN abort_reason
                      WHEN attempts > max_retries THEN
                          'lease expired on attempt ' || attempts || ' of ' || (max_retries + 1)
                          || ' (worker lost); retries exhausted'
                      ELSE last_error END,
    finished_at = CASE WHEN abort_reason <> '' OR attempts > max_retries
                       THEN chronos_now() ELSE finished_at END,
    run_at = CASE WHEN abort_reason = '' AND attempts <= max_retries
                  THEN chronos_now() ELSE run_at END,
    lease_token = '', lease_owner = '', lease_expires_at = NULL
WHERE id = %s AND xmin = %s::xid AND state = 'leased'
RETURNING state, queue, unique_key, last_error
"""


def _recover(conn: psycopg.Connection[Any], schema: str, judged: Judged) -> Finding:
    finding = judged.finding
    row = conn.execute(_RECOVER, (finding.job_id, judged.row_version)).fetchone()
    if row is None:
        return _done(finding, 0, Repair.RECOVERED, "")
    state, queue, key, error = row
    conn.execute("DELETE FROM slots WHERE job_id = %s", (finding.job_id,))
    if state == "ready":
        wake_queues(conn, schema, [queue])
        return _done(finding, 1, Repair.RECOVERED, "ready again (due now)")
    release_unique(conn, queue, key, finding.job_id)
    wake_waiters(conn, schema, [finding.job_id])
    if state == "aborted":
        return _done(finding, 1, Repair.RECOVERED, f"aborted (an abort was asked): {error}")
    return _done(finding, 1, Repair.DEAD_LETTERED, error)


def _repair_holder(conn: psycopg.Connection[Any], judged: Judged) -> Finding:
    """Remove a slot or lock whose holder still is not as it must be."""
    finding = judged.finding
    if is_slot(finding):
        done = conn.execute(
            "DELETE FROM slots WHERE queue = %s AND key = %s AND job_id = %s AND NOT EXISTS"
            " (SELECT 1 FROM jobs WHERE id = %s AND state = 'leased')",
            (finding.queue, judged.key, finding.job_id, finding.job_id),
        ).rowcount
        return _done(finding, done, Repair.REINDEXED, "the slot given back")
    done = conn.execute(
        "DELETE FROM unique_locks WHERE queue = %s AND key = %s AND holder = %s"
        " AND NOT (mode = 'throttle' AND expires_at IS NOT NULL) AND NOT EXISTS"
        " (SELECT 1 FROM jobs WHERE id = %s AND state = ANY(%s))",
        (finding.queue, judged.key, finding.job_id, finding.job_id, _PENDING),
    ).rowcount
    return _done(finding, done, Repair.REINDEXED, "the unique key given back")


class CheckPart(PostgresPart, CheckRole):
    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """See :meth:`CheckRole.check` and the module docstring. Never
        reports NO_RECORD for a job, NEWER_FORMAT or QUARANTINED."""
        asked = _checking.asked_queues(queues, batch=batch, lease_grace=lease_grace)
        db = self._db
        now, names, partitions = await db.run(lambda conn: _start(conn, asked), what="check")
        judged, records, entries = await check_rows(
            lambda work: db.run(work, what="check"),
            _WALK,
            names,
            now=now,
            batch=batch,
            lease_grace=lease_grace,
        )
        findings = [j.finding for j in judged]
        if repair:
            schema = db.schema
            findings = [
                await db.run(partial(_repair, schema=schema, judged=j), what="check repair")
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
