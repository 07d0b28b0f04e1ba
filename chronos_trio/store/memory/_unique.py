"""The memory store's unique-job locks: one table, owned by the store, with
the same rules as the Redis store's (``lua/enqueue.lua``, ``settle.lua``,
``renew.lua``): see :class:`~chronos_trio.Unique`. What an enqueue does
with a held key is ``store._unique_rules``' judgement, shared with the
SQLite store."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ...records._jobs import Job, NewJob
from ...records._unique import Unique
from .._unique_rules import Claim as Claim
from .._unique_rules import judge_claim, lock_lapses, lock_live


@attrs.define
class Lock:
    holder: str
    mode: str
    #: Store-clock time the lock lapses (None: while its holder is pending).
    expires_at: float | None


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
        if lock is None or not lock_live(lock.expires_at, now):
            return Claim.STORE, "", None
        holder = holder_of(lock.holder)
        state = None if holder is None else holder.state
        claim = judge_claim(unique.mode, lock.mode, lock.expires_at, state)
        if claim is Claim.STORE:
            return claim, "", None
        return claim, lock.holder, holder

    def take(self, queue: str, unique: Unique, job_id: str, now: float) -> None:
        assert unique.key is not None
        self._locks[(queue, unique.key)] = Lock(job_id, unique.mode, lock_lapses(unique, now))

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
