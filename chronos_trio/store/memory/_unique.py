"""The memory store's unique-job locks: one table, owned by the store, with
the same rules as the Redis store's (``lua/enqueue.lua``, ``settle.lua``,
``renew.lua``): see :class:`~chronos_trio.Unique`."""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from ...records._jobs import PENDING_STATES, Job, JobState, NewJob
from ...records._unique import Unique

#: States in which a debounce replaces the holder's payload and due time.
WAITING_STATES = frozenset({JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT})


@attrs.define
class Lock:
    holder: str
    mode: str
    #: Store-clock time the lock lapses (None: while its holder is pending).
    expires_at: float | None


class Claim(enum.Enum):
    """What an enqueue of a unique job does."""

    STORE = "store"  # store it; it holds the key
    DUPLICATE = "duplicate"  # the key is held: store nothing, report the holder
    REPLACE = "replace"  # debounce: replace the waiting holder's payload and due time


class UniqueLocks:
    """Unique keys per queue -> :class:`Lock`."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], Lock] = {}

    def claim(
        self, new: NewJob, now: float, holder_of: Callable[[str], Job | None]
    ) -> tuple[Claim, str, Job | None]:
        """What enqueueing ``new`` does, the ID of the key's holder ("" for
        STORE) and its record when it has one (REPLACE: the job to replace)."""
        unique = new.unique
        assert unique is not None and unique.key is not None
        lock = self._locks.get((new.queue, unique.key))
        if lock is None or (lock.expires_at is not None and lock.expires_at <= now):
            return Claim.STORE, "", None
        holder = holder_of(lock.holder)
        pending = holder is not None and holder.state in PENDING_STATES
        if not pending:
            if lock.mode == "throttle" and lock.expires_at is not None:
                return Claim.DUPLICATE, lock.holder, holder  # taken for its ttl after the run
            # a stale lock: its job is gone or finished (a throttle's without
            # an expiry never succeeded: it was lost without giving the key back)
            return Claim.STORE, "", None
        assert holder is not None
        if unique.mode == "debounce":
            if holder.state in WAITING_STATES:
                return Claim.REPLACE, lock.holder, holder
            return Claim.STORE, "", None  # it runs: the new job runs after, and takes the key
        return Claim.DUPLICATE, lock.holder, holder

    def take(self, queue: str, unique: Unique, job_id: str, now: float) -> None:
        assert unique.key is not None
        lapses = now + unique.ttl if unique.ttl is not None and unique.mode != "throttle" else None
        self._locks[(queue, unique.key)] = Lock(job_id, unique.mode, lapses)

    def _held_by(self, queue: str, unique: Unique | None, job_id: str) -> Lock | None:
        if unique is None or unique.key is None:
            return None
        lock = self._locks.get((queue, unique.key))
        return lock if lock is not None and lock.holder == job_id else None

    def succeeded(self, queue: str, unique: Unique | None, job_id: str, now: float) -> None:
        """The holder succeeded: a throttle keeps the key ``ttl`` more
        seconds, any other mode releases it."""
        lock = self._held_by(queue, unique, job_id)
        if lock is None or unique is None:
            return
        if lock.mode == "throttle" and unique.ttl is not None:
            lock.expires_at = now + unique.ttl
        else:
            self.release(queue, unique, job_id)

    def release(self, queue: str, unique: Unique | None, job_id: str) -> None:
        """Release the key if ``job_id`` holds it (dead, deleted)."""
        if self._held_by(queue, unique, job_id) is not None and unique is not None:
            assert unique.key is not None
            del self._locks[(queue, unique.key)]

    def renewed(
        self, queue: str, unique: Unique | None, job_id: str, lease_expires_at: float
    ) -> None:
        """The holder's lease was renewed: a lock that lapses lasts at least
        as long as the lease."""
        lock = self._held_by(queue, unique, job_id)
        if lock is not None and lock.expires_at is not None:
            lock.expires_at = max(lock.expires_at, lease_expires_at)
