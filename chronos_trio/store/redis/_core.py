"""The sans-IO core of the Redis store, shared by the Trio store and the
producers outside Trio (``chronos_trio.producers``).

Nothing here does IO or imports Trio. An operation that needs Redis is a
*plan*: a generator that yields what it needs and is sent the answer:

* :class:`Call` — run these ops as one batch (see ``RedisAdapter.execute``);
  it is sent their replies, in order;
* :class:`NeedMeta` — the topology and paused flags of some queues, through
  the driver's cache (the Trio store shares one refresh between concurrent
  callers; a producer runs :func:`meta_plan`); it is sent the
  ``{queue: QueueMeta}``.

Every operation of the store is a plan, in one style: the Trio store's
(``_enqueue``, ``_admin``, ``_leader``, ``_limits``, ``_flow``,
``_workers``, ``_watch``; see ``docs/architecture.md`` for the few still
awaiting the transport directly) and the producers'. A driver
(``StoreContext.run`` for Trio, the sync and asyncio executors of the
producers) runs a plan to its return value with :class:`Steps`, so the
routing, the retry rules and the reply decoding of an operation are written
once, and every client sends the same scripts with the same arguments. A
:class:`Call` goes to the driver's transport (``_transport``), itself a
sans-IO plan of the rules every batch follows. A plan that is
abandoned (an error, a cancellation) is closed, which runs its ``finally``
blocks.

:class:`RedisCore` holds what a plan reads and updates: the keys, the
topology cache and the store-clock hint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import attrs

from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from ...records._jobs import JobRef
from ...records._log import log_event
from .._partitioning import partition_of
from .._roles import QueueVersion, VersionState
from .._topology_placement import locate
from ._codec import decode_topology, encode_topology
from ._scripts import Op, ReplicaWait
from .keys import WAKE_KEEP as WAKE_KEEP
from .keys import KeySpace, PartitionKeys

T = TypeVar("T")


log = logging.getLogger("chronos_trio.store.redis")


# The requests are named tuples, not attrs classes: one or two are made per
# enqueue on the hot path, and a tuple costs a third of a frozen attrs init.
class Call(NamedTuple):
    """A plan's request: run ``ops`` (then ``after``, whose replies are not
    returned; with ``replicas``, ending with ``WAIT``) as one batch; the plan
    is sent the replies of ``ops``."""

    ops: Sequence[Op]
    after: Sequence[Op] = ()
    replicas: ReplicaWait | None = None


class NeedMeta(NamedTuple):
    """A plan's request: the :class:`QueueMeta` of ``queues`` (``fresh``:
    read now, not from the cache); the plan is sent ``{queue: QueueMeta}``."""

    queues: Sequence[str]
    fresh: bool = False


#: What a plan yields; drivers may add requests of their own (see ``_watch``).
Step = Call | NeedMeta
#: A plan returning ``T``: yields steps, is sent each step's answer.
Plan = Generator[Any, Any, T]


class Steps(Generic[T]):
    """How every driver walks a plan, whatever its runtime: iterate for the
    plan's requests, set :attr:`reply` to each one's answer before the next
    iteration, read :attr:`result` once the iteration ends. Used as a
    context manager, it closes the plan on the way out (an error, a
    cancellation), which runs its ``finally`` blocks. :func:`drive` and
    :func:`drive_async` are that loop; a driver with requests of its own
    (a result waiter's ``Block``) writes it out::

        with Steps(plan) as steps:
            for step in steps:
                steps.reply = await answer(step)
        return steps.result

    The driver answers each request with IO of its runtime (a Trio socket,
    a thread, an asyncio task); an exception it raises while answering
    leaves the loop and closes the plan."""

    __slots__ = ("_plan", "_started", "reply", "result")

    def __init__(self, plan: Plan[T]) -> None:
        self._plan = plan
        self._started = False
        #: The answer to the request last returned by the iteration.
        self.reply: Any = None
        #: The plan's return value, once the iteration ended.
        self.result: T

    def __enter__(self) -> Steps[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self._plan.close()

    def __iter__(self) -> Steps[T]:
        return self

    def __next__(self) -> Any:
        try:
            if self._started:
                return self._plan.send(self.reply)
            self._started = True
            return next(self._plan)
        except StopIteration as done:
            self.result = done.value
            raise StopIteration from None


def drive(plan: Plan[T], answer: Callable[[Any], Any]) -> T:
    """Run ``plan`` to its result, each request answered by ``answer``
    (blocking); closes the plan on the way out."""
    # Steps written out: this loop runs for every batch of the hot path.
    try:
        step = next(plan)
        while True:
            step = plan.send(answer(step))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()


async def drive_async(plan: Plan[T], answer: Callable[[Any], Awaitable[Any]]) -> T:
    """Run ``plan`` to its result, each request answered by awaiting
    ``answer`` (on any event loop: Trio, asyncio); closes the plan on the
    way out."""
    try:
        step = next(plan)
        while True:
            step = plan.send(await answer(step))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()


@attrs.frozen
class QueueMeta:
    """One queue's topology (None: never configured, so it holds no job) and
    paused flag, as read at ``fetched_at`` (time.monotonic)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

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


class RedisCore:
    """The keys, the topology cache and the clock hint of one client.

    Topology and paused flags are cached for ``topology_ttl`` seconds so the
    hot path does not pay a round trip per call; this client's own changes
    apply at once, other processes' changes within the TTL. Safe to share
    between threads: each change is one dict or attribute assignment (two
    threads refreshing at once only cost a round trip more).
    """

    def __init__(
        self,
        keys: KeySpace,
        *,
        default_partitions: int,
        topology_ttl: float,
        replica_wait: ReplicaWait | None = None,
    ) -> None:
        #: Enqueues end with WAIT for this many replicas (None: they do not wait).
        self.replica_wait = replica_wait
        self.keys = keys
        self.default_partitions = default_partitions
        self.topology_ttl = topology_ttl
        self._meta: dict[str, QueueMeta] = {}
        #: The wake-up of one ready job, per queue (an Op is immutable).
        self._wake_one: dict[str, Op] = {}
        #: Redis time minus local time, from the last script reply (a guess of
        #: the store's clock used only for wake-up hints, never for decisions).
        self.clock_offset = 0.0
        #: Queues whose stored topology could not be decoded (warned once each).
        self._bad_topology: set[str] = set()
        #: Set by the driver once its client is known to be one node's (a
        #: plain node or a Sentinel's master, not a Cluster's): a script may
        #: then touch keys of several slots (a plain job's enqueue writes its
        #: wake-up itself, ``_enqueue_one``). False until known.
        self.one_node = False

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

    def current_metas(
        self, names: Sequence[str], asked: float, fresh: bool, max_age: float | None
    ) -> dict[str, QueueMeta]:
        """The cached entries of ``names`` that are still good for a caller
        who asked at ``asked`` (``fresh``: read since then; otherwise younger
        than ``max_age``, default the TTL), in the order of ``names``."""
        age = self.topology_ttl if max_age is None else max_age
        got = {}
        for q in names:
            m = self._meta.get(q)
            if m is not None and (m.fetched_at >= asked if fresh else asked - m.fetched_at < age):
                got[q] = m
        return got

    def cached_metas(self, queues: Sequence[str]) -> dict[str, QueueMeta] | None:
        """Every one of ``queues`` (without repeats) from the cache, when all
        are younger than the TTL, as every driver's ``NeedMeta`` answers
        then; None when one must be read (the driver does that)."""
        asked = time.monotonic()
        age = self.topology_ttl
        got = {}
        cache = self._meta
        for q in queues:
            m = cache.get(q)
            if m is None or asked - m.fetched_at >= age:
                return None
            got[q] = m
        return got

    def cached_at(self, queue: str) -> float | None:
        """When ``queue``'s cached entry was read (time.monotonic), however
        old; None when it has none."""
        m = self._meta.get(queue)
        return None if m is None else m.fetched_at

    def cached_meta(self, queue: str) -> QueueMeta | None:
        """:meth:`cached_metas` of one queue: its entry while younger than
        the TTL, else None."""
        m = self._meta.get(queue)
        if m is None or time.monotonic() - m.fetched_at >= self.topology_ttl:
            return None
        return m

    def refresh_ops(self, queues: Sequence[str]) -> list[Op]:
        """One round trip reading the topology and paused flags of ``queues``."""
        return [
            Op.command(self.keys.topology, "HMGET", self.keys.topology, *queues),
            Op.command(self.keys.paused, "SMISMEMBER", self.keys.paused, *queues),
        ]

    def store_metas(
        self, queues: Sequence[str], replies: Sequence[Any], fetched_at: float
    ) -> dict[str, QueueMeta]:
        """Cache (and return) the replies of :meth:`refresh_ops`."""
        topo, paused = replies
        got = {}
        for q, enc, p in zip(queues, topo, paused, strict=True):
            versions, damage = self._decode(q, enc)
            got[q] = self._meta[q] = QueueMeta(versions, bool(p), fetched_at, damage)
        return got

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
                log_event(log, logging.WARNING, "queue not routed", queue=queue, error=str(exc))
            return None, str(exc)
        self._bad_topology.discard(queue)
        return versions, ""

    def remember(self, queue: str, versions: tuple[QueueVersion, ...]) -> None:
        """Record a topology this client just wrote."""
        old = self._meta.get(queue)
        self._meta[queue] = QueueMeta(versions, old.paused if old else False, time.monotonic())

    def any_open_cached(self, queues: Sequence[str]) -> bool:
        """Whether the cache (however old) knows one of ``queues`` as existing
        and not paused. A queue cached as unknown (no topology yet) is not
        open: a wake-up for it comes from its first enqueue, and a lease on
        the cached view would find nothing there (its caller would then
        wait a whole poll interval with the job ready)."""
        return any(
            (m := self._meta.get(q)) is not None and m.versions is not None and not m.paused
            for q in queues
        )

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
        """Tell every idle waiter of ``queue`` that ``n`` of its jobs became
        ready: one entry on the queue's wake-up stream, whatever ``n``.
        Every waiter reads it (nobody consumes it), so a waiter that never
        reads (a stopped process, a cut link) keeps it from nobody."""
        ops = []
        for queue, n in counts.items():
            if n == 1:
                ops += self.wake_one_ops(queue)
            elif n > 0:
                key = self.keys.wake_ready(queue)
                ops.append(Op.wake_command(key, "XADD", key, "MAXLEN", "~", WAKE_KEEP, "*", "n", n))
        return ops

    def wake_one_ops(self, queue: str) -> list[Op]:
        """:meth:`wake_ready_ops` of one job of ``queue`` (the one-at-a-time
        producer's: its op made once per queue; a new list each call)."""
        op = self._wake_one.get(queue)
        if op is None:
            key = self.keys.wake_ready(queue)
            op = self._wake_one[queue] = Op.wake_command(
                key, "XADD", key, "MAXLEN", "~", WAKE_KEEP, "*", "n", 1
            )
        return [op]

    def wake_scheduled_ops(self, due: dict[str, float]) -> list[Op]:
        """Tell every sleeping promoter that ``queue`` got a job due at (about)
        ``due`` (0: look now): one entry on the queue's scheduled stream."""
        ops = []
        for queue, at in due.items():
            key = self.keys.wake_scheduled(queue)
            ops.append(
                Op.wake_command(key, "XADD", key, "MAXLEN", "~", WAKE_KEEP, "*", "due", repr(at))
            )
        return ops


# -- plans ------------------------------------------------------------------------
def meta_plan(
    core: RedisCore,
    queues: Sequence[str],
    *,
    fresh: bool = False,
    max_age: float | None = None,
    asked: float | None = None,
) -> Plan[dict[str, QueueMeta]]:
    """Topology and paused flag of ``queues`` (in their order, without
    repeats): one round trip for the stale ones (``fresh``: for all of them,
    unless read since ``asked``). An entry is stale after ``max_age``
    seconds (default: the topology TTL)."""
    asked = time.monotonic() if asked is None else asked
    names = list(dict.fromkeys(queues))
    got = core.current_metas(names, asked, fresh, max_age)
    if len(got) < len(names):
        stale = [q for q in names if q not in got]
        now = time.monotonic()
        replies = yield Call(core.refresh_ops(stale))
        got.update(core.store_metas(stale, replies, now))
    return {q: got[q] for q in names}


def ensure_plan(
    core: RedisCore, queues: Sequence[str], *, fresh: bool = False
) -> Plan[dict[str, QueueMeta]]:
    """Like :func:`meta_plan` (through the driver's cache), but store the
    default topology of queues that have none (HSETNX: whoever is first
    decides the partition count for everyone)."""
    metas = None if fresh else core.cached_metas(queues)
    if metas is None:
        metas = yield NeedMeta(queues, fresh)
    missing = [q for q, m in metas.items() if m.versions is None and not m.damage]
    if missing:
        default = encode_topology(core.default_versions())
        topology = core.keys.topology
        yield Call([Op.command(topology, "HSETNX", topology, q, default) for q in missing])
        metas.update((yield NeedMeta(missing, True)))
    return metas


def queue_names_plan(core: RedisCore) -> Plan[list[str]]:
    """Every queue with a stored topology, sorted."""
    (names,) = yield Call([Op.command(core.keys.topology, "HKEYS", core.keys.topology)])
    return sorted(n.decode() for n in names)


def locations_plan(core: RedisCore, job_id: str, queue: str | None) -> Plan[list[PartitionKeys]]:
    """The one partition per live version where ``job_id`` would live (in
    ``queue``, or in every queue when None)."""
    names = [queue] if queue is not None else (yield from queue_names_plan(core))
    metas = yield NeedMeta(names, True)
    return [
        core.keys.partition(q, v.version, partition_of(job_id, v.partitions))
        for q in names
        for v in metas[q].versions or ()
    ]


def cached_locations_plan(core: RedisCore, job_id: str, queue: str) -> Plan[list[PartitionKeys]]:
    """Where ``job_id`` would live in ``queue`` by the cached topology (read
    only when none is cached): a job found there is the job, so a reader
    that finds it spends no round trip on the topology; one that does not
    must look again where :func:`locations_plan` (fresh) says."""
    metas = yield NeedMeta([queue])
    return [
        core.keys.partition(queue, v.version, partition_of(job_id, v.partitions))
        for v in metas[queue].versions or ()
    ]


def ref_locations_plan(core: RedisCore, ref: JobRef) -> Plan[list[PartitionKeys]]:
    """Where the job of ``ref`` may live: its partition when its queue and
    placement are known, else :func:`locations_plan`'s."""
    where = locate(ref.placement)
    if ref.queue is not None and where is not None:
        return [core.keys.partition(ref.queue, *where)]
    return (yield from locations_plan(core, ref.job_id, ref.queue))
