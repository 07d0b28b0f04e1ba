"""The job record and its lifecycle states.

A job moves through these states, each transition one atomic store operation::

    scheduled --due--> ready --lease--> leased --ok--> succeeded (dropped, or retained)
        ^                ^                 |--error, retries left--> retry_wait --due--> ready
        |                '--lease expired--|
        '-- enqueue(run_at)                '--retries exhausted / SkipRetry / bad payload--> dead

An abort (``handle.abort()``) makes a scheduled, ready or retry_wait job
``aborted`` at once; a leased one is flagged, and becomes ``aborted`` when
its worker settles it (or recovery takes back its expired lease).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._placement import NO_PLACEMENT, Placement

if TYPE_CHECKING:
    from ._attempts import Attempt
    from ._control import JobControl
    from ._unique import Unique


class JobState(enum.StrEnum):
    """Where a job is in its lifecycle."""

    SCHEDULED = "scheduled"
    READY = "ready"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    #: Stopped by an abort before it finished; kept like a dead job (in the
    #: dead index, trimmed with the dead jobs), never run again.
    ABORTED = "aborted"

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Parse a state name, raising ``ValueError`` that lists the valid names."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown job state {text!r}; expected one of: {names}") from None


#: States in which a job still waits to run or is running.
PENDING_STATES = frozenset(
    {JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT}
)


@attrs.frozen
class Job:
    """A snapshot of one job as the store holds it.

    Times are seconds since the Unix epoch *on the store's clock*. ``attempts``
    counts leases handed out (a lease is an attempt, even if the worker then
    crashed). ``lease_token`` is the fencing token of the current lease (empty
    when not leased). ``placement`` is where the store keeps it (opaque: see
    ``records._placement``).
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    queue: str
    kind: str
    payload: bytes
    run_at: float
    state: JobState
    attempts: int = 0
    max_retries: int = 3
    timeout: float = 30.0
    lease_token: str = ""
    lease_owner: str = ""
    lease_expires_at: float | None = None
    placement: Placement = NO_PLACEMENT
    last_error: str = ""
    created_at: float = 0.0
    finished_at: float | None = None
    #: Empty for a sound record. Otherwise why the stored record could not
    #: be read as it is (which field, what it held); the fields it names hold
    #: defaults. Only inspection shows such jobs: workers never run them
    #: (the store dead-letters a damaged record it meets).
    damage: str = ""
    #: A succeeded job's stored result (its task's encoding of the handler's
    #: return value), kept until ``result_until`` (store clock); None when
    #: nothing is kept.
    result: bytes | None = None
    result_until: float | None = None
    #: Metadata the producer attached (``headers=`` or the app's producer
    #: hooks), as (name, value) pairs: a trace id, a tenant.
    headers: tuple[tuple[str, str], ...] = ()
    #: A workflow job's continuation (``NewJob.then``): what follows it.
    #: Filled by inspection (``get_job``, ``list_jobs``); a lease may leave it None.
    then: str | None = None
    #: Its priority, expiry and limits (see ``records._control``); None: defaults.
    control: JobControl | None = None
    #: When (store clock) a worker with no handler for its kind first sent it
    #: back unrun (an UNCLAIMED settle) in its current wait for one that has a
    #: handler; None: never, or a run since (a retry or deferral, a lost
    #: lease, a requeue) cleared it. A finished job keeps it as it was. It
    #: dead-letters the job once it is older than the sending worker's
    #: ``unknown_kind_grace``. A lease may leave it None.
    unclaimed_since: float | None = None
    #: Its attempts that ended without success (retried, dead, expired,
    #: aborted, released...), oldest first, at most
    #: ``records._attempts.HISTORY_LIMIT``: filled by ``AdminRole.get_job``
    #: (other reads may leave it empty). ``attempt_history(job)`` adds the
    #: running or succeeded attempt, derived from the record. Not an
    #: ``__init__`` argument: reads attach it with :func:`with_history`, so
    #: the copies the hot path makes (``attrs.evolve``) pay nothing for it
    #: (and do not carry it).
    history: tuple[Attempt, ...] = attrs.field(default=(), init=False)

    @property
    def priority(self) -> int:
        """Its priority within its queue (higher leases first)."""
        return 0 if self.control is None else self.control.priority

    @property
    def retries_left(self) -> int:
        """How many more failed attempts this job may still absorb."""
        return max(0, self.max_retries + 1 - self.attempts)


