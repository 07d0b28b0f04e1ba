"""Renew, settle and recovery on PostgreSQL, each one transaction per batch.

* :func:`renew`: one statement over arrays (``unnest``), fenced by token and
  an unexpired lease; it keeps a unique lock that lapses at least as long
  as the lease, and reports the leases an abort was asked for.
* :func:`settle`: one statement locks the batch's rows (``FOR UPDATE``) and
  reads them; the transitions of the MemoryStore (one per SettleKind) are
  decided here, fenced by token and an unexpired lease; then one pipeline
  writes them all: the rows (finished jobs nothing keeps deleted), unique
  locks, concurrency slots (their queues woken), rate limits held back, the
  workflow outbox, result waiters (woken), and a wake-up of each queue that
  got a job back to ready or retry_wait (waiters there judge due times).
* :func:`recover`: expired leases per queue, earliest expiry first
  (``FOR UPDATE SKIP LOCKED``), back to ready, dead or aborted.

Result waiters: a finished job nothing keeps is deleted unless a live
waiter is registered (``result_waiters``), when it stays readable
``WAITED_KEEP`` seconds, as on the MemoryStore. The settle decides that in
a statement that runs after its rows are locked, and a waiter registers
under a share lock of the row, so the settle sees every waiter that read
the job before it finished.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import psycopg

from ...records import _jobs
from ...records._jobs import Job, JobState, LeaseRef
from ...records._workflow import WORKFLOW_KEEP
from .._admission import tolerance
from .._roles import (
    NOTHING_SET_ASIDE,
    RecoverResult,
    RenewResult,
    SettleKind,
    Settlement,
    SettleResult,
)
from .._rows import job_from_row
from .._settling import WAITED_KEEP, SettleTally, settled_kind, unclaimed
from ._claim import J_COLUMNS
from ._wake import DONE, OUTBOX, READY

_RENEW = """
WITH refs AS (SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[]) AS r (id, token)),
t AS (SELECT chronos_now() AS now),
renewed AS (
    UPDATE jobs j SET lease_expires_at = t.now + %(duration)s
    FROM refs, t
    WHERE j.id = refs.id AND j.state = 'leased' AND j.lease_token = refs.token
      AND refs.token <> '' AND j.lease_expires_at > t.now
    RETURNING j.id, j.lease_token, j.abort_reason <> '' AS aborted, j.queue, j.unique_key,
              j.lease_expires_at
),
locks AS (
    UPDATE unique_locks l SET expires_at = greatest(l.expires_at, r.lease_expires_at)
    FROM renewed r
    WHERE r.unique_key IS NOT NULL AND l.queue = r.queue AND l.key = r.unique_key
      AND l.holder = r.id AND l.expires_at IS NOT NULL
)
SELECT id, lease_token, aborted FROM renewed
"""

_LOCK = f"""
SELECT (SELECT chronos_now()), {J_COLUMNS}, j.abort_reason, j.unique_key, j.unique_spec
FROM jobs j WHERE j.id = ANY (%s::text[])
FOR UPDATE
"""

_LOCK_EXPIRED = f"""
SELECT (SELECT chronos_now()), {J_COLUMNS}, j.abort_reason, j.unique_key, j.unique_spec
FROM jobs j
WHERE j.queue = %(queue)s AND j.state = 'leased' AND j.lease_expires_at <= %(now)s
ORDER BY j.lease_expires_at, j.id
LIMIT %(n)s
FOR UPDATE SKIP LOCKED
"""

_APPLY = """
WITH w AS (
    SELECT * FROM unnest(
        %(ids)s::text[], %(states)s::text[], %(run_ats)s::float8[], %(attempts)s::integer[],
        %(errors)s::text[], %(finished)s::float8[], %(results)s::bytea[],
        %(result_until)s::float8[], %(unclaimed)s::float8[], %(retain)s::float8[],
        %(retained)s::boolean[], %(discarded)s::boolean[], %(continuation)s::boolean[],
        %(drop)s::boolean[])
    AS w (id, state, run_at, attempts, last_error, finished_at, result, result_until,
          unclaimed_since, retain_until, retained, discarded, continuation, drop_unwaited)
),
waited AS (
    SELECT DISTINCT r.job_id FROM result_waiters r JOIN w ON r.job_id = w.id
    WHERE r.expires_at > %(now)s
),
updated AS (
    UPDATE jobs j SET state = w.state, run_at = w.run_at, attempts = w.attempts,
        last_error = w.last_error, finished_at = w.finished_at, result = w.result,
        result_until = w.result_until, unclaimed_since = w.unclaimed_since,
        retain_until = w.retain_until, retained = w.retained, discarded = w.discarded,
        continuation = w.continuation,
        lease_token = '', lease_owner = '', lease_expires_at = NULL
    FROM w
    WHERE j.id = w.id AND (NOT w.drop_unwaited OR w.id IN (SELECT job_id FROM waited))
    RETURNING j.id, j.state
),
dropped AS (
    DELETE FROM jobs j USING w
    WHERE j.id = w.id AND w.drop_unwaited AND w.id NOT IN (SELECT job_id FROM waited)
),
finished AS (
    SELECT u.id FROM updated u JOIN waited ON waited.job_id = u.id
    WHERE u.state IN ('succeeded', 'dead', 'aborted')
),
unwaited AS (
    DELETE FROM result_waiters r USING finished f WHERE r.job_id = f.id
)
SELECT pg_notify(chronos_channel(), %(done)s || id) FROM finished
"""

_UNIQUE = """
WITH u AS (
    SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[], %(holders)s::text[],
                         %(ttls)s::float8[], %(succeeded)s::boolean[])
    AS u (queue, key, holder, ttl, succeeded)
),
throttled AS (
    UPDATE unique_locks l SET expires_at = %(now)s + u.ttl
    FROM u
    WHERE l.queue = u.queue AND l.key = u.key AND l.holder = u.holder
      AND u.succeeded AND l.mode = 'throttle' AND u.ttl IS NOT NULL
)
DELETE FROM unique_locks l USING u
WHERE l.queue = u.queue AND l.key = u.key AND l.holder = u.holder
  AND NOT (u.succeeded AND l.mode = 'throttle' AND u.ttl IS NOT NULL)
