"""RedisStore: the production :class:`~chronos_trio.store.Store` backend.

Same semantics as the MemoryStore (held to the same conformance suite), with
every state transition one Lua script over one partition's slot, and every
hot-path batch one pipelined round trip. See :mod:`.keys` for the layout,
:mod:`._jobs` for the hot path, :mod:`._waiting` for idle waiting,
:mod:`._leader` for leadership and triggers and :mod:`._check` for the store
checker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from ...records._jobs import EnqueueResult, Job, JobOutcome, JobRef, JobState, LeaseRef, NewJob
from ...records._notes import JobNotes, NoteWrite
from ...records._workers import WorkerInfo
from ...records._workflow import Arrival
from .._observer import StoreObserver
from .._roles import (
    LEASE_GRACE,
    AbortResult,
    Continuation,
    CountResult,
    GroupStatus,
    Leadership,
    LeaseResult,
    LimitUsage,
    NotesResult,
    PromoteResult,
    QueueStats,
    QueueTopology,
    QueueWeight,
    RecoverResult,
    RenewResult,
    ScheduleEdit,
    Settlement,
    SettleResult,
    Store,
    StoredSchedules,
    StoreError,
    TriggerResult,
)
from .._search_limits import SCAN_LIMIT
from . import (
    _admin,
    _enqueue,
    _enqueue_one,
    _flow,
    _jobs,
    _leader,
    _limits,
    _notes,
    _results,
    _schedules,
    _wait_lease,
    _waiting,
    _workers,
    _workflows,
)
from ._adapter import RedisAdapter, ReplicaWait
from ._commands import RedisCommands
from ._connect import SENTINEL_SCHEMES, connect, node_address, parse_store_url
from ._context import StoreContext
from ._group_commit import GroupCommit
from ._native import NodeClient
from ._scripts import Op
from .keys import KeySpace

if TYPE_CHECKING:
    from ...records._aggregates import KindCounts, MinuteCounts
    from ...records._flow_control import WorkflowRecord
    from .._check_results import CheckReport
    from .._search import JobQuery, SearchPage
    from ._blocking import Client

#: Longest single blocking read behind Sentinel (see ``from_url``).
SENTINEL_MAX_BLOCK = 5.0


@attrs.frozen
class RedisStoreStatistics:
    """Round trips and commands sent so far (one pipeline per node counts
    once), and what the scripts set aside so far: damaged records
    dead-lettered, index entries without a record quarantined, and records
    of a newer format met and left alone (counted each time they are met)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    round_trips: int
    commands: int
    script_loads: int
    blocking_waits: int
    #: WAITs sent after enqueues (``wait_replicas``; one per node per round trip).
    replica_waits: int = 0
    #: Behind Sentinel: times the sentinels were asked for the master, and
    #: how many of those answers named a new one (a failover seen).
    master_lookups: int = 0
    master_switches: int = 0
    damaged_dead: int = 0
    quarantined: int = 0
    newer_met: int = 0
    #: Chain links whose success settle stored their successor itself
    #: (no outbox entry; see ``lua/settle.lua``, kind 'c').
    chain_settles: int = 0