@attrs.frozen
class NewJob:
    """A job as a producer hands it to the store.

    Exactly one of ``run_at`` (epoch seconds) and ``delay`` (seconds from the
    store's now) decides when it becomes due; with neither it is due at once.
    ``delay`` exists so that due times are judged by the store's clock, not the
    producer's.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    queue: str
    kind: str
    payload: bytes
    run_at: float | None = None
    delay: float = 0.0
    max_retries: int = 3
    timeout: float = 30.0
    #: (name, value) pairs that travel with the job to its handler.
    headers: tuple[tuple[str, str], ...] = ()
    #: At most one job with this key in the pipeline (its key resolved: never
    #: None here); None: an ordinary job.
    unique: Unique | None = None
    #: Whether ``id`` was given by the caller. A unique job's ID must route
    #: to its key's partition: one the producer made up is drawn again by the
    #: store until it does; a given one that does not is refused.
    id_given: bool = True
    #: A workflow job's continuation (JSON text, see ``records._workflow``):
    #: what follows when it succeeds. The store keeps it, and its fenced
    #: success settle puts the job in the outbox the continuer drains.
    then: str | None = None
    #: Its priority, expiry and limits (see ``records._control``); None: defaults.
    control: JobControl | None = None
    #: Stored already marked as waited on (``enqueue(keep_outcome=True)``):
    #: whatever ends it keeps its finished record readable ``WAITED_KEEP``
    #: seconds, as if a result waiter had watched it before it ended, so a
    #: wait that starts after it ended still reads its outcome.
    keep_outcome: bool = False


@attrs.frozen
class EnqueueResult:
    """What ``enqueue`` did with one job: ``created`` is False when a job with
    the same ID already existed (the existing job is left untouched), or when
    a unique job's key was taken: then ``job_id`` is the job that holds it
    (for a debounce, the job whose payload and due time were replaced).
    ``placement``: where the store keeps that job (opaque, see
    ``records._placement``)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    created: bool
    run_at: float
    placement: Placement = NO_PLACEMENT


