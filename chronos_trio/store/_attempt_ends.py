"""The attempt a settle or a recovery ends, as the backends that decide in
Python (the MemoryStore, the SQL stores' settle plan) add it to the job's
attempt history (``records._attempts``); the RedisStore's Lua
(``lua/lib/add_attempt.lua``) writes the same entries.

Only attempts that end without success are kept: a success is derived from
the record when it is read, so the success settle writes nothing more.
"""

from __future__ import annotations

from ..records._attempts import LEASE_EXPIRED, Attempt, AttemptOutcome
from ..records._jobs import Job, JobState
from ._results import SettleKind, Settlement

#: The outcome each settle kind (as applied, see ``_settling.settled_kind``)
#: gives the attempt it ends; a success is not kept.
OUTCOME_OF = {
    SettleKind.RETRY: AttemptOutcome.RETRIED,
    SettleKind.DEAD: AttemptOutcome.DEAD,
    SettleKind.DISCARD: AttemptOutcome.DISCARDED,
    SettleKind.RELEASE: AttemptOutcome.RELEASED,
    SettleKind.DEFER: AttemptOutcome.DEFERRED,
    SettleKind.ABORTED: AttemptOutcome.ABORTED,
    SettleKind.UNCLAIMED: AttemptOutcome.UNCLAIMED,
}


def settled_attempt(
    leased: Job, kind: SettleKind, s: Settlement, after: Job, now: float
) -> Attempt:
    """The attempt of ``leased`` (the job as its lease held it) that the
    settle ``s``, applied as ``kind`` (not SUCCEEDED) at ``now``, ended;
    ``after``: the job as that settle left it. Its error: the settlement's
    (an abort's reason for ABORTED, none for a release)."""
    if kind is SettleKind.ABORTED:
        error = after.last_error
    elif kind is SettleKind.RELEASE:
        error = ""
    else:
        error = s.error
    return Attempt(leased.attempts, OUTCOME_OF[kind], leased.lease_owner, s.started, now, error)


def recovered_attempt(leased: Job, after: Job, now: float) -> Attempt:
    """The attempt of ``leased`` whose expired lease recovery took back at
    ``now``, leaving the job as ``after``: EXPIRED (ABORTED when an abort
    was asked for it), its start not known, its error the dead-letter's or
    the abort's text, else :data:`LEASE_EXPIRED`."""
    outcome = AttemptOutcome.ABORTED if after.state is JobState.ABORTED else AttemptOutcome.EXPIRED
    error = LEASE_EXPIRED if after.state is JobState.READY else after.last_error
    return Attempt(leased.attempts, outcome, leased.lease_owner, None, now, error)
