"""Unique-key rules the backends that decide in Python share (the
MemoryStore and the SQLite store; PostgreSQL's ``chronos_enqueue`` and the
RedisStore's ``lua/enqueue.lua`` follow the same rules): what an enqueue of
a unique job does given the key's lock, and when a new lock lapses. See
:class:`~chronos_trio.Unique` for what each mode means.
"""

from __future__ import annotations

import enum

from ..records._jobs import PENDING_STATES, JobState
from ..records._unique import Unique

#: States in which a debounce replaces the holder's payload and due time.
WAITING_STATES = frozenset({JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT})


class Claim(enum.Enum):
    """What an enqueue of a unique job does."""

    STORE = "store"  # store it; it holds the key
    DUPLICATE = "duplicate"  # the key is held: store nothing, report the holder
    REPLACE = "replace"  # debounce: replace the waiting holder's payload and due time


def lock_live(expires_at: float | None, now: float) -> bool:
    """Whether a lock lapsing at ``expires_at`` (None: never by itself)
    still holds its key at ``now``."""
    return expires_at is None or expires_at > now


def judge_claim(
    mode: str, lock_mode: str, lock_expires_at: float | None, holder: JobState | None
) -> Claim:
    """What an enqueue in ``mode`` does with a key whose lock is live (see
    :func:`lock_live`), held in ``lock_mode`` until ``lock_expires_at`` by
    a job in state ``holder`` (None: gone)."""
    if holder is None or holder not in PENDING_STATES:
        if lock_mode == "throttle" and lock_expires_at is not None:
            return Claim.DUPLICATE  # taken for its ttl after the run
        # a stale lock: its job is gone or finished (a throttle's without
        # an expiry never succeeded: it was lost without giving the key back)
        return Claim.STORE
    if mode == "debounce":
        if holder in WAITING_STATES:
            return Claim.REPLACE
        return Claim.STORE  # it runs: the new job runs after, and takes the key
    return Claim.DUPLICATE


def lock_lapses(unique: Unique, now: float) -> float | None:
    """When the lock a job enqueued at ``now`` as ``unique`` takes lapses by
    itself: ``ttl`` after, except a throttle's (it lasts while its job is
    pending, then ``ttl`` after it succeeded); None without a ttl."""
    if unique.ttl is not None and unique.mode != "throttle":
        return now + unique.ttl
    return None