"""

_FREE_SLOTS = """
WITH freed AS (DELETE FROM slots s WHERE s.job_id = ANY (%(ids)s::text[]) RETURNING s.queue)
SELECT pg_notify(chronos_channel(), %(ready)s || queue) FROM (SELECT DISTINCT queue FROM freed) AS q
"""

_HOLD_BACK = """
INSERT INTO rate_buckets AS b (queue, key, tat)
SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[], %(tats)s::float8[])
ON CONFLICT (queue, key) DO UPDATE SET tat = greatest(b.tat, EXCLUDED.tat)
"""

_NOTIFY = """
SELECT pg_notify(chronos_channel(), p) FROM unnest(%s::text[]) AS p
"""


@attrs.define
class _Locked:
    """A row a settle or recovery locked: the job and what only the store reads."""

    job: Job
    abort: str
    unique_key: str | None
    unique_ttl: float | None


def _locked(row: Sequence[Any]) -> _Locked:
    job = job_from_row(row[1:-3])
    abort, unique_key, spec = row[-3:]
    ttl = None
    if spec:
        try:
            raw = json.loads(spec).get("ttl")
            ttl = None if raw is None else float(raw)
        except (ValueError, TypeError, AttributeError):
            ttl = None
    return _Locked(job, abort, unique_key, ttl)


@attrs.define
class _Writes:
    """What one settle or recovery writes, column by column."""

    now: float
    cols: dict[str, list[Any]] = attrs.field(
        factory=lambda: {
            name: []
            for name in (
                "ids",
                "states",
                "run_ats",
                "attempts",
                "errors",
                "finished",
                "results",
                "result_until",
                "unclaimed",
                "retain",
                "retained",
                "discarded",
                "continuation",
                "drop",
            )
        }
    )
    unique: dict[str, list[Any]] = attrs.field(
        factory=lambda: {n: [] for n in ("queues", "keys", "holders", "ttls", "succeeded")}
    )
    slots: list[str] = attrs.field(factory=list)
    hold_back: dict[tuple[str, str], float] = attrs.field(factory=dict)
    wake: set[str] = attrs.field(factory=set)
    outbox: bool = False

    def put(
        self,
        job: Job,
        *,
        retain_until: float | None = None,
        retained: bool = False,
        discarded: bool = False,
        continuation: bool = False,
        drop_unwaited: bool = False,
    ) -> None:
        c = self.cols
        c["ids"].append(job.id)
        c["states"].append(job.state.value)
        c["run_ats"].append(job.run_at)
        c["attempts"].append(job.attempts)
        c["errors"].append(job.last_error)
        c["finished"].append(job.finished_at)
        c["results"].append(job.result)
        c["result_until"].append(job.result_until)
        c["unclaimed"].append(job.unclaimed_since)
        c["retain"].append(retain_until)
        c["retained"].append(retained)
        c["discarded"].append(discarded)
        c["continuation"].append(continuation)
        c["drop"].append(drop_unwaited)
        if job.state in (JobState.READY, JobState.RETRY_WAIT):
            self.wake.add(job.queue)

    def unique_done(self, locked: _Locked, *, succeeded: bool) -> None:
        """The job gives its unique key back (a throttle's success keeps it
        its ttl more)."""
        if locked.unique_key is None:
            return
        u = self.unique
        u["queues"].append(locked.job.queue)
        u["keys"].append(locked.unique_key)
        u["holders"].append(locked.job.id)
        u["ttls"].append(locked.unique_ttl)
        u["succeeded"].append(succeeded)

    def write(self, conn: psycopg.Connection[Any]) -> None:
        """Everything, in one pipeline (one round trip)."""
        with conn.pipeline():
            if self.cols["ids"]:
                conn.execute(_APPLY, {**self.cols, "now": self.now, "done": DONE})
            if self.unique["holders"]:
                conn.execute(_UNIQUE, {**self.unique, "now": self.now})
            if self.slots:
                conn.execute(_FREE_SLOTS, {"ids": self.slots, "ready": READY})
            if self.hold_back:
                conn.execute(
                    _HOLD_BACK,
                    {
                        "queues": [q for q, _ in self.hold_back],
                        "keys": [k for _, k in self.hold_back],
                        "tats": list(self.hold_back.values()),
                    },
                )
            payloads = sorted(READY + q for q in self.wake)
            if self.outbox:
                payloads.append(OUTBOX)
            if payloads:
                conn.execute(_NOTIFY, (payloads,))


# -- renew ----------------------------------------------------------------------------
def renew(
    conn: psycopg.Connection[Any], leases: Sequence[LeaseRef], lease_duration: float
) -> RenewResult:
    pairs = list(dict.fromkeys((ref.job_id, ref.token) for ref in leases))
    rows = conn.execute(
        _RENEW,
        {
            "ids": [i for i, _ in pairs],
            "tokens": [t for _, t in pairs],
            "duration": lease_duration,
        },
    ).fetchall()
    renewed = {(job_id, token): bool(aborted) for job_id, token, aborted in rows}
    results = []
    flagged = []
    for i, ref in enumerate(leases):
        aborted = renewed.get((ref.job_id, ref.token))
        results.append(aborted is not None)
        if aborted:
            flagged.append(i)
    return RenewResult(tuple(results), NOTHING_SET_ASIDE, frozenset(flagged))


# -- settle ---------------------------------------------------------------------------
def _held(job: Job, token: str, now: float) -> bool:
    return (
        job.state is JobState.LEASED
        and bool(token)
        and job.lease_token == token
        and job.lease_expires_at is not None
        and job.lease_expires_at > now
    )


def settle(
    conn: psycopg.Connection[Any], settlements: Sequence[Settlement]
) -> tuple[SettleResult, bool]:
    """The settle's result, and whether it filled the workflow outbox."""
    ids = sorted({s.lease.job_id for s in settlements})
    rows = conn.execute(_LOCK, (ids,)).fetchall()
    if not rows:
        return SettleResult(
            (False,) * len(settlements), NOTHING_SET_ASIDE, frozenset(), frozenset()
        ), False
    now = float(rows[0][0])
    locked: dict[str, _Locked | None] = {row[1]: _locked(row) for row in rows}
    writes = _Writes(now)
    tally = SettleTally()
    for s in settlements:
        entry = locked.get(s.lease.job_id)
        if entry is None or not _held(entry.job, s.lease.token, now):
            tally.refused()
            continue
        locked[s.lease.job_id] = None  # of two settlements of one lease, the first applies
        job = entry.job
        if job.control is not None:
            writes.slots.append(job.id)
        kind = settled_kind(s, bool(entry.abort))
        cleared = attrs.evolve(job, lease_token="", lease_owner="", lease_expires_at=None)
        tally.applied(kind, _TRANSITIONS[kind](writes, entry, cleared, s, now))
    writes.write(conn)
    return tally.result(), writes.outbox