class RedisStore(Store):
    """A :class:`Store` in Redis or Redis Cluster, shared by any number of processes.

    Build it with :meth:`from_url`. ``namespace`` prefixes every key, so
    several independent stores can share one Redis. ``default_partitions``
    is the partition count of a queue's first version; the first store to
    use a queue records it in Redis, and it holds for every process after.
    Topology and paused flags are cached for ``topology_ttl`` seconds.
    ``client`` is a redis-py ``Redis``/``RedisCluster`` (made with
    ``decode_responses=False``; for Sentinel, ``Sentinel.master_for``) or a
    function returning one, called on first use.

    ``wait_replicas`` > 0: every enqueue round trip ends with ``WAIT
    wait_replicas wait_timeout`` in the same pipeline (concurrent enqueues
    that share a round trip share one WAIT), and ``enqueue_many`` returns only
    once that many replicas hold its jobs; when fewer acknowledged within
    ``wait_timeout`` seconds it raises StoreError, although the master holds
    the jobs (enqueue again with the same job IDs: that is idempotent).
    ``ValueError`` for a negative count or a timeout that is not positive.
    Other writes (settles, leases) never wait: see docs/guarantees.md.

    ``compact_succeeded``: a success kept a while (for its result, or
    retained) whose record is a hashtable (a payload over 64 bytes) is
    written again in its settle as a compact listpack, its payload in chunks,
    its empty lease fields dropped: about 600 instead of 1,470 bytes of Redis
    per job kept an hour for its result, for about 100,000 more Redis
    instructions in that job's settle (some 70 % of a drained job's Redis
    work). Off by default (the settle writes the record in place); the
    record stays format 2 either way, so workers with and without it, and
    older versions, read every record alike (docs/stores.md).
    """

    shared_across_processes = True
    #: A chain link's success stores its successor in the settle itself, on
    #: a single node (``Settlement.successor``; see ``lua/settle.lua``).
    continues_in_settle = True
    #: ... and stores it already leased to the settling worker when that
    #: worker asks (``Successor.lease_to``; ``SettleResult.leased``).
    leases_in_settle = True

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
        wait_replicas: int = 0,
        wait_timeout: float = 0.1,
        compact_succeeded: bool = False,
    ) -> None:
        if default_partitions < 1:
            raise ValueError(f"default_partitions must be >= 1, got {default_partitions}")
        if wait_replicas < 0:
            raise ValueError(f"wait_replicas must be >= 0, got {wait_replicas}")
        replica_wait = ReplicaWait(wait_replicas, wait_timeout) if wait_replicas else None
        self._adapter = RedisAdapter(
            client, description=description, max_block=max_block, native=native
        )
        self._ctx = StoreContext(
            self._adapter,
            KeySpace(namespace),
            default_partitions=default_partitions,
            topology_ttl=topology_ttl,
            replica_wait=replica_wait,
            compact_succeeded=compact_succeeded,
        )
        self._enqueues = GroupCommit(
            functools.partial(_enqueue.enqueue_many, self._ctx),
            lone=functools.partial(_enqueue_one.enqueue_lone, self._ctx),
        )
        self._commands = RedisCommands(self._adapter)
        self._done = _results.DoneListener(
            self._adapter.redis_py_client, self._ctx.keys.done_channel
        )

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
        wait_replicas: int | None = None,
        wait_timeout: float | None = None,
        compact_succeeded: bool | None = None,
        **redis_kwargs: Any,
    ) -> RedisStore:
        """A store for ``url``: ``redis://``, ``rediss://`` (TLS), ``unix://``,
        ``redis+cluster://host:port[,host:port...]`` (also ``rediss+cluster://``)
        or ``redis+sentinel://host:port[,host:port...]/service_name[/db]`` (also
        ``rediss+sentinel://``; the hosts are the sentinels). Credentials go in
        the URL (``redis://user:password@host``); a Sentinel URL's userinfo is
        the master's, and the sentinels' own go in ``sentinel_username`` and
        ``sentinel_password`` query options (or ``sentinel_kwargs={...}``).
        The query options ``namespace``, ``partitions``, ``wait_replicas``,
        ``wait_timeout`` and ``compact_succeeded`` are read here; explicit
        keyword arguments win over them. ``ValueError`` for a malformed URL,
        a ``compact_succeeded`` that is not a boolean, or a ``wait_timeout``
        not below ``socket_timeout`` (a WAIT's reply must come back before
        the socket times out). Nothing connects until first use, and every
        failure then is a StoreError. Socket operations time out after
        ``socket_timeout`` seconds; a blocking wait reads its reply with its own,
        longer timeout, so an idle worker can sleep in XREAD up to 30 s (5 s
        behind Sentinel, so a wait on a master that was just replaced ends
        soon, and the next one goes to the new master).

        A plain ``redis://`` or ``unix://`` URL (with ``native`` and no
        ``redis_kwargs``) is served without a redis-py client: redis-py is
        imported only if a feature needs it (see ``_native.NodeClient``)."""
        parsed = parse_store_url(
            url,
            namespace=namespace,
            default_partitions=default_partitions,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            socket_timeout=socket_timeout,
        )
        factory = functools.partial(
            connect,
            parsed.url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            **redis_kwargs,
        )
        client: Client | Callable[[], Client] = factory
        if native and not redis_kwargs:
            address = node_address(
                parsed.url, socket_timeout=socket_timeout, connect_timeout=connect_timeout
            )
            if address is not None:
                # (a client of our own: the public signature names redis-py's only)
                client = NodeClient(address, factory)  # type: ignore[assignment]
        return cls(
            client,
            max_block=SENTINEL_MAX_BLOCK if parsed.scheme in SENTINEL_SCHEMES else 30.0,
            namespace=parsed.namespace,
            default_partitions=parsed.default_partitions,
            topology_ttl=topology_ttl,
            description=parsed.description,
            native=native,
            wait_replicas=parsed.wait_replicas,
            wait_timeout=parsed.wait_timeout,
            compact_succeeded=(
                parsed.compact_succeeded if compact_succeeded is None else compact_succeeded
            ),
        )

    def observe_round_trips(self, observer: StoreObserver | None) -> None:
        """Every batch this store sends (one pipeline per node of a Cluster
        batch counts once) is reported to ``observer``; blocking waits are
        not. See ``store._observer``."""
        self._adapter.observer = observer

    def statistics(self) -> RedisStoreStatistics:
        s, c, watch = self._adapter.stats, self._ctx, self._adapter.watch
        return RedisStoreStatistics(
            s.round_trips,
            s.commands,
            s.script_loads,
            s.blocking_waits,
            s.replica_waits,
            watch.lookups if watch else 0,
            watch.switches if watch else 0,
            c.damaged_dead,
            c.quarantined,
            c.newer_met,
            c.chain_settles,
        )

    @property
    def namespace(self) -> str:
        return self._ctx.keys.namespace

    # -- producing ---------------------------------------------------------------------
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Concurrent calls share round trips (see ``_group_commit``)."""
        return await self._enqueues.submit(jobs)

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
        strict: bool = False,
    ) -> LeaseResult:
        return await _jobs.lease(
            self._ctx,
            queues,
            count,
            worker_id=worker_id,
            lease_duration=lease_duration,
            strict=strict,
        )

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        return await _jobs.renew(self._ctx, leases, lease_duration)

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        return await _jobs.settle(self._ctx, settlements)

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        return await _jobs.recover_expired(self._ctx, queues, limit)

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        return await self._ctx.run(
            _admin.trim(self._ctx, queues, dead_max_age, dead_max_count, keep_succeeded)
        )

    # -- waiting -------------------------------------------------------------------------
    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        await _waiting.wait_ready(self._ctx, queues, timeout, held=held)

    async def wait_lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
        timeout: float,
    ) -> LeaseResult | None:
        """One round trip on one node (see :mod:`._wait_lease`); None elsewhere."""
        return await _wait_lease.wait_lease(
            self._ctx,
            queues,
            count,
            worker_id=worker_id,
            lease_duration=lease_duration,
            strict=strict,
            timeout=timeout,
        )

    async def wait_scheduled(
        self, queues: Sequence[str], *, earlier_than: float | None, timeout: float
    ) -> None:
        await _waiting.wait_scheduled(self._ctx, queues, earlier_than=earlier_than, timeout=timeout)

    async def now(self) -> float:
        (t,) = await self._adapter.execute([Op.command(None, "TIME")])
        return self._ctx.observe_now(int(t[0]) + int(t[1]) / 1_000_000)

    # -- the worker registry ---------------------------------------------------------------
    async def beat_worker(self, worker: WorkerInfo, ttl: float) -> None:
        """One ``worker_beat.lua`` (one round trip), which also removes a
        few lapsed entries (see :mod:`._workers`)."""
        await self._ctx.run(_workers.beat(self._ctx, worker, ttl))

    async def unregister_worker(self, worker_id: str) -> None:
        await self._ctx.run(_workers.unregister(self._ctx, worker_id))

    async def workers(self) -> list[WorkerInfo]:
        return await self._ctx.run(_workers.workers(self._ctx))

    # -- inspection and administration --------------------------------------------------
    async def queues(self) -> list[str]:
        return await self._ctx.run(_admin.queue_names(self._ctx))

    async def stats(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        return await self._ctx.run(_admin.stats(self._ctx, queues))

    async def get_job(self, job_id: str, *, queue: str | None = None) -> Job | None:
        return await self._ctx.run(_admin.get_job(self._ctx, job_id, queue))

    async def list_jobs(
        self, queue: str, state: JobState, *, offset: int = 0, limit: int = 100
    ) -> list[Job]:
        return await self._ctx.run(_admin.list_jobs(self._ctx, queue, state, offset, limit))

    async def search_jobs(
        self,
        query: JobQuery,
        *,
        cursor: str | None = None,
        limit: int = 50,
        scan_limit: int = SCAN_LIMIT,
    ) -> SearchPage:
        from . import _search  # not on a worker's way to its first job

        return await self._ctx.run(_search.search_jobs(self._ctx, query, cursor, limit, scan_limit))

    async def limit_usage(self, queue: str) -> list[LimitUsage]:
        return await self._ctx.run(_limits.limit_usage(self._ctx, queue))

    async def run_now(self, job_id: str, *, queue: str | None = None) -> bool:
        return await self._ctx.run(_admin.run_now(self._ctx, job_id, queue))

    async def delete_job(self, job_id: str, *, queue: str | None = None) -> bool:
        return await self._ctx.run(_admin.delete_job(self._ctx, job_id, queue))

    async def abort(
        self, job_id: str, *, queue: str | None = None, reason: str = ""
    ) -> AbortResult:
        """One ``abort.lua`` where the job may live (a round trip; the flag of
        a leased job is field ``ab`` of its record, persisted with it)."""
        return await self._ctx.run(_admin.abort(self._ctx, job_id, queue, reason))

    async def purge_queue(self, queue: str, *, limit: int) -> CountResult:
        return await self._ctx.run(_admin.purge_queue(self._ctx, queue, limit))

    async def requeue_dead(self, queue: str, *, limit: int | None = None) -> CountResult:
        return await self._ctx.run(_admin.requeue_dead(self._ctx, queue, limit))

    async def set_paused(self, queue: str, paused: bool) -> None:
        await self._ctx.run(_admin.set_paused(self._ctx, queue, paused))

    # -- topology -----------------------------------------------------------------------
    async def topology(self, queue: str) -> QueueTopology:
        return await self._ctx.run(_admin.topology(self._ctx, queue))

    async def promote_queue_version(
        self, queue: str, version: int, partitions: int
    ) -> QueueTopology:
        return await self._ctx.run(
            _admin.promote_queue_version(self._ctx, queue, version, partitions)
        )

    async def complete_draining_version(self, queue: str, version: int) -> QueueTopology:
        return await self._ctx.run(_admin.complete_draining_version(self._ctx, queue, version))

    # -- leadership and schedule triggers ------------------------------------------------
    async def acquire_leadership(self, name: str, holder: str, ttl: float) -> Leadership | None:
        return await self._ctx.run(_leader.acquire(self._ctx, name, holder, ttl))

    async def renew_leadership(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        return await self._ctx.run(_leader.renew(self._ctx, name, holder, epoch, ttl))

    async def resign_leadership(self, name: str, holder: str, epoch: int) -> bool:
        return await self._ctx.run(_leader.renew(self._ctx, name, holder, epoch, None))

    async def current_leader(self, name: str) -> Leadership | None:
        return await self._ctx.run(_leader.current(self._ctx, name))

    async def enqueue_trigger(
        self, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
    ) -> TriggerResult:
        return await self._ctx.run(
            _leader.enqueue_trigger(self._ctx, name, epoch, schedule_id, fire_at, job)
        )

    async def schedule_last_fired(self, name: str) -> dict[str, float]:
        return await self._ctx.run(_leader.last_fired(self._ctx, name))

    # -- stored schedules (ScheduleStoreRole) ----------------------------------------------
    async def edit_schedule(
        self, name: str, edit: ScheduleEdit, schedule_id: str, definition: str | None = None
    ) -> int | None:
        """One ``schedule_edit.lua`` (one slot: the name's hash tag)."""
        return await self._ctx.run(_schedules.edit(self._ctx, name, edit, schedule_id, definition))

    async def schedules_version(self, name: str) -> int:
        """One ``GET`` of the name's version counter."""
        return await self._ctx.run(_schedules.version(self._ctx, name))

    async def stored_schedules(self, name: str) -> StoredSchedules:
        return await self._ctx.run(_schedules.read(self._ctx, name))

    # -- the store checker ----------------------------------------------------------------
    # -- Redis for handlers ----------------------------------------------------------------
    def commands(self) -> RedisCommands:
        """This store's connections for handlers' own Redis commands (what
        ``job.redis`` is on a worker of this store): see :class:`RedisCommands`."""
        return self._commands

    # -- results -------------------------------------------------------------------------
    async def outcome(self, ref: JobRef) -> JobOutcome | None:
        return await _results.outcome(self._ctx, ref)

    async def wait_outcome(self, ref: JobRef, *, timeout: float) -> JobOutcome | None:
        return await _results.wait_outcome(self._ctx, self._done, ref, timeout)

    # -- per-minute aggregates (AggregatesRole) -----------------------------------------------
    async def add_aggregates(self, counts: Sequence[KindCounts], *, keep: float) -> None:
        """One ``aggregates_add.lua`` per queue, in one round trip."""
        from . import _aggregates  # its records: not on a worker's way to its first job

        await _aggregates.add(self._ctx, counts, keep)

    async def aggregates(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        """One ``aggregates_read.lua`` per queue, in one round trip."""
        from . import _aggregates  # its records: not on a worker's way to its first job

        return await _aggregates.read(self._ctx, queues, since)

    # -- notes (NotesRole) ---------------------------------------------------------------------
    async def write_notes(self, writes: Sequence[NoteWrite]) -> NotesResult:
        """One ``notes_write.lua`` per partition, in one round trip."""
        return await _notes.write_notes(self._ctx, writes)

    async def job_notes(self, ref: JobRef) -> JobNotes | None:
        return await self._ctx.run(_notes.read_plan(self._ctx, ref))

    # -- workflows (FlowRole) -----------------------------------------------------------------
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        """One ``outbox_read.lua`` per partition of ``queues``, in one round trip."""
        return await self._ctx.run(_flow.continuations(self._ctx, queues, limit))

    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        await self._ctx.run(_flow.finish_continuations(self._ctx, done))

    async def next_continuations(
        self, queues: Sequence[str], limit: int, *, finished: Sequence[Continuation]
    ) -> list[Continuation]:
        """The ``ZREM`` of ``finished`` and the reads, in one round trip."""
        return await self._ctx.run(_flow.continuations(self._ctx, queues, limit, finished))

    async def wait_continuations(self, timeout: float) -> None:
        """Woken by this store's own settles (their reply says when one
        queued a continuation); others' are found when ``timeout`` passes."""
        await _flow.wait_continuations(self._ctx, timeout)

    async def group_arrive(
        self, arrivals: Sequence[Arrival], ttl: float
    ) -> list[list[bytes | None] | None]:
        return await self._ctx.run(_flow.group_arrive(self._ctx, arrivals, ttl))

    # -- workflow records (WorkflowRole) ----------------------------------------------------
    async def save_workflow(self, workflow_id: str, tree: str, first_kind: str, ttl: float) -> bool:
        """One ``workflow_save.lua`` on the workflow's own slot."""
        return await self._ctx.run(_workflows.save(self._ctx, workflow_id, tree, first_kind, ttl))

    async def start_workflow(
        self,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """One round trip on one node (``_workflows.start``: the record's
        save, then the enqueue, in one pipeline), to completion even if the
        caller is cancelled; a record that could not be saved has the jobs
        created in that round trip aborted before StoreError is raised. A
        Cluster keeps the two calls (the record's slot and the jobs' are on
        different masters, whose pipelines run at once)."""
        if not (self._ctx.one_node or await self._adapter.one_node()):
            return await super().start_workflow(workflow_id, tree, first_kind, ttl, jobs)
        plan = _workflows.start(self._ctx, workflow_id, tree, first_kind, ttl, jobs)
        try:
            return await self._ctx.run_shielded(plan)
        except _workflows.RecordNotSaved as failed:
            with trio.CancelScope(shield=True):
                await self._abort_started(jobs, failed.results)
            raise StoreError(
                f"Redis at {self._adapter.description}: workflow {workflow_id!r} not started:"
                f" its record could not be saved ({failed.error})"
            ) from failed.error

    async def _abort_started(
        self, jobs: Sequence[NewJob], results: Sequence[EnqueueResult]
    ) -> None:
        """Abort the jobs of a start whose record was not saved (those it created)."""
        reason = "its workflow's record could not be saved"
        for job, result in zip(jobs, results, strict=True):
            if result.created:
                await self.abort(result.job_id, queue=job.queue, reason=reason)

    async def workflow_record(self, workflow_id: str) -> WorkflowRecord | None:
        return await self._ctx.run(_workflows.read(self._ctx, workflow_id))

    async def cancel_workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """One ``workflow_cancel.lua`` on the workflow's own slot."""
        return await self._ctx.run(_workflows.cancel(self._ctx, workflow_id))

    async def cancelled(self, workflow_ids: Sequence[str]) -> set[str]:
        return await self._ctx.run(_workflows.cancelled(self._ctx, workflow_ids))

    async def keep_workflows(self, keeps: Mapping[str, float]) -> dict[str, float]:
        """One ``workflow_keep.lua`` per workflow, on its own slot."""
        return await self._ctx.run(_workflows.keep(self._ctx, keeps))

    async def group_status(self, group_ids: Sequence[str]) -> list[GroupStatus]:
        return await self._ctx.run(_flow.group_status(self._ctx, group_ids))

    async def check(
        self,
        queues: Sequence[str] | None = None,
        *,
        repair: bool = False,
        batch: int = 500,
        lease_grace: float = LEASE_GRACE,
    ) -> CheckReport:
        """Walks job hashes with SCAN on every primary, then each checked
        partition's indexes with ZSCAN and its quarantine hash with HSCAN,
        ``batch`` per command (see :mod:`._check`)."""
        from . import _check  # not on a worker's way to its first job

        return await _check.check(
            self._ctx, queues, repair=repair, batch=batch, lease_grace=lease_grace
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the connection pools. The store cannot be used afterwards."""
        self._done.stop()
        await self._adapter.aclose()
