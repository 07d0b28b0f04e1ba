"""What a settle or a recovery writes, decided in Python by the SQL stores
(PostgreSQL and SQLite) from the job rows they hold locked.

Each backend reads the batch's rows (``Locked``: the job and what only the
store reads of it), asks :func:`plan_settle` or :func:`plan_recovered` for
the transitions (one per :class:`SettleKind`, the MemoryStore's rules), and
writes the :class:`SettlePlan` in its own statements: the rows (a finished
job nothing keeps dropped unless a live result waiter reads it, then kept
``WAITED_KEEP`` seconds), unique keys given back, concurrency slots freed,
rate limits held back, the workflow outbox and the queues to wake.

Nothing here reads or writes a database: the plan is exact for rows that
cannot change between the read and the write (the backends hold them
locked, or the whole file's write lock).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..records import _jobs
from ..records._attempts import append_history
from ..records._flow_outcomes import discarded_error
from ..records._jobs import Job, JobState
from ..records._placement import Placement
from ..records._workflow import WORKFLOW_KEEP, holds_failure_handling
from ._admission import tolerance
from ._attempt_ends import recovered_attempt, settled_attempt
from ._results import SettleKind, Settlement, SettleResult
from ._roles import Continuation
from ._rows import job_from_row
from ._settling import WAITED_KEEP, SettleTally, settled_kind, unclaimed
from ._sql_flow_kept import discarded_row
from ._topology_placement import locate


@attrs.define
class Locked:
    """A row a settle or recovery holds: the job and what only the store reads."""

    job: Job
    abort: str
    unique_key: str | None
    unique_ttl: float | None
    #: its stored attempt history (``_rows.HISTORY_COLUMN``), None: none
    history: str | None = None


def unique_ttl(spec: str | None) -> float | None:
    """The ttl of a stored unique spec (column ``unique_spec``: JSON with
    ``mode`` and ``ttl``); None when it has none or does not read."""
    if not spec:
        return None
    try:
        raw = json.loads(spec).get("ttl")
        return None if raw is None else float(raw)
    except (ValueError, TypeError, AttributeError):
        return None


def locked_from_row(row: Sequence[Any]) -> Locked:
    """The :class:`Locked` of a row selected as ``JOB_COLUMNS`` (``_rows``)
    then ``abort_reason, unique_key, unique_spec, attempt_history``."""
    abort, key, spec, history = row[-4:]
    return Locked(job_from_row(row[:-4]), abort, key, unique_ttl(spec), history)


@attrs.frozen
class RowWrite:
    """One job's row as the plan writes it: the job's columns (but its lease:
    a writer clears the lease columns of every row, whatever ``job`` holds),
    and the retention columns only the store reads."""

    job: Job
    retain_until: float | None = None
    retained: bool = False
    discarded: bool = False
    continuation: bool = False
    #: dropped instead, unless a live result waiter reads it
    drop_unwaited: bool = False
    #: the attempt history with the attempt this write ends added (None:
    #: unchanged, as for a success: its attempt is derived from the record)
    history: str | None = None


@attrs.frozen
class UniqueRelease:
    """A unique key its holder gives back: deleted, unless ``keeps_throttle``
    and the key is held in mode 'throttle' (then it lapses ``ttl`` from now)."""

    queue: str
    key: str
    holder: str
    ttl: float | None
    succeeded: bool

    @property
    def keeps_throttle(self) -> bool:
        return self.succeeded and self.ttl is not None


@attrs.define
class SettlePlan:
    """Everything one settle or recovery writes, in the order it was decided."""

    now: float
    rows: list[RowWrite] = attrs.Factory(list)
    unique: list[UniqueRelease] = attrs.Factory(list)
    #: jobs whose concurrency slots are freed
    slots: list[str] = attrs.Factory(list)
    #: (queue, rate key) -> the bucket's theoretical arrival time at least
    hold_back: dict[tuple[str, str], float] = attrs.Factory(dict)
    #: queues that got a job back to ready or retry_wait
    wake: set[str] = attrs.Factory(set)
    #: whether a workflow continuation was put in the outbox
    outbox: bool = False
    #: ``flow_kept`` rows to insert (``store._sql_flow_kept``): the failed
    #: ends of discarded workflow jobs whose flows handle failures
    kept: list[tuple[Any, ...]] = attrs.Factory(list)

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
        self.rows.append(
            RowWrite(job, retain_until, retained, discarded, continuation, drop_unwaited)
        )
        if job.state in (JobState.READY, JobState.RETRY_WAIT):
            self.wake.add(job.queue)

    def unique_done(self, locked: Locked, *, succeeded: bool) -> None:
        """The job gives its unique key back (a throttle's success keeps it
        its ttl more)."""
        if locked.unique_key is None:
            return
        self.unique.append(
            UniqueRelease(
                locked.job.queue, locked.unique_key, locked.job.id, locked.unique_ttl, succeeded
            )
        )


def held(job: Job, token: str, now: float) -> bool:
    """Whether ``token`` holds ``job``'s lease at ``now`` (a fencing check:
    leased, the same non-empty token, not expired)."""
    return (
        job.state is JobState.LEASED
        and bool(token)
        and job.lease_token == token
        and job.lease_expires_at is not None
        and job.lease_expires_at > now
    )


def plan_settle(
    settlements: Sequence[Settlement], locked: Mapping[str, Locked], now: float
) -> tuple[SettleResult, SettlePlan]:
    """The settle's answer and what it writes, for the rows ``locked`` of its
    jobs (by ID; a job not there is refused). Each settlement is fenced by
    its token and an unexpired lease; of two of one lease the first applies;
    an abort asked for the job overrides a kind that would run it again."""
    plan = SettlePlan(now)
    tally = SettleTally()
    done: set[str] = set()
    for s in settlements:
        entry = locked.get(s.lease.job_id)
        if entry is None or s.lease.job_id in done or not held(entry.job, s.lease.token, now):
            tally.refused()
            continue
        done.add(s.lease.job_id)
        job = entry.job
        if job.control is not None:
            plan.slots.append(job.id)
        kind = settled_kind(s, bool(entry.abort))
        # the lease is left on the job: every row written has it cleared (one
        # attrs.evolve less per job on the hot path)
        tally.applied(kind, _TRANSITIONS[kind](plan, entry, job, s, now))
        if kind is not SettleKind.SUCCEEDED:
            # every other transition wrote one row: it keeps the attempt it ends
            row = plan.rows[-1]
            ended = settled_attempt(job, kind, s, row.job, now)
            plan.rows[-1] = attrs.evolve(row, history=append_history(entry.history, ended))
    return tally.result(), plan


def plan_recovered(plan: SettlePlan, entry: Locked) -> Job:
    """leased --lease expired--> aborted (an abort was asked), dead (retries
    exhausted) or ready (due now): the job as ``plan`` now writes it (its
    slots freed, its unique key given back when it finished)."""
    now = plan.now
    job = attrs.evolve(entry.job, lease_token="", lease_owner="", lease_expires_at=None)
    if entry.abort:
        job = attrs.evolve(job, state=JobState.ABORTED, finished_at=now, last_error=entry.abort)
        plan.unique_done(entry, succeeded=False)
    elif job.attempts > job.max_retries:
        reason = (
            f"lease expired on attempt {job.attempts} of "
            f"{job.max_retries + 1} (worker lost); retries exhausted"
        )
        job = attrs.evolve(job, state=JobState.DEAD, finished_at=now, last_error=reason)
        plan.unique_done(entry, succeeded=False)
    else:
        job = attrs.evolve(job, state=JobState.READY, run_at=now, unclaimed_since=None)
    # a dead or aborted workflow job with failure handling goes to the
    # outbox (as _dead, _aborted)
    fails = job.state is not JobState.READY and holds_failure_handling(job.then)
    plan.outbox = plan.outbox or fails
    plan.put(job, continuation=fails)
    ended = recovered_attempt(entry.job, job, now)
    plan.rows[-1] = attrs.evolve(plan.rows[-1], history=append_history(entry.history, ended))
    plan.slots.append(job.id)
    return job


# -- the transitions, one per SettleKind ------------------------------------------------
def _succeeded(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
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


def _retry(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
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


def _dead(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
    """leased --failed for good--> dead; a workflow job whose continuation
    holds failure handling goes to the outbox in the same write."""
    w.unique_done(locked, succeeded=False)
    fails = holds_failure_handling(job.then)
    w.outbox = w.outbox or fails
    w.put(
        attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now),
        continuation=fails,
    )
    return JobState.DEAD


def _discard(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
    """Gone, unless a result waiter reads it: dead, listed nowhere, for
    WAITED_KEEP seconds. A workflow job whose continuation holds failure
    handling keeps its place in its flow, failed (``discarded_error``): a
    ``flow_kept`` row, as a deleted job's, in the same write."""
    w.unique_done(locked, succeeded=False)
    if job.then is not None and holds_failure_handling(job.then):
        version, part = locate(job.placement) or (1, 0)
        error = discarded_error(s.error)
        w.kept.append(discarded_row(job, version, part, error, now))
        w.outbox = True
    w.put(
        attrs.evolve(job, state=JobState.DEAD, last_error=s.error, finished_at=now),
        retain_until=now + WAITED_KEEP,
        discarded=True,
        drop_unwaited=True,
    )
    return JobState.DEAD


