"""The store protocol: a small set of *batched*, atomic job operations.

Every backend (``MemoryStore``, ``RedisStore``) implements :class:`Store` and is
held to the conformance suite in :mod:`chronos_trio.testing`. The guarantees
below are the contract; the suite checks each of them.

Conventions
-----------
* Times are float seconds since the Unix epoch **on the store's clock**.
  Due times and lease expiry are judged only by that clock.
* Each method is atomic per job: a job is never observed half-moved. Batches
  may be applied per partition, but no job is in two states at once.
* Every lease carries a fencing token. ``renew`` and ``settle`` must present
  it; a stale token changes nothing and is reported as ``False``.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence

import attrs

from ..records._errors import StoreError as StoreError
from ..records._errors import TopologyError as TopologyError
from ..records._jobs import EnqueueResult, Job, JobState, LeasedJob, LeaseRef, NewJob


class SettleKind(enum.StrEnum):
    """How a worker finishes a lease."""

    SUCCEEDED = "succeeded"  # done; dropped, or retained for ``retain_for`` seconds
    RETRY = "retry"  # failed; run again ``retry_delay`` seconds from the store's now
    DEAD = "dead"  # failed for good: dead-letter it
    RELEASE = "release"  # not run (shutdown): back to ready at once, attempt not counted


@attrs.frozen
class Settlement:
    """One lease's outcome, fenced by ``lease.token``."""

    lease: LeaseRef
    kind: SettleKind
    error: str = ""
    retry_delay: float = 0.0
    retain_for: float = 0.0


@attrs.frozen
class QueueWeight:
    """A queue a worker consumes, with its share of each lease batch."""

    name: str
    weight: int = 1


@attrs.frozen
class PromoteResult:
    """``promoted`` jobs moved to ready; ``next_due_at`` is the earliest due
    time still waiting (None when nothing waits); ``now`` is the store's clock."""

    promoted: int
    next_due_at: float | None
    now: float


@attrs.frozen
class RecoverResult:
    """Jobs whose leases had expired: ``requeued`` went back to ready, ``dead``
    were dead-lettered because their attempts were used up."""

    requeued: tuple[str, ...] = ()
    dead: tuple[Job, ...] = ()


