"""What a claim (``WorkerRole.lease``) of a SQL store (PostgreSQL, SQLite)
decides in Python, whatever reads and writes its rows: the lease order, how
far past its share a queue looks, the tokens and answer of one call
(:class:`ClaimBatch`), and the judgement of the due jobs with a flow control
(:func:`judge_controlled`: leased, held back by a limit, or expired), the
MemoryStore's rules (``store._admission``).

Nothing here reads or writes a database: the backend reads a queue's next
due jobs in lease order, leases those without a control, passes the others
here, and writes what comes back (the admitted leased, the limits' new
state, the expired dead-lettered).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import attrs

from ..records._control import expired_error
from ..records._jobs import Job, JobState, LeasedJob
from ._admission import KeyStates, Verdict
from ._results import NOTHING_SET_ASIDE, LeaseResult

#: At most this many jobs beyond its share a queue looks at in one claim.
LOOK_BEYOND = 256


def lease_order(job: Job) -> tuple[int, float, str]:
    """Lease order: highest priority first, then due time, then ID."""
    return (-job.priority, job.run_at, job.id)


@attrs.define
class ClaimBatch:
    """One lease call's answer as it is built: its leases, the jobs it
    expired, and what held jobs back (the earliest next permit of a rate
    limit, whether a concurrency limit was at its limit)."""

    worker_id: str
    duration: float
    #: This call's token prefix (unique per call of the store).
    base: str
    #: The store's clock for the whole call (None until the backend knows it).
    now: float | None = None
    leased: list[LeasedJob] = attrs.Factory(list)
    expired: list[Job] = attrs.Factory(list)
    held_until: float | None = None
    capped: bool = False
    rounds: itertools.count[int] = attrs.Factory(itertools.count)

    def round_prefix(self) -> str:
        """The token prefix of one round of one queue (its leases add their
        number: unique within the call)."""
        return f"{self.base}{next(self.rounds)}."

    def held_back(self, until: float | None) -> None:
        """A job was held back: by a rate limit until ``until``, or by a
        concurrency limit (None)."""
        if until is None:
            self.capped = True
        elif self.held_until is None or until < self.held_until:
            self.held_until = until

    def result(self) -> LeaseResult:
        held_for = None
        if self.held_until is not None and self.now is not None:
            held_for = max(0.0, self.held_until - self.now)
        return LeaseResult(
            tuple(self.leased), NOTHING_SET_ASIDE, tuple(self.expired), held_for, self.capped
        )


@attrs.define
class Judged:
    """The fate of one round's jobs with a flow control."""

    #: admitted: each job (as read, not yet leased) and its lease's token
    admitted: list[tuple[Job, str]] = attrs.Factory(list)
    #: held back by a limit: stay as they are (and are not read again)
    held: list[str] = attrs.Factory(list)
    #: past their expiry: each as it is now to be stored (dead)
    expired: list[Job] = attrs.Factory(list)


def judge_controlled(
    controlled: Sequence[Job],
    limits: KeyStates,
    batch: ClaimBatch,
    prefix: str,
    numbers: Iterator[int],
) -> Judged:
    """Judge ``controlled`` (due jobs with a control, their keys read into
        ``limits``) in lease order, one after another: each admitted one takes
        its permits and slots in ``limits`` and the token ``prefix`` + the next
    of ``numbers`` (the round's, after its leases without a control); a held one
        tells ``batch`` what held it; an expired one is dead-lettered with the
        error saying when it expired. A control that did not decode (None) is
        judged as no control."""
    now = limits.now
    judged = Judged()
    for job in sorted(controlled, key=lease_order):
        control = job.control
        if control is None:
            verdict, until = Verdict.LEASE, None
        else:
            verdict, until = limits.judge(control)
        if verdict is Verdict.HELD:
            judged.held.append(job.id)
            batch.held_back(until)
        elif verdict is Verdict.EXPIRED:
            assert control is not None and control.expires_at is not None
            judged.expired.append(
                attrs.evolve(
                    job,
                    state=JobState.DEAD,
                    finished_at=now,
                    last_error=expired_error(control.expires_at),
                )
            )
        else:
            if control is not None:
                limits.take(control, job.id)
            judged.admitted.append((job, f"{prefix}{next(numbers)}"))
    return judged