def _defer(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
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


def _release(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
    w.put(attrs.evolve(job, state=JobState.READY, attempts=max(0, job.attempts - 1)))
    return JobState.READY


def _unclaimed(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
    """Back to retry_wait for a worker with a handler, or dead once it has
    gone back unclaimed for ``unclaimed_grace`` (``store._settling``)."""
    after = unclaimed(job, s, now)
    if after.state is JobState.DEAD:
        w.unique_done(locked, succeeded=False)
    w.put(after)
    return after.state


def _aborted(w: SettlePlan, locked: Locked, job: Job, s: Settlement, now: float) -> JobState:
    """leased --abort asked--> aborted; a workflow job whose continuation
    holds failure handling goes to the outbox, failed, in the same write."""
    w.unique_done(locked, succeeded=False)
    error = locked.abort or s.error or _jobs.abort_error()
    fails = holds_failure_handling(job.then)
    w.outbox = w.outbox or fails
    w.put(
        attrs.evolve(job, state=JobState.ABORTED, last_error=error, finished_at=now),
        continuation=fails,
    )
    return JobState.ABORTED


_Transition = Callable[[SettlePlan, Locked, Job, Settlement, float], JobState]

_TRANSITIONS: dict[SettleKind, _Transition] = {
    SettleKind.SUCCEEDED: _succeeded,
    SettleKind.RETRY: _retry,
    SettleKind.DEAD: _dead,
    SettleKind.DISCARD: _discard,
    SettleKind.DEFER: _defer,
    SettleKind.RELEASE: _release,
    SettleKind.UNCLAIMED: _unclaimed,
    SettleKind.ABORTED: _aborted,
}


def outbox_entry(
    job_id: str,
    queue: str,
    placement: Placement,
    then: str,
    result: bytes | memoryview | None,
    state: str,
    error: str | None,
    attempts: int,
    kind: str,
    kept: object = False,
) -> Continuation:
    """An outbox entry as the SQL stores read it from a job row marked
    ``continuation`` (or a deleted job's kept row, ``kept`` true): a
    succeeded job's result, or a dead or aborted one's failure."""
    if state != JobState.SUCCEEDED.value:
        return Continuation(
            job_id, queue, placement, then, None,
            failed=True, kind=kind, error=error or "", attempts=int(attempts), kept=bool(kept),
        )  # fmt: skip
    value = None if result is None else bytes(result)
    return Continuation(job_id, queue, placement, then, value, kept=bool(kept))