@attrs.frozen
class QueueStats:
    """Counts of one queue's jobs by state, and by (version, partition)."""

    queue: str
    counts: dict[JobState, int]
    paused: bool = False
    by_partition: dict[tuple[int, int], int] = attrs.field(factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class VersionState(enum.StrEnum):
    ACTIVE = "active"  # new jobs go here
    DRAINING = "draining"  # no new jobs; workers still consume what it holds


@attrs.frozen
class QueueVersion:
    version: int
    partitions: int
    state: VersionState


@attrs.frozen
class QueueTopology:
    """A queue's routing: the active version gets new jobs; draining versions
    are still consumed until empty and marked complete."""

    queue: str
    versions: tuple[QueueVersion, ...]

    @property
    def active(self) -> QueueVersion:
        for v in self.versions:
            if v.state is VersionState.ACTIVE:
                return v
        raise LookupError(f"queue {self.queue!r} has no active version")


@attrs.frozen
class Leadership:
    """A held leadership lease. ``epoch`` grows by one with every acquisition
    (by anyone), so it fences out a paused ex-leader."""

    name: str
    holder: str
    epoch: int
    expires_at: float


class TriggerResult(enum.StrEnum):
    ENQUEUED = "enqueued"  # this call recorded the trigger and enqueued its job
    ALREADY_FIRED = "already_fired"  # the schedule had already fired at or after it
    STALE_EPOCH = "stale_epoch"  # the caller no longer leads: nothing was done


class Store(abc.ABC):
    """The batched job store. See the module docstring for conventions."""

    #: True when the store can be shared by several processes.
    shared_across_processes: bool = False

    # -- producing ---------------------------------------------------------
    @abc.abstractmethod
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Store ``jobs`` atomically per job, in order; one result per job.

        A job whose ID already exists (in any state, including retained
        succeeded and dead) is not touched and reports ``created=False``.
        Due jobs become ``ready``, others ``scheduled``. New jobs are routed to
        the queue's active topology version and a partition by job-ID hash.
        """

    # -- the worker's hot path ----------------------------------------------
    @abc.abstractmethod
    async def promote_due(self, queues: Sequence[str], limit: int) -> PromoteResult:
        """Move up to ``limit`` jobs of ``queues`` whose due time has come from
        ``scheduled``/``retry_wait`` to ``ready``, earliest first."""

    @abc.abstractmethod
    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
    ) -> list[LeasedJob]:
        """Lease at most ``count`` ready jobs, oldest due first within a queue.

        ``count`` is shared among the queues by weight; a share a queue cannot
        use goes to the others. Paused queues are skipped. Each leased job's
        ``attempts`` grows by one and it gets a fresh fencing token, unique
        among all leases this store ever issued, expiring ``lease_duration``
        seconds from the store's now.
        """

    @abc.abstractmethod
    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> list[bool]:
        """Extend each lease to ``lease_duration`` seconds from now. ``False``
        for a lease that is no longer held with that token (nothing changes)."""

    @abc.abstractmethod
    async def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        """Apply each outcome if its lease token still holds; ``False`` (and no
        change) otherwise. SUCCEEDED drops the job, or keeps it until
        ``retain_for`` seconds have passed; RETRY records ``error`` and makes
        the job due ``retry_delay`` seconds from now; DEAD dead-letters it with
        ``error``; RELEASE returns it to ready at once and gives back the
        attempt its lease took."""

    @abc.abstractmethod
    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        """Take back up to ``limit`` leases of ``queues`` that expired: back to
        ready, or dead when the job has used ``max_retries + 1`` attempts (a
        job that keeps killing its worker must not loop forever)."""

    @abc.abstractmethod
    async def trim(
        self, queues: Sequence[str], *, dead_max_age: float | None, dead_max_count: int | None
    ) -> int:
        """Delete retained succeeded jobs past their retention, dead jobs older
        than ``dead_max_age`` and the oldest dead jobs beyond
        ``dead_max_count`` per queue. Returns how many were deleted."""

    # -- waiting (idle workers block here instead of polling fast) -----------
    @abc.abstractmethod
    async def wait_ready(self, queues: Sequence[str], timeout: float) -> None:
        """Return soon after a job may have become ready in ``queues`` (or a
        queue was resumed), or after ``timeout`` seconds. Spurious returns are
        allowed; missing a wake-up for longer than ``timeout`` is not."""

    @abc.abstractmethod
    async def wait_scheduled(
        self, queues: Sequence[str], *, earlier_than: float | None, timeout: float
    ) -> None:
        """Return soon after ``queues`` hold a scheduled or retry_wait job due
        before ``earlier_than`` (at once if one is already there; any such job
        when None), or after ``timeout`` seconds. A promoter sleeping until its
        next due time calls this so an earlier job wakes it. Spurious returns
        are allowed."""

    @abc.abstractmethod
    async def now(self) -> float:
        """The store's clock."""

    # -- inspection and administration --------------------------------------
    @abc.abstractmethod
    async def queues(self) -> list[str]:
        """Names of every queue that has held a job or has a topology."""

    @abc.abstractmethod
    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        """Counts per state for ``queues`` (all known queues when None)."""

    @abc.abstractmethod
    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        """The job with ``job_id`` (searching all queues when ``queue`` is
        None), or None."""

    @abc.abstractmethod
    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        """Jobs of ``queue`` in ``state``, ordered by due time (scheduled,
        ready, retry_wait), lease expiry (leased) or finish time (succeeded,
        dead); ``offset``/``limit`` page through them."""

    @abc.abstractmethod
    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        """Make a scheduled, retry_wait or dead job ready at once (a dead job
        gets its attempts reset). False if no such job in one of those states."""

    @abc.abstractmethod
    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        """Delete a job that is not leased. False if absent or leased."""

    @abc.abstractmethod
    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> int:
        """Make up to ``limit`` dead jobs of ``queue`` ready again with
        attempts reset; returns how many."""

    @abc.abstractmethod
    async def set_paused(self, queue: str, paused: bool) -> None:
        """Pause (no new leases from ``queue``) or resume a queue."""

    # -- topology --------------------------------------------------------------
    @abc.abstractmethod
    async def topology(self, queue: str) -> QueueTopology:
        """The queue's versions; a queue never configured has version 1 with
        the store's default partition count, active."""

    @abc.abstractmethod
    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        """Make ``version`` (with ``partitions`` partitions) active for new
        jobs; the previously active version becomes draining. ``version`` must
        be greater than every existing version (TopologyError otherwise)."""

    @abc.abstractmethod
    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        """Remove a draining version once it holds no job in any state.
        TopologyError if it is active, unknown, or still holds jobs."""

    # -- leadership and schedule triggers -------------------------------------
    @abc.abstractmethod
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        """Take leadership ``name`` for ``ttl`` seconds if nobody holds it (or
        its lease expired), with a new epoch one above the last one ever
        issued for ``name``. If ``holder`` already holds it, renew and return
        the same epoch. None when someone else holds it."""

    @abc.abstractmethod
    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend a held leadership; False (and no change) if ``holder`` with
        ``epoch`` no longer holds it."""

    @abc.abstractmethod
    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        """Give up leadership at once so a follower can take over; False if
        not held by ``holder`` with ``epoch``."""

    @abc.abstractmethod
    async def current_leader(self, name: str) -> Leadership | None:
        """The unexpired holder of ``name``, or None."""

    @abc.abstractmethod
    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        """Fire one schedule trigger, fenced by leadership ``name``/``epoch``.

        STALE_EPOCH unless ``epoch`` is the current, unexpired epoch of
        ``name``; ALREADY_FIRED if the schedule's last fired time is at or
        after ``fire_at``; otherwise record ``fire_at`` as last fired and
        enqueue ``job`` (whose ID is deterministic, so a retry after a crash
        cannot double-fire)."""

    @abc.abstractmethod
    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        """Last fired trigger time of every schedule under leadership ``name``."""

    # -- lifecycle ---------------------------------------------------------------
    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections. The default does nothing."""
