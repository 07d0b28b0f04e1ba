"""State shared by the RedisStore's modules: the adapter, the keys, and a
short-lived cache of each queue's topology and paused flag."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import attrs
import trio

from .._roles import QueueVersion, SetAside, VersionState
from ._adapter import RedisAdapter, ReplicaWait
from ._codec import decode_topology, encode_topology
from ._scripts import Op
from .keys import KeySpace, PartitionKeys

#: Wake-up lists are trimmed to this many tokens (a burst wakes at most this many waiters).
WAKE_CAP = 32

log = logging.getLogger("chronos_trio.store.redis")


@attrs.frozen
class QueueMeta:
    """One queue's topology (None: never configured, so it holds no job) and
    paused flag, as read at ``fetched_at`` (time.monotonic)."""

    versions: tuple[QueueVersion, ...] | None
    paused: bool
    fetched_at: float
    #: Why the stored topology could not be decoded ("" when it could, or
    #: when there is none); ``versions`` is None then.
    damage: str = ""

    @property
    def active(self) -> QueueVersion | None:
        for v in self.versions or ():
            if v.state is VersionState.ACTIVE:
                return v
        return None


class StoreContext:
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
    ) -> None:
        self.adapter = adapter
        #: Enqueues end with WAIT for this many replicas (None: they do not wait).
        self.replica_wait = replica_wait
        self.keys = keys
        self.default_partitions = default_partitions
        self.topology_ttl = topology_ttl
        self._meta: dict[str, QueueMeta] = {}
        self._refresh_lock = trio.Lock()
        #: Redis time minus local time, from the last script reply (a guess of
        #: the store's clock used only for wake-up hints, never for decisions).
        self.clock_offset = 0.0
        #: queues of the last promote_due -> (its next_due_at, time.monotonic())
        self._promoted: dict[frozenset[str], tuple[float | None, float]] = {}
        #: What scripts set aside so far (see :meth:`count_aside`).
        self.damaged_dead = 0
        self.quarantined = 0
        self.newer_met = 0
        #: Queues whose stored topology could not be decoded (warned once each).
        self._bad_topology: set[str] = set()

    def count_aside(self, aside: SetAside) -> SetAside:
        """Count what an operation set aside (for ``statistics()``); returns it."""
        if aside:
            self.damaged_dead += len(aside.dead)
            self.quarantined += len(aside.quarantined)
            self.newer_met += len(aside.newer)
        return aside

    # -- clock hint ---------------------------------------------------------------
    def observe_now(self, redis_now: bytes | str | float) -> float:
        now = float(redis_now)
        self.clock_offset = now - time.time()
        return now

    def estimated_now(self) -> float:
        return time.time() + self.clock_offset

    # -- promote / wait_scheduled hand-off -------------------------------------------
    def record_promote(self, queues: Sequence[str], next_due: float | None) -> None:
        if len(self._promoted) > 64:
            self._promoted.clear()
        self._promoted[frozenset(queues)] = (next_due, time.monotonic())

    def promoted_recently(self, queues: Sequence[str], earlier_than: float | None) -> bool:
        """Whether promote_due over exactly ``queues`` found, within the last
        0.5 s, nothing due before ``earlier_than`` (None: nothing at all)."""
        rec = self._promoted.get(frozenset(queues))
        if rec is None or time.monotonic() - rec[1] > 0.5:
            return False
        next_due = rec[0]
        if next_due is None:
            return True
        return earlier_than is not None and next_due >= earlier_than

    # -- topology cache -----------------------------------------------------------
    def default_versions(self) -> tuple[QueueVersion, ...]:
        return (QueueVersion(1, self.default_partitions, VersionState.ACTIVE),)

    async def meta(
        self, queues: Sequence[str], *, fresh: bool = False, max_age: float | None = None
    ) -> dict[str, QueueMeta]:
        """Topology and paused flag of ``queues``: one round trip for the stale ones
        (``fresh``: for all of them). An entry is stale after ``max_age``
        seconds (default: the topology TTL). Concurrent callers share one refresh."""
        asked = time.monotonic()
        names = list(dict.fromkeys(queues))
        age = self.topology_ttl if max_age is None else max_age

        def current(q: str) -> bool:
            m = self._meta.get(q)
            if m is None:
                return False
            return m.fetched_at >= asked if fresh else asked - m.fetched_at < age

        if not all(current(q) for q in names):
            async with self._refresh_lock:
                # whoever held the lock may have just refreshed what we need
                stale = [q for q in names if not current(q)]
                if stale:
                    now = time.monotonic()
                    topo, paused = await self.adapter.execute(
                        [
                            Op.command(self.keys.topology, "HMGET", self.keys.topology, *stale),
                            Op.command(self.keys.paused, "SMISMEMBER", self.keys.paused, *stale),
                        ]
                    )
                    for q, enc, p in zip(stale, topo, paused, strict=True):
                        versions, damage = self._decode(q, enc)
                        self._meta[q] = QueueMeta(versions, bool(p), now, damage)
        return {q: self._meta[q] for q in names}

    def _decode(self, queue: str, enc: bytes | None) -> tuple[tuple[QueueVersion, ...] | None, str]:
        """A queue's stored topology and why it is damaged: (None, "") when
        it has none; (None, why) when it cannot be decoded: then the queue is
        not routed (its jobs are neither leased nor stored, enqueue raises
        StoreError) and the others go on. Warned once per queue."""
        if enc is None:
            return None, ""
        try:
            versions = decode_topology(enc)
        except ValueError as exc:
            if queue not in self._bad_topology:
                self._bad_topology.add(queue)
                log.warning("queue %r is not routed: %s", queue, exc)
            return None, str(exc)
        self._bad_topology.discard(queue)
        return versions, ""

    async def ensure(self, queues: Sequence[str], *, fresh: bool = False) -> dict[str, QueueMeta]:
        """Like :meth:`meta`, but store the default topology of queues that have none
        (HSETNX: whoever is first decides the partition count for everyone)."""
        metas = await self.meta(queues, fresh=fresh)
        missing = [q for q, m in metas.items() if m.versions is None and not m.damage]
        if missing:
            default = encode_topology(self.default_versions())
            await self.adapter.execute(
                [
                    Op.command(self.keys.topology, "HSETNX", self.keys.topology, q, default)
                    for q in missing
                ]
            )
            metas.update(await self.meta(missing, fresh=True))
        return metas

    def remember(self, queue: str, versions: tuple[QueueVersion, ...]) -> None:
        """Record a topology this store just wrote."""
        old = self._meta.get(queue)
        self._meta[queue] = QueueMeta(versions, old.paused if old else False, time.monotonic())

    def any_open_cached(self, queues: Sequence[str]) -> bool:
        """Whether the cache (however old) knows one of ``queues`` as not paused."""
        return any((m := self._meta.get(q)) is not None and not m.paused for q in queues)

    def forget(self, queue: str) -> None:
        self._meta.pop(queue, None)

    def partitions_of(self, queue: str, meta: QueueMeta) -> list[PartitionKeys]:
        """Keys of every partition of every live version (active and draining)."""
        return [
            self.keys.partition(queue, v.version, p)
            for v in meta.versions or ()
            for p in range(v.partitions)
        ]

    # -- wake-ups -----------------------------------------------------------------
    def wake_ready_ops(self, counts: dict[str, int]) -> list[Op]:
        """Push up to WAKE_CAP tokens per queue: one per job that became ready, so a
        burst wakes that many idle waiters, each wake-up pops exactly one token."""
        ops = []
        for queue, n in counts.items():
            if n > 0:
                key = self.keys.wake_ready(queue)
                ops.append(Op.command(key, "LPUSH", key, *([b"1"] * min(n, WAKE_CAP))))
                ops.append(Op.command(key, "LTRIM", key, 0, WAKE_CAP - 1))
        return ops

    def wake_scheduled_ops(self, due: dict[str, float]) -> list[Op]:
        """Tell sleeping promoters that ``queue`` got a job due at (about) ``due``."""
        ops = []
        for queue, at in due.items():
            key = self.keys.wake_scheduled(queue)
            ops.append(Op.command(key, "LPUSH", key, repr(at)))
            ops.append(Op.command(key, "LTRIM", key, 0, WAKE_CAP - 1))
        return ops
