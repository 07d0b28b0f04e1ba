"""State shared by the RedisStore's modules: the adapter, the keys, and a
short-lived cache of each queue's topology and paused flag."""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from .._base import QueueVersion, VersionState
from ._adapter import RedisAdapter
from ._codec import decode_topology, encode_topology
from ._scripts import Op
from .keys import KeySpace, PartitionKeys

#: Wake-up lists are trimmed to this many tokens (a burst wakes at most this many waiters).
WAKE_CAP = 32


@attrs.frozen
class QueueMeta:
    """One queue's topology (None: never configured, so it holds no job) and
    paused flag, as read at ``fetched_at`` (time.monotonic)."""

    versions: tuple[QueueVersion, ...] | None
    paused: bool
    fetched_at: float

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
    ) -> None:
        self.adapter = adapter
        self.keys = keys
        self.default_partitions = default_partitions
        self.topology_ttl = topology_ttl
        self._meta: dict[str, QueueMeta] = {}
        #: Redis time minus local time, from the last script reply (a guess of
        #: the store's clock used only for wake-up hints, never for decisions).
        self.clock_offset = 0.0

    # -- clock hint ---------------------------------------------------------------
    def observe_now(self, redis_now: bytes | str | float) -> float:
        now = float(redis_now)
        self.clock_offset = now - time.time()
        return now

    def estimated_now(self) -> float:
        return time.time() + self.clock_offset

    # -- topology cache -----------------------------------------------------------
    def default_versions(self) -> tuple[QueueVersion, ...]:
        return (QueueVersion(1, self.default_partitions, VersionState.ACTIVE),)

    async def meta(self, queues: Sequence[str], *, fresh: bool = False) -> dict[str, QueueMeta]:
        """Topology and paused flag of ``queues``: one round trip for the stale ones."""
        now = time.monotonic()
        out: dict[str, QueueMeta] = {}
        stale: list[str] = []
        for q in dict.fromkeys(queues):
            m = self._meta.get(q)
            if m is not None and not fresh and now - m.fetched_at < self.topology_ttl:
                out[q] = m
            else:
                stale.append(q)
        if stale:
            topo, paused = await self.adapter.execute(
                [
                    Op.command(self.keys.topology, "HMGET", self.keys.topology, *stale),
                    Op.command(self.keys.paused, "SMISMEMBER", self.keys.paused, *stale),
                ]
            )
            for q, enc, p in zip(stale, topo, paused, strict=True):
                out[q] = self._meta[q] = QueueMeta(
                    decode_topology(enc) if enc else None, bool(p), now
                )
        return out

    async def ensure(self, queues: Sequence[str], *, fresh: bool = False) -> dict[str, QueueMeta]:
        """Like :meth:`meta`, but store the default topology of queues that have none
        (HSETNX: whoever is first decides the partition count for everyone)."""
        metas = await self.meta(queues, fresh=fresh)
        missing = [q for q, m in metas.items() if m.versions is None]
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

    def remember_paused(self, queue: str, paused: bool) -> None:
        old = self._meta.get(queue)
        if old is not None:
            self._meta[queue] = attrs.evolve(old, paused=paused)

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