def _succeeded(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    """leased --ok--> succeeded, kept for the longest of ``retain_for``, its
    result's ttl and a workflow's keep; otherwise dropped, unless a result
    waiter reads it (kept WAITED_KEEP then). A throttle keeps its key its
    ttl more, any other unique key is given back."""
    w.unique_done(locked, succeeded=True)
    keeps_result = s.result is not None and s.result_ttl > 0
    keep = max(s.retain_for, s.result_ttl if keeps_result else 0.0)
    continuation = job.then is not None
    if continuation:
        keep = max(keep, WORKFLOW_KEEP)
        w.outbox = True
    done = attrs.evolve(
        job,
        state=JobState.SUCCEEDED,
        finished_at=now,
        result=s.result if keeps_result else None,
        result_until=now + s.result_ttl if keeps_result else None,
    )
    if keep <= 0:
        w.put(done, retain_until=now + WAITED_KEEP, drop_unwaited=True)
    else:
        w.put(
            done,
            retain_until=now + keep,
            retained=s.retain_for > 0 or continuation,
            continuation=continuation,
        )
    return JobState.SUCCEEDED


def _retry(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    w.put(
        attrs.evolve(
            job,
            state=JobState.RETRY_WAIT,
            run_at=now + max(0.0, s.retry_delay),
            last_error=s.error,
            unclaimed_since=None,
        )
    )
    return JobState.RETRY_WAIT


def _dead(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    w.unique_done(locked, succeeded=False)
    w.put(attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now))
    return JobState.DEAD


def _discard(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    """Gone, unless a result waiter reads it: dead, listed nowhere, for
    WAITED_KEEP seconds."""
    w.unique_done(locked, succeeded=False)
    w.put(
        attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now),
        retain_until=now + WAITED_KEEP,
        discarded=True,
        drop_unwaited=True,
    )
    return JobState.DEAD


def _defer(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    delay = max(0.0, s.retry_delay)
    if job.control is not None:
        for key, count, per, burst in job.control.rates:
            floor = now + delay + tolerance(per / count, burst)
            where = (job.queue, key)
            w.hold_back[where] = max(w.hold_back.get(where, floor), floor)
    w.put(
        attrs.evolve(
            job,
            state=JobState.RETRY_WAIT,
            run_at=now + delay,
            last_error=s.error,
            attempts=max(0, job.attempts - 1),
            unclaimed_since=None,
        )
    )
    return JobState.RETRY_WAIT


def _release(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    w.put(attrs.evolve(job, state=JobState.READY, attempts=max(0, job.attempts - 1)))
    return JobState.READY


def _unclaimed(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    """Back to retry_wait for a worker with a handler, or dead once it has
    gone back unclaimed for ``unclaimed_grace`` (``store._settling``)."""
    after = unclaimed(job, s, now)
    if after.state is JobState.DEAD:
        w.unique_done(locked, succeeded=False)
    w.put(after)
    return after.state


def _aborted(w: _Writes, locked: _Locked, job: Job, s: Settlement, now: float) -> JobState:
    w.unique_done(locked, succeeded=False)
    error = locked.abort or s.error or _jobs.abort_error()
    w.put(attrs.evolve(job, state=JobState.ABORTED, last_error=error, finished_at=now))
    return JobState.ABORTED


_TRANSITIONS = {
    SettleKind.SUCCEEDED: _succeeded,
    SettleKind.RETRY: _retry,
    SettleKind.DEAD: _dead,
    SettleKind.DISCARD: _discard,
    SettleKind.DEFER: _defer,
    SettleKind.RELEASE: _release,
    SettleKind.UNCLAIMED: _unclaimed,
    SettleKind.ABORTED: _aborted,
}


# -- recovery -------------------------------------------------------------------------
def recover(conn: psycopg.Connection[Any], queues: Sequence[str], limit: int) -> RecoverResult:
    """leased --lease expired--> ready (due now), dead (retries exhausted)
    or aborted (an abort was asked), at most ``limit`` jobs."""
    now_row = conn.execute("SELECT chronos_now()").fetchone()
    assert now_row is not None
    now = float(now_row[0])
    writes = _Writes(now)
    ready: list[str] = []
    dead: list[Job] = []
    aborted: list[Job] = []
    taken = 0
    for queue in dict.fromkeys(queues):
        if taken >= limit:
            break
        rows = conn.execute(
            _LOCK_EXPIRED, {"queue": queue, "now": now, "n": limit - taken}
        ).fetchall()
        for row in rows:
            entry = _locked(row)
            job = attrs.evolve(entry.job, lease_token="", lease_owner="", lease_expires_at=None)
            if entry.abort:
                job = attrs.evolve(
                    job, state=JobState.ABORTED, finished_at=now, last_error=entry.abort
                )
                writes.unique_done(entry, succeeded=False)
                aborted.append(job)
            elif job.attempts > job.max_retries:
                reason = (
                    f"lease expired on attempt {job.attempts} of "
                    f"{job.max_retries + 1} (worker lost); retries exhausted"
                )
                job = attrs.evolve(job, state=JobState.DEAD, finished_at=now, last_error=reason)
                writes.unique_done(entry, succeeded=False)
                dead.append(job)
            else:
                job = attrs.evolve(job, state=JobState.READY, run_at=now, unclaimed_since=None)
                ready.append(job.id)
            writes.put(job)
            writes.slots.append(job.id)
            taken += 1
    if taken:
        writes.write(conn)
    return RecoverResult(tuple(ready), tuple(dead), NOTHING_SET_ASIDE, tuple(aborted))
