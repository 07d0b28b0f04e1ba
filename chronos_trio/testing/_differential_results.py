"""The differential test's normaliser: the one place that reads what store
calls return, turning each result into plain data (tuples, numbers,
strings) that two stores must answer alike.

Keep every reading of a raw result here (lease batches, fenced results,
counts, set-aside reports), so a change of the store's result types is a
change of this module only.

Where the contract leaves the stores free, the normal form forgets the
difference, each time with the rule that allows it:

* fencing tokens are the store's own (``_roles``: "a fresh fencing token,
  unique among all leases this store ever issued"): a job's token is
  reported as held or not, never compared;
* a lease's jobs, a recovery's jobs and the outbox are compared as sets
  (sorted by ID): their order is due time (``lease``), expiry
  (``recover_expired``) or per partition (``continuations``: "oldest first
  within a partition"), and jobs that tie, or sit in different partitions,
  have no order the contract fixes;
* a leased job's ``then`` and ``unclaimed_since`` (``Job``: "a lease may
  leave it None") are not compared there (the admin reads compare every
  field; a recovery's dead and aborted jobs are compared whole);
* retained succeeded jobs are listed sorted by ID (``list_jobs``: "a
  RedisStore indexes succeeded jobs by the end of their retention");
* times are rounded to the microsecond, the resolution of Redis ``TIME``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..records._jobs import EnqueueResult, Job, JobState, LeasedJob, LeaseRef
from ..store._results import (
    AbortResult,
    CountResult,
    LeaseResult,
    PromoteResult,
    QueueStats,
    RecoverResult,
    RenewResult,
    SetAside,
    SettleResult,
)
from ..store._roles import Continuation

#: A normalised result: nested tuples of plain values.
Normal = Any


def when(t: float | None) -> float | None:
    """A store time, to the microsecond."""
    return None if t is None else round(t, 6)


def aside(found: SetAside) -> Normal:
    """What an operation set aside (see :class:`SetAside`): empty on sound stores."""
    if not found:
        return ()
    return (
        ("dead", tuple(sorted(j.id for j in found.dead))),
        ("quarantined", tuple(sorted(e.job_id for e in found.quarantined))),
        ("newer", tuple(sorted(e.job_id for e in found.newer))),
    )


def job(j: Job) -> Normal:
    """Every field of a job as the admin API shows it; the token as held or not."""
    fields = attrs.asdict(j, recurse=False)
    fields["lease_token"] = bool(j.lease_token)
    for name in ("run_at", "lease_expires_at", "created_at", "finished_at", "result_until"):
        fields[name] = when(fields[name])
    fields["unclaimed_since"] = when(j.unclaimed_since)
    fields["state"] = j.state.value if isinstance(j.state, JobState) else repr(j.state)
    fields["control"] = None if j.control is None else attrs.astuple(j.control)
    return tuple(sorted(fields.items()))


def jobs_by_id(jobs: Sequence[Job]) -> Normal:
    """Jobs as a set: normalised, sorted by ID."""
    return tuple(job(j) for j in sorted(jobs, key=lambda j: j.id))


def leased_job(lj: LeasedJob) -> Normal:
    j = lj.job
    return (
        j.id,
        j.queue,
        j.kind,
        j.payload,
        j.attempts,
        j.max_retries,
        when(j.run_at),
        when(lj.expires_at),
        when(lj.leased_at),
        j.lease_owner,
        j.priority,
    )


def enqueued(results: Sequence[EnqueueResult]) -> Normal:
    return tuple((r.job_id, r.created, when(r.run_at), r.placement) for r in results)


def leased(batch: LeaseResult) -> Normal:
    """A lease's result: its jobs (as a set), what it dead-lettered as
    expired, when a rate limit frees a held job, whether a cap held one."""
    return (
        ("jobs", tuple(sorted(leased_job(lj) for lj in batch.jobs))),
        ("expired", tuple(sorted(j.id for j in batch.expired))),
        ("held_for", when(batch.held_for)),
        ("capped", batch.capped),
        ("aside", aside(batch.aside)),
    )


def leases_of(batch: LeaseResult) -> list[LeaseRef]:
    """The lease references a lease result hands out (to renew and settle)."""
    return [lj.ref for lj in batch.jobs]


def renewed(result: RenewResult) -> Normal:
    """A renew's result: one bool per lease, which were flagged for an
    abort, and what was set aside."""
    return (
        ("ok", result.renewed),
        ("aborted", tuple(sorted(result.aborted))),
        ("aside", aside(result.aside)),
    )


def settled(result: SettleResult) -> Normal:
    """A settle's result: one bool per settlement, which made their job
    aborted or dead-lettered it as unclaimed, and what was set aside."""
    return (
        ("ok", result.settled),
        ("aborted", tuple(sorted(result.aborted))),
        ("unclaimed_dead", tuple(sorted(result.unclaimed_dead))),
        ("aside", aside(result.aside)),
    )


def recovered(result: RecoverResult) -> Normal:
    return (
        ("requeued", tuple(sorted(result.requeued))),
        ("dead", jobs_by_id(result.dead)),
        ("aborted", jobs_by_id(result.aborted)),
        ("aside", aside(result.aside)),
    )


def promoted(result: PromoteResult) -> Normal:
    return (
        ("promoted", result.promoted),
        ("next_due_at", when(result.next_due_at)),
        ("now", when(result.now)),
        ("aside", aside(result.aside)),
    )


def counted(result: CountResult) -> Normal:
    return (("count", result.count), ("aside", aside(result.aside)))


def aborted(result: AbortResult) -> Normal:
    return result.value


def arrived(results: Sequence[Sequence[bytes | None] | None]) -> Normal:
    return tuple(None if r is None else tuple(r) for r in results)


def continuations(entries: Sequence[Continuation]) -> Normal:
    return tuple(sorted((c.job_id, c.queue, c.placement, c.then, c.result) for c in entries))


def stats(entries: Sequence[QueueStats]) -> Normal:
    return tuple(
        (
            s.queue,
            tuple(sorted((state.value, n) for state, n in s.counts.items() if n)),
            s.paused,
            tuple(sorted((k, n) for k, n in s.by_partition.items() if n)),
        )
        for s in entries
    )


def listed(state: JobState, jobs: Sequence[Job]) -> Normal:
    """One state's ``list_jobs`` page, in the store's order (sorted by ID
    for succeeded jobs: see the module docstring)."""
    if state is JobState.SUCCEEDED:
        return jobs_by_id(jobs)
    return tuple(job(j) for j in jobs)


def raised(exc: Exception) -> Normal:
    """A call that raised: its exception type (messages are each store's own)."""
    return ("raised", type(exc).__name__)
