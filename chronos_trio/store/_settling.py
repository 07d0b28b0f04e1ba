"""Settle rules the backends that decide in Python share (the MemoryStore
and the PostgreSQL store; the RedisStore's Lua, settle.lua, follows the
same rules): which settle kinds an abort overrides, how long an outcome
nobody keeps stays readable for its waiters, and the UNCLAIMED settle.

The UNCLAIMED settle (see ``WorkerRole.settle``): a job whose kind the
leasing worker has no handler for goes back for a worker that has one,
until it has gone back unclaimed for the worker's grace.

The time with no taker lives in the record (``Job.unclaimed_since``), judged
by the store's clock, so it survives bounces between workers and their
restarts. The stamp is advisory: one later than now (a clock that went
back) counts as none and is stamped anew. That can only put a dead-letter
off by one grace; it never ends or loses a job (settle.lua reads field
``uc`` the same way, and an unreadable one as none).
"""

from __future__ import annotations

import attrs

from ..records._jobs import Job, JobState, LeasedJob
from ._results import NOTHING_SET_ASIDE, SettleKind, Settlement, SettleResult

#: How long a finished job nothing keeps stays readable for its waiters (s).
WAITED_KEEP = 60.0

#: On the SQL stores, the result waiter a job marked as waited on
#: (``NewJob.keep_outcome``) is stored with, in the enqueue's transaction:
#: it never lapses (expires_at +inf), so the settle or recovery that
#: finishes the job keeps it readable as for a live waiter, and forgets it
#: then, as every waiter of a finished job. A name no live waiter takes
#: (theirs are random hex).
KEEP_OUTCOME_WAITER = "keep_outcome"

#: Forgets the marks of the jobs ``{}`` names (a placeholder, formatted by
#: the store): said where a job ends without a settle that forgets its
#: waiters (an abort while it waits) or goes without finishing (deleted,
#: purged), so a mark never outlives its job.
FORGET_MARKS = (
    f"DELETE FROM result_waiters WHERE waiter = '{KEEP_OUTCOME_WAITER}' AND job_id = {{}}"
)

#: Settle kinds that would run the job again: an abort asked for it wins.
RUNS_AGAIN = frozenset(
    {SettleKind.RETRY, SettleKind.RELEASE, SettleKind.DEFER, SettleKind.UNCLAIMED}
)


def settled_kind(s: Settlement, abort_asked: bool) -> SettleKind:
    """The transition ``s`` makes: ABORTED when an abort was asked for its
    job and ``s`` would run it again, else its own kind."""
    return SettleKind.ABORTED if abort_asked and s.kind in RUNS_AGAIN else s.kind


def stamp_of(job: Job, now: float) -> float | None:
    """``job.unclaimed_since`` as the store judges it at ``now``: the time,
    or None when there is none (absent, or later than ``now``)."""
    since = job.unclaimed_since
    return None if since is None or since > now else since


def unclaimed(job: Job, s: Settlement, now: float) -> Job:
    """``job`` (its lease already cleared) after the UNCLAIMED settle ``s``
    at ``now``: back to retry_wait, due ``s.retry_delay`` from now, or dead
    with ``s.error`` once its stamp is ``s.unclaimed_grace`` old; the
    attempt its lease took given back, the stamp written either way."""
    since = stamp_of(job, now)
    if since is None:
        since = now
    attempts = max(0, job.attempts - 1)
    if now - since >= s.unclaimed_grace:
        return attrs.evolve(
            job,
            state=JobState.DEAD,
            last_error=s.error,
            finished_at=now,
            attempts=attempts,
            unclaimed_since=since,
        )
    return attrs.evolve(
        job,
        state=JobState.RETRY_WAIT,
        run_at=now + max(0.0, s.retry_delay),
        attempts=attempts,
        unclaimed_since=since,
    )


@attrs.define
class SettleTally:
    """One settle call's answers, settlement by settlement in order: each
    refused (its lease not held) or applied (with the transition it made and
    the state it ended in), then :meth:`result`."""

    settled: list[bool] = attrs.Factory(list)
    aborted: list[int] = attrs.Factory(list)
    unclaimed_dead: list[int] = attrs.Factory(list)
    #: applied successes whose successor the settle enqueued (no outbox entry)
    continued: list[int] = attrs.Factory(list)
    #: of those, the successors leased at once to the settling worker
    leased: list[tuple[int, LeasedJob]] = attrs.Factory(list)

    def refused(self) -> None:
        self.settled.append(False)

    def applied(self, kind: SettleKind, ended: JobState | None) -> None:
        index = len(self.settled)
        if kind is SettleKind.ABORTED:
            self.aborted.append(index)
        elif kind is SettleKind.UNCLAIMED and ended is JobState.DEAD:
            self.unclaimed_dead.append(index)
        self.settled.append(True)

    def continued_last(self, leased: LeasedJob | None = None) -> None:
        """The settlement applied last had its successor enqueued (and
        ``leased``, when it was leased at once to the settling worker)."""
        index = len(self.settled) - 1
        self.continued.append(index)
        if leased is not None:
            self.leased.append((index, leased))

    def result(self) -> SettleResult:
        return SettleResult(
            tuple(self.settled),
            NOTHING_SET_ASIDE,
            frozenset(self.aborted),
            frozenset(self.unclaimed_dead),
            frozenset(self.continued),
            tuple(self.leased),
        )
