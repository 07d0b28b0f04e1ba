"""RedisStore: the production :class:`~chronos_trio.store.Store` backend.

Same semantics as the MemoryStore (held to the same conformance suite), with
every state transition one Lua script over one partition's slot, and every
hot-path batch one pipelined round trip. See :mod:`.keys` for the layout,
:mod:`._jobs` for the hot path, :mod:`._waiting` for idle waiting and
:mod:`._leader` for leadership and triggers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs

from ...records._jobs import EnqueueResult, Job, JobState, LeaseRef, NewJob
from .._roles import (
    CountResult,
    FencedResults,
    Leadership,
    LeaseBatch,
    PromoteResult,
    QueueStats,
    QueueTopology,
    QueueWeight,
    RecoverResult,
    Settlement,
    Store,
    TriggerResult,
)
from .._schemes import redact
from . import _admin, _enqueue, _jobs, _leader, _waiting
from ._adapter import Client, RedisAdapter
from ._connect import connect, redis_schemes, split_store_options
from ._context import StoreContext
from ._group_commit import GroupCommit
from ._scripts import Op
from .keys import KeySpace


@attrs.frozen
class RedisStoreStatistics:
    """Round trips and commands sent so far (one pipeline per node counts
    once), and what the scripts set aside so far: damaged records
    dead-lettered, index entries without a record quarantined, and records
    of a newer format met and left alone (counted each time they are met)."""

    round_trips: int
    commands: int
    script_loads: int
    blocking_waits: int
    damaged_dead: int = 0
    quarantined: int = 0
    newer_met: int = 0


class RedisStore(Store):
    """A :class:`Store` in Redis or Redis Cluster, shared by any number of processes.

    Build it with :meth:`from_url`. ``namespace`` prefixes every key, so
    several independent stores can share one Redis. ``default_partitions``
    is the partition count of a queue's first version; the first store to
    use a queue records it in Redis, and it holds for every process after.
    Topology and paused flags are cached for ``topology_ttl`` seconds.
    ``client`` is a redis-py ``Redis``/``RedisCluster`` (made with
    ``decode_responses=False``) or a function returning one, called on first use.
    """

    shared_across_processes = True

    def __init__(
        self,
        client: Client | Callable[[], Client],
        *,
        namespace: str = "chronos",
        default_partitions: int = 1,
        topology_ttl: float = 1.0,
        description: str = "redis",
        max_block: float = 30.0,
        native: bool = True,
    ) -> None:
        if default_partitions < 1:
            raise ValueError(f"default_partitions must be >= 1, got {default_partitions}")
        self._adapter = RedisAdapter(
            client, description=description, max_block=max_block, native=native
        )
        self._ctx = StoreContext(
            self._adapter,
            KeySpace(namespace),
            default_partitions=default_partitions,
            topology_ttl=topology_ttl,
        )
        self._enqueues = GroupCommit(functools.partial(_enqueue.enqueue_many, self._ctx))

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        default_partitions: int | None = None,
        topology_ttl: float = 1.0,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        native: bool = True,
        **redis_kwargs: Any,
    ) -> RedisStore:
        """A store for ``url``: ``redis://``, ``rediss://`` (TLS), ``unix://`` or
        ``redis+cluster://host:port[,host:port...]`` (also ``rediss+cluster://``).
        Credentials go in the URL (``redis://user:password@host``). The query
        options ``namespace`` and ``partitions`` are read here; explicit keyword
        arguments win over them. Nothing connects until first use, and every
        failure then is a StoreError. Socket operations time out after
        ``socket_timeout`` seconds; a blocking wait reads its reply with its own,
        longer timeout, so an idle worker can sleep in BLPOP up to 30 s."""
        clean, opts = split_store_options(url)
        if urlsplit(clean).scheme.lower() not in redis_schemes():
            raise ValueError(
                f"unsupported Redis URL {redact(clean)!r}; expected one of "
                + ", ".join(f"{s}://" for s in redis_schemes())
            )
        return cls(
            functools.partial(
                connect,
                clean,
                socket_timeout=socket_timeout,
                connect_timeout=connect_timeout,
                **redis_kwargs,
            ),
            max_block=30.0,
            namespace=namespace or opts.get("namespace") or "chronos",
            default_partitions=default_partitions or int(opts.get("partitions") or 1),
            topology_ttl=topology_ttl,
            description=redact(clean),
            native=native,
        )

    def statistics(self) -> RedisStoreStatistics:
        s, c = self._adapter.stats, self._ctx
        return RedisStoreStatistics(
            s.round_trips,
            s.commands,
            s.script_loads,
            s.blocking_waits,
            c.damaged_dead,
            c.quarantined,
            c.newer_met,
        )

    @property
    def namespace(self) -> str:
        return self._ctx.keys.namespace

    # -- producing ---------------------------------------------------------------------
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Concurrent calls share round trips (see ``_group_commit``)."""
        return await self._enqueues.enqueue_many(jobs)

    # -- the worker's hot path ---------------------------------------------------------
    async def promote_due(self, queues: Sequence[str], limit: int) -> PromoteResult:
        return await _jobs.promote_due(self._ctx, queues, limit)

    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
    ) -> LeaseBatch:
        """A :class:`~chronos_trio.store.LeaseBatch`: the leased jobs (a
        list) and, in ``aside``, the records the lease set aside."""
        return await _jobs.lease(
            self._ctx, queues, count, worker_id=worker_id, lease_duration=lease_duration
        )

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> FencedResults:
        return await _jobs.renew(self._ctx, leases, lease_duration)

    async def settle(self, settlements: Sequence[Settlement]) -> FencedResults:
        return await _jobs.settle(self._ctx, settlements)

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        return await _jobs.recover_expired(self._ctx, queues, limit)

    async def trim(
        self, queues: Sequence[str], *, dead_max_age: float | None, dead_max_count: int | None
    ) -> CountResult:
        return await _admin.trim(self._ctx, queues, dead_max_age, dead_max_count)

    # -- waiting -------------------------------------------------------------------------
    async def wait_ready(self, queues: Sequence[str], timeout: float) -> None:
        await _waiting.wait_ready(self._ctx, queues, timeout)

    async def wait_scheduled(
        self, queues: Sequence[str], *, earlier_than: float | None, timeout: float
    ) -> None:
        await _waiting.wait_scheduled(self._ctx, queues, earlier_than=earlier_than, timeout=timeout)

    async def now(self) -> float:
        (t,) = await self._adapter.execute([Op.command(None, "TIME")])
        return self._ctx.observe_now(int(t[0]) + int(t[1]) / 1_000_000)

    # -- inspection and administration --------------------------------------------------
    async def queues(self) -> list[str]:
        return await _admin.queue_names(self._ctx)

    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        return await _admin.stats(self._ctx, queues)

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        return await _admin.get_job(self._ctx, job_id, queue)

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        return await _admin.list_jobs(self._ctx, queue, state, offset, limit)

    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        return await _admin.run_now(self._ctx, job_id, queue)

    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        return await _admin.delete_job(self._ctx, job_id, queue)

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        return await _admin.requeue_dead(self._ctx, queue, limit)

    async def set_paused(self, queue: str, paused: bool) -> None:
        await _admin.set_paused(self._ctx, queue, paused)

    # -- topology -----------------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        return await _admin.topology(self._ctx, queue)

    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        return await _admin.promote_queue_version(self._ctx, queue, version, partitions)

    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        return await _admin.complete_draining_version(self._ctx, queue, version)

    # -- leadership and schedule triggers ------------------------------------------------
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        return await _leader.acquire(self._ctx, name, holder, ttl)

    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        return await _leader.renew(self._ctx, name, holder, epoch, ttl)

    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        return await _leader.renew(self._ctx, name, holder, epoch, None)

    async def current_leader(self, name: str) -> Leadership | None:
        return await _leader.current(self._ctx, name)

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        return await _leader.enqueue_trigger(self._ctx, name, epoch, schedule_id, fire_at, job)

    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        return await _leader.last_fired(self._ctx, name)

    # -- lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the connection pools. The store cannot be used afterwards."""
        await self._adapter.aclose()
