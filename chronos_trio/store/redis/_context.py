"""State shared by the RedisStore's modules: the adapter, the keys, and a
short-lived cache of each queue's topology and paused flag (the sans-IO
:class:`~._core.RedisCore`), and the Trio driver of its plans."""

from __future__ import annotations

import secrets
import time
import weakref
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ...records._attrs_methods import fields_eq, fields_repr
from .._flag import Flag
from .._roles import SetAside
from ._adapter import RedisAdapter
from ._core import (
    Call,
    NeedMeta,
    Plan,
    RedisCore,
    Step,
    T,
    drive_async,
    ensure_plan,
    meta_plan,
)
from ._core import QueueMeta as QueueMeta
from ._scripts import ReplicaWait
from .keys import KeySpace

#: A waiter whose lease after a wake-up found nothing (another took the
#: job) waits this long before it looks at the next one, doubling up to
#: COLD_MAX while it keeps losing (see ``_waiting``).
COLD_MIN = 0.01
COLD_MAX = 0.1
#: ... unless its last lease that got jobs was this recent: the wake-up may
#: then be for a job it took itself (a look or a lease can see a job before
#: its wake-up is written), which says nothing about other waiters.
OWN_JOB_GRACE = 0.1


@attrs.define
class WakeSeen:
    """What one task has seen of the wake-up streams, and how it fared (see
    ``_waiting``)."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    #: Stream key -> the ID of the last entry seen there (``0-0``: none).
    ids: dict[str, bytes] = attrs.Factory(dict)
    #: time.monotonic() when one of ``ids`` last changed (its reply in hand).
    at: float = 0.0
    #: The last ready wait returned for a job (not for its timeout), and no
    #: lease has told yet whether this task got one.
    woke: bool = False
    #: How long this task lets the others go first on a ready wake-up (0:
    #: it got jobs after its last one, so it leases at once).
    cold: float = 0.0
    #: time.monotonic() when a lease of this task last got jobs.
    got_at: float = -OWN_JOB_GRACE

    def leased(self, got: bool, held: bool) -> None:
        """A lease of this task got jobs (``got``), or found the ready ones
        held back by flow control (``held``), or nothing: that makes it hot;
        leaves it as it was; or, after a wake-up and not just after jobs of
        its own, makes it colder."""
        woke, self.woke = self.woke, False
        now = time.monotonic()
        if got:
            self.cold = 0.0
            self.got_at = now
        elif woke and not held and now - self.got_at > OWN_JOB_GRACE:
            self.colder()

    def colder(self) -> None:
        """This task lost a job to another waiter (or looked and found it
        taken): wait longer before the next look, up to COLD_MAX."""
        self.cold = min(max(2 * self.cold, COLD_MIN), COLD_MAX)

    def update(self, key: str, last: bytes) -> bool:
        """Record ``last`` as the last entry seen on ``key``; whether that changed it."""
        if self.ids.get(key) == last:
            return False
        self.ids[key] = last
        self.at = time.monotonic()
        return True


class StoreContext(RedisCore):
    """What every RedisStore module needs.

    Topology and paused flags are cached for ``topology_ttl`` seconds so the
    hot path does not pay a round trip per call; this store's own changes
    apply at once, other processes' changes within the TTL. Waiters re-read
    them after every wake-up, so a queue's first jobs (or a resume) elsewhere
    are seen at once by a worker that was idle.
    """

    def __init__(
        self,
        adapter: RedisAdapter,
        keys: KeySpace,
        *,
        default_partitions: int,
        topology_ttl: float,
        replica_wait: ReplicaWait | None = None,
        compact_succeeded: bool = False,
    ) -> None:
        super().__init__(
            keys,
            default_partitions=default_partitions,
            topology_ttl=topology_ttl,
            replica_wait=replica_wait,
        )
        self.adapter = adapter
        #: A success kept a while is rewritten as a compact record (settle
        #: kind 'k', see ``lua/lib/succeed_record.lua``).
        self.compact_succeeded = compact_succeeded
        self._refresh_lock = trio.Lock()
        #: queues of the last promote_due -> (its next_due_at, time.monotonic()
        #: before it was sent)
        self._promoted: dict[frozenset[str], tuple[float | None, float]] = {}
        #: queue -> its next due time as the last promote_due over it saw it
        self._next_due: dict[str, float] = {}
        #: What each waiting task has seen of the wake-up streams; weak, so a
        #: task that ends leaves nothing behind.
        self._wake_seen: weakref.WeakKeyDictionary[trio.lowlevel.Task, WakeSeen] = (
            weakref.WeakKeyDictionary()
        )
        #: Where this store starts among a queue's partitions when due times
        #: are equal (a Cluster lease, see ``_jobs.lease``): random, so
        #: concurrent workers start from different partitions.
        self.tie_rotation = secrets.randbelow(1 << 16)
        #: What scripts set aside so far (see :meth:`count_aside`).
        self.damaged_dead = 0
        self.quarantined = 0
        self.newer_met = 0
        #: Set when a settle of this store queued a workflow continuation.
        self.outbox_filled = Flag()
        #: Chain links whose settle stored their successor (no outbox entry).
        self.chain_settles = 0

    def count_aside(self, aside: SetAside) -> SetAside:
        """Count what an operation set aside (for ``statistics()``); returns it."""
        if aside:
            self.damaged_dead += len(aside.dead)
            self.quarantined += len(aside.quarantined)
            self.newer_met += len(aside.newer)
        return aside

    # -- running plans --------------------------------------------------------------
    async def run(self, plan: Plan[T]) -> T:
        """Run a sans-IO plan (see ``_core``): the one driver of every
        operation of the Trio store. Its batches go through the transport
        (:meth:`RedisAdapter.execute`), its topology reads through
        :meth:`meta`. Raises what they raise (the plan is closed then)."""
        return await drive_async(plan, self._answer)

    async def run_shielded(self, plan: Plan[T]) -> T:
        """:meth:`run`, to completion even if the caller is cancelled (the
        cancellation is delivered at its next checkpoint), as in a shielded
        scope, but with no scope on the hot path: its batches go through
        ``RedisAdapter.execute_lone`` (whose native round trips shield
        themselves and are timed without a scope), and any other wait (a
        topology read) is in a shielded scope of its own. Raises what
        :meth:`run` raises."""
        adapter = self.adapter
        reply: Any
        try:
            step = next(plan)
            while True:
                if type(step) is Call:
                    reply = await adapter.execute_lone(step.ops, step.after, step.replicas)
                elif (
                    type(step) is NeedMeta
                    and not step.fresh
                    and (cached := self.cached_metas(step.queues))
                ):
                    reply = cached  # from the cache: no wait, no scope
                else:
                    with trio.CancelScope(shield=True):
                        reply = await self._answer(step)
                step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            plan.close()

    async def _answer(self, step: Step) -> Any:
        if type(step) is Call:
            return await self.adapter.execute(step.ops, step.after, replicas=step.replicas)
        if type(step) is NeedMeta:
            return await self.meta(step.queues, fresh=step.fresh)
        raise TypeError(f"StoreContext cannot run a {type(step).__name__} step")

    # -- promote / wait_scheduled hand-off -------------------------------------------
    def record_promote(
        self, queues: Sequence[str], next_due: dict[str, float], sent: float
    ) -> None:
        """promote_due over ``queues``, sent at ``sent`` (time.monotonic()),
        left ``next_due`` (queue -> its next due time; a queue not in it has
        nothing scheduled)."""
        if len(self._promoted) > 64:
            self._promoted.clear()
        if len(self._next_due) > 4096:
            self._next_due.clear()
        self._promoted[frozenset(queues)] = (min(next_due.values(), default=None), sent)
        for queue in queues:
            if queue in next_due:
                self._next_due[queue] = next_due[queue]
            else:
                self._next_due.pop(queue, None)

    def due_by_now(self, queues: Sequence[str]) -> list[str]:
        """The ``queues`` whose next due time, as the last promote_due saw
        it, has come (by the estimated store clock, within a millisecond)."""
        now = self.estimated_now() + 0.001
        return [q for q in queues if self._next_due.get(q, now + 1.0) <= now]

    def promoted_recently(
        self, queues: Sequence[str], earlier_than: float | None, *, after: float
    ) -> bool:
        """Whether promote_due over exactly ``queues``, sent after ``after``
        (time.monotonic()) and within the last 0.5 s, found nothing due
        before ``earlier_than`` (None: nothing at all)."""
        rec = self._promoted.get(frozenset(queues))
        if rec is None or rec[1] <= after or time.monotonic() - rec[1] > 0.5:
            return False
        next_due = rec[0]
        if next_due is None:
            return True
        return earlier_than is not None and next_due >= earlier_than

    def leased(self, got: bool, held: bool) -> None:
        """Tell the calling task's wake-up record how its lease fared (see
        :meth:`WakeSeen.leased`); a task that never waited has none."""
        seen = self._wake_seen.get(trio.lowlevel.current_task())
        if seen is not None:
            seen.leased(got, held)

    def wake_seen(self) -> WakeSeen:
        """What the calling task has seen of the wake-up streams (its own
        record, updated in place by ``_waiting``): a wait may block from
        those IDs without looking first because this task looked (leased,
        promoted) after it saw them."""
        task = trio.lowlevel.current_task()
        seen = self._wake_seen.get(task)
        if seen is None:
            seen = self._wake_seen[task] = WakeSeen()
        return seen

    # -- topology cache -----------------------------------------------------------
    async def meta(
        self, queues: Sequence[str], *, fresh: bool = False, max_age: float | None = None
    ) -> dict[str, QueueMeta]:
        """Topology and paused flag of ``queues``: one round trip for the stale ones
        (``fresh``: for all of them). An entry is stale after ``max_age``
        seconds (default: the topology TTL). Concurrent callers share one refresh."""
        asked = time.monotonic()
        names = list(dict.fromkeys(queues))
        got = self.current_metas(names, asked, fresh, max_age)
        if len(got) == len(names):
            return got
        async with self._refresh_lock:
            # whoever held the lock may have just refreshed what we need
            got = await self.run(meta_plan(self, names, fresh=fresh, max_age=max_age, asked=asked))
            # the client is made by now: tell the plans what it is (RedisCore.one_node)
            self.one_node = await self.adapter.one_node()
            return got

    async def ensure(self, queues: Sequence[str], *, fresh: bool = False) -> dict[str, QueueMeta]:
        """Like :meth:`meta`, but store the default topology of queues that have none
        (HSETNX: whoever is first decides the partition count for everyone)."""
        return await self.run(ensure_plan(self, queues, fresh=fresh))