@attrs.frozen
class JobRef:
    """Where a job lives, as its producer knows it: its ID and queue, and,
    when known (from its EnqueueResult), its placement in the store, which
    spares the store a search."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    #: None: look in every queue (slower: one read per queue).
    queue: str | None
    #: The store's placement of the job (opaque, see ``records._placement``);
    #: None: not known, the store finds it.
    placement: Placement | None = None


#: States in which a job has its outcome: it will not run again by itself.
FINISHED_STATES = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.ABORTED})


def abort_error(reason: str = "") -> str:
    """The ``last_error`` an aborted job keeps: ``aborted``, and the reason
    the abort gave, if any (the one place this text is made)."""
    return f"aborted: {reason}" if reason else "aborted"


@attrs.frozen
class JobOutcome:
    """Where a job stands, as a producer waiting on it sees it.

    ``result`` is the stored result of a succeeded job (its task's encoding
    of the handler's return value), or None: not finished, no result kept
    (the task's return annotation is missing or None), or kept and expired.
    ``result_until`` is when a stored result expires (store clock)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    queue: str
    state: JobState
    attempts: int = 0
    last_error: str = ""
    finished_at: float | None = None
    result: bytes | None = None
    result_until: float | None = None
    #: True when the job succeeded with a result that has expired since
    #: (the record outlived it: kept for ``retain_succeeded``).
    result_expired: bool = False
    kind: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @classmethod
    def of(cls, job: Job, now: float) -> JobOutcome:
        """The outcome a producer sees of ``job`` at store time ``now``."""
        until = job.result_until
        expired = until is not None and until <= now
        return cls(
            job.id,
            job.queue,
            job.state,
            job.attempts,
            job.last_error,
            job.finished_at,
            None if expired else job.result,
            until,
            expired,
            job.kind,
        )


@attrs.frozen
class LeaseRef:
    """Everything a store needs to find a leased job and check its fence."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_id: str
    queue: str
    token: str
    #: Where the store keeps the job (opaque, see ``records._placement``).
    placement: Placement = NO_PLACEMENT
    #: The job has flow control (``Job.control``): its settle also gives
    #: back concurrency slots, or holds back rate limits (a store may skip
    #: that work for the others).
    controlled: bool = False


@attrs.frozen
class LeasedJob:
    """A job handed to one worker, with the fencing token of its lease.

    ``expires_at`` is when the lease ends unless renewed and ``leased_at``
    when the store granted it, both on the store's clock (the one clock the
    lease is judged by; ``expires_at`` less ``leased_at`` is the lease
    duration asked for)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job
    token: str
    expires_at: float
    leased_at: float
    #: How to settle or renew this lease; built once (every job needs it).
    ref: LeaseRef = attrs.field(init=False, eq=False, repr=False)

    @ref.default
    def _make_ref(self) -> LeaseRef:
        job = self.job
        return LeaseRef(job.id, job.queue, self.token, job.placement, job.control is not None)


def with_history(job: Job, history: tuple[Attempt, ...]) -> Job:
    """``job`` with its attempt ``history`` attached (``job`` itself when
    there is none). Never raises."""
    if not history:
        return job
    shown = attrs.evolve(job)
    object.__setattr__(shown, "history", history)
    return shown


def require_field_order(cls: type, names: tuple[str, ...], user: str) -> None:
    """Fail at import if ``cls``'s attrs fields are not ``names`` in order: hot
    loops build these records positionally (much cheaper than by keyword), so
    a change to the class must fail loudly, not garble records."""
    if tuple(f.name for f in attrs.fields(cls)) != names:  # pragma: no cover
        raise ImportError(f"{cls.__qualname__}'s fields changed: update {user}")


require_field_order(
    EnqueueResult, ("job_id", "created", "run_at", "placement"), "records._jobs.enqueue_results"
)
_new_object = object.__new__
_drain = deque  # deque(iterator, 0): runs it, keeps nothing
# each field's slot, set as the frozen class's own __init__ sets it (through
# object.__setattr__, which ends in these very descriptors), without the
# attribute lookup by name a field
_set_job_id, _set_created, _set_run_at, _set_placement = (
    EnqueueResult.__dict__[name].__set__ for name in ("job_id", "created", "run_at", "placement")
)


def enqueue_results(
    job_ids: Sequence[str],
    created: Sequence[bool],
    run_ats: Sequence[float],
    placement: Placement,
) -> list[EnqueueResult]:
    """``[EnqueueResult(job_id, created, run_at, placement) for ...]`` over
    the columns (of one length; ValueError otherwise), for a bulk
    enqueue: the same records (equal, same hash, frozen), each field's
    slot set for every record in one C-level pass (no ``__init__`` frame
    a record, no attribute lookup by name a field): about half the
    frozen ``__init__``'s cost. The class has no validators or converters
    to skip (a test compares the two)."""
    n = len(job_ids)
    if len(created) != n or len(run_ats) != n:
        raise ValueError("enqueue_results: columns of different lengths")
    made: list[EnqueueResult] = list(map(_new_object, repeat(EnqueueResult, n)))
    _drain(map(_set_job_id, made, job_ids), 0)
    _drain(map(_set_created, made, created), 0)
    _drain(map(_set_run_at, made, run_ats), 0)
    _drain(map(_set_placement, made, repeat(placement, n)), 0)
    return made
