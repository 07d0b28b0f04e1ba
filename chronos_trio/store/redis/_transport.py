"""The one transport of the Redis store: how a batch of ops reaches Redis,
written once, with neither IO nor Trio nor redis-py at import.

Every client runs batches through one protocol: :class:`Transport`
(``await execute(ops, after, replicas=...)``), implemented by the Trio
store's ``RedisAdapter`` (native node, native Cluster, redis-py in threads)
and the asyncio producer's ``AsyncioExecutor``, and its blocking mirror
:class:`BlockingTransport`, implemented by the synchronous producer's
``BlockingExecutor``. Each of them runs the same sans-IO plan,
:func:`batch_plan`, which holds every rule of a batch:

* one pipeline per node: on a single node, ``ops``, then ``after``, then
  the ``WAIT`` of a :class:`~._scripts.ReplicaWait`, in one pipeline (Redis
  applies one connection's commands in order); on a Cluster, ``ops``
  grouped by the master owning each op's slot (ops without a route go to
  the default node), each group one pipeline ending with its own ``WAIT``,
  then ``after`` as a second step;
* ``NOSCRIPT`` (:func:`node_plan`): the node loads the scripts and runs
  again exactly the ops that got it (they did not run), with every wake-up
  and ``WAIT`` after the first of them;
* ``MOVED`` (:func:`cluster_plan`): the slot map is rebuilt (at most
  :data:`MAX_REFRESHES` times per batch) and the ops that got it, which did
  not run, go to the new owner; ``ASK``: the op goes once more, after
  ``ASKING``, to the node the reply names; ``CLUSTERDOWN`` (and a slot with
  no owner, or a master that cannot be reached) has the map rebuilt before
  the next batch; ``TRYAGAIN`` stays the op's error reply;
* an error reply of an op that is not ``soft`` raises StoreError once the
  whole batch ran; so does a ``WAIT`` that fewer replicas acknowledged;
* the counters of :class:`~._batch.AdapterStatistics`.

A driver answers only three requests, with the IO of its runtime:

* :class:`Send`: one pipeline on one node; answered with the replies, error
  replies as redis-py exception instances; raises when the node cannot be
  reached;
* :class:`AtOnce`: run these node plans at once (in order, for a runtime
  with no concurrency); answered with their results in order; raises the
  first failure once every round trip it started has ended;
* :class:`Rebuild`: rebuild the slot map (:meth:`SlotMap.rebuilding` says
  whether another batch already did).

and maps what its IO raises (redis-py's errors) to StoreError
(:func:`~._batch.store_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ._batch import AdapterStatistics, check_replies, reload_plan, store_error
from ._core import Plan
from ._errors import exceptions, settled
from ._scripts import Op, ReplicaWait

N = TypeVar("N")

#: Rebuilds of the slot map one batch makes after MOVED replies.
MAX_REFRESHES = 2
#: Routes whose slot a slot map keeps (a queue's partitions' keys: a few).
_ROUTES_KEPT = 4096


class Transport(Protocol):
    """How the store sends a batch of ops, on an event loop (Trio's
    ``RedisAdapter``, the asyncio producer's ``AsyncioExecutor``)."""

    async def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """Run ``ops`` and return their replies in order (see
        :func:`batch_plan`); ``after`` runs once they are applied, its
        replies not returned. StoreError for an error reply of an op that
        is not soft (a soft op's is returned as the exception), for fewer
        replicas than ``replicas`` asks, or when Redis cannot be reached."""
        ...


class BlockingTransport(Protocol):
    """:class:`Transport` for a blocking caller (the synchronous producer's
    ``BlockingExecutor``): the same batch, the same replies and errors."""

    def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """As :meth:`Transport.execute`, blocking."""
        ...


# -- what a transport plan asks its driver -----------------------------------------
class Send(NamedTuple):
    """Send ``commands`` to ``node`` as one pipeline; answered with their
    replies. ``counted``: a pipeline of the batch's ops (a round trip in the
    statistics), not a script load."""

    node: Any
    commands: list[Sequence[Any]]
    counted: bool = True


class AtOnce(NamedTuple):
    """Run ``plans`` (one per node of ``slots``, each a :func:`node_plan`)
    at once; answered with their results in order. A master that cannot be
    reached makes ``slots`` stale (:meth:`SlotMap.unreachable`)."""

    slots: SlotMap[Any]
    plans: list[tuple[Any, Plan[list[Any]]]]


class Rebuild(NamedTuple):
    """Rebuild the slot map of ``slots`` unless a rebuild was tried since
    the batch read ``seen`` (see :meth:`SlotMap.rebuilding`)."""

    slots: SlotMap[Any]
    seen: int


# -- the slot map --------------------------------------------------------------------
class SlotMap(Generic[N]):
    """Which master owns each op's slot, read from redis-py's Cluster client
    (blocking or asyncio: ``nodes_manager.slots_cache``), and a handle of
    each master for the driver's IO, made by ``handle`` from redis-py's
    node (a ``NativeNode``, a node's own redis-py client)."""

    def __init__(self, cluster: Any, handle: Callable[[Any], N]) -> None:
        self.cluster = cluster
        self._handle = handle
        #: Handles by node name (``host:port``).
        self.nodes: dict[str, N] = {}
        #: Slot map rebuilds so far (for tests and monitoring).
        self.refreshes = 0
        #: Rebuilds tried, failed ones too: tells a batch whether one was
        #: tried since it routed its ops.
        self.attempts = 0
        #: Rebuild the map before the next batch (a node failed).
        self.stale = False
        #: Each route's slot (a function of the route alone), computed once.
        self._slot_of: dict[Any, int] = {}

    def handle(self, node: Any) -> N:
        """The handle of redis-py's ``node`` (made once per node name)."""
        got = self.nodes.get(node.name)
        if got is None:
            got = self.nodes[node.name] = self._handle(node)
        return got

    def route(self, ops: Sequence[Op], pending: Sequence[int]) -> list[tuple[N, list[int]]]:
        """``pending`` (indices into ``ops``) grouped by the master of each
        op's slot. RedisClusterException when the cluster has no node or a
        slot has no owner (the map is rebuilt before the next batch)."""
        from redis.crc import key_slot

        slots = self.cluster.nodes_manager.slots_cache
        slot_of = self._slot_of
        groups: dict[str, tuple[N, list[int]]] = {}
        for i in pending:
            route = ops[i].route
            if route is None:
                node = self.cluster.get_default_node()
                if node is None:
                    raise exceptions().RedisClusterException("the cluster has no node")
            else:
                slot = slot_of.get(route)
                if slot is None:
                    slot = key_slot(route.encode() if isinstance(route, str) else route)
                    if len(slot_of) < _ROUTES_KEPT:
                        slot_of[route] = slot
                owners = slots.get(slot)
                if not owners:
                    self.stale = True
                    raise exceptions().SlotNotCoveredError(
                        f"slot {slot} is not covered by the cluster"
                    )
                node = owners[0]
            group = groups.get(node.name)
            if group is None:
                group = groups[node.name] = (self.handle(node), [])
            group[1].append(i)
        return list(groups.values())

    def node_at(self, host: str, port: int) -> N:
        """The handle of the node at an address an ``ASK`` reply names
        (maybe not in the map)."""
        node = self.cluster.nodes_manager.get_node(host, port)
        return self.handle(node if node is not None else self.new_node(host, port))

    def new_node(self, host: str, port: int) -> Any:
        """redis-py's node for a master the map does not know (redis-py's
        blocking ``ClusterNode``; the asyncio driver makes its own)."""
        import redis.cluster

        return redis.cluster.ClusterNode(host, port, redis.cluster.PRIMARY)  # type: ignore[no-untyped-call]

    def unreachable(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a node's round trip failed) says the node cannot
        be reached; the map is then rebuilt before the next batch, so a
        replica promoted in its place is found."""
        module = exceptions()
        if isinstance(exc, module.ConnectionError | module.TimeoutError):
            self.stale = True
            return True
        return False

    def rebuilding(self, seen: int) -> bool:
        """Whether to rebuild the map now: not if a rebuild was tried since
        the caller saw :attr:`attempts` == ``seen`` (concurrent batches that
        all got MOVED share one rebuild, and batches queued behind one that
        failed go on with the map as it is). Counts the attempt."""
        if self.attempts != seen:
            return False
        self.attempts += 1
        return True

    def rebuilt(self) -> None:
        """The map was rebuilt."""
        self.refreshes += 1
        self.stale = False

    def masters(self) -> set[str]:
        """The names of the masters in the map."""
        return {n.name for n in self.cluster.get_primaries()}


# -- plans -----------------------------------------------------------------------------
def node_plan(
    node: Any, ops: Sequence[Op], stats: AdapterStatistics, asking: bool = False
) -> Plan[list[Any]]:
    """One pipeline of ``ops`` on ``node``; scripts reloaded and the ops
    that got NOSCRIPT sent again. ``asking``: each op (but a WAIT) is sent
    after ``ASKING``, for a Cluster node importing its slot. The replies of
    ``ops``, error replies as exceptions; a script load's error reply raises."""
    replies = yield from _pipeline(node, ops, stats, asking)
    if any(isinstance(r, Exception) for r in replies):
        return (yield from _reload(node, ops, replies, stats, asking))
    return replies


def _reload(
    node: Any, ops: Sequence[Op], replies: list[Any], stats: AdapterStatistics, asking: bool
) -> Plan[list[Any]]:
    """The rest of :func:`node_plan` once ``replies`` came (some error replies).

    Loaded and run again at most twice: a Sentinel master demoted between
    the load and the run (the load reached the old master, the run was
    refused there with READONLY and sent to the new one, which never saw
    the script) answers NOSCRIPT again, and the second load goes where the
    node now sends (a script first used just as a failover happens)."""
    for _attempt in range(2):
        missing, scripts = reload_plan(ops, replies)
        if not missing:
            break
        for script in scripts:
            [loaded] = yield Send(node, [("SCRIPT", "LOAD", script.source)], counted=False)
            if isinstance(loaded, Exception):
                raise loaded
            stats.script_loads += 1
        again = yield from _pipeline(node, [ops[i] for i in missing], stats, asking)
        for i, reply in zip(missing, again, strict=True):
            # still missing after the second load (not ours): redis-py's error
            replies[i] = settled(reply) if _attempt else reply
    return replies


def _pipeline(
    node: Any, ops: Sequence[Op], stats: AdapterStatistics, asking: bool
) -> Plan[list[Any]]:
    stats.round_trips += 1
    stats.commands += len(ops)
    if not asking:
        replies: list[Any] = yield Send(node, [op.args for op in ops])
        return replies
    # ASKING lets only the next command into a slot the node is importing.
    commands: list[Sequence[Any]] = []
    for op in ops:
        if op.args[0] != "WAIT":
            commands.append(("ASKING",))
        commands.append(op.args)
    got = yield Send(node, commands)
    return [r for c, r in zip(commands, got, strict=True) if c[0] != "ASKING"]


def cluster_plan(
    slots: SlotMap[Any], ops: Sequence[Op], stats: AdapterStatistics, wait: Op | None = None
) -> Plan[tuple[list[Any], list[Any]]]:
    """Run ``ops`` on a Cluster: one pipeline per master (masters at once),
    each ending with ``wait`` when given. The replies of ``ops`` in order
    (error replies as exceptions) and the replies of the ``WAIT`` s."""
    acks: list[Any] = []
    if not ops:
        return [], acks
    if slots.stale:
        yield Rebuild(slots, slots.attempts)
    errors_of = exceptions()
    replies: list[Any] = [None] * len(ops)
    pending: Sequence[int] = range(len(ops))
    for attempt in range(MAX_REFRESHES + 1):
        seen = slots.attempts
        groups = slots.route(ops, pending)
        yield from _at_once(slots, groups, ops, replies, wait, acks, stats, asking=False)
        errors = [i for i in pending if isinstance(replies[i], errors_of.ResponseError)]
        if not errors:
            break
        if any(isinstance(replies[i], errors_of.ClusterDownError) for i in errors):
            slots.stale = True
        asked: dict[tuple[str, int], list[int]] = {}
        for i in errors:
            reply = replies[i]
            if type(reply) is errors_of.AskError:  # not MovedError, its subclass
                asked.setdefault(reply.node_addr, []).append(i)
        if asked:
            targets = [(slots.node_at(*addr), idx) for addr, idx in asked.items()]
            yield from _at_once(slots, targets, ops, replies, wait, acks, stats, asking=True)
        pending = [i for i in errors if isinstance(replies[i], errors_of.MovedError)]
        if not pending or attempt == MAX_REFRESHES:
            break
        # Those ops did not run: rebuild the map and send them to the new owner.
        yield Rebuild(slots, seen)
    return replies, acks


def _at_once(
    slots: SlotMap[Any],
    groups: Sequence[tuple[Any, list[int]]],
    ops: Sequence[Op],
    replies: list[Any],
    wait: Op | None,
    acks: list[Any],
    stats: AdapterStatistics,
    *,
    asking: bool,
) -> Plan[None]:
    """One node plan per group, groups at once; each reply goes to its op's
    place in ``replies``, each group's ``WAIT`` reply to ``acks``."""
    tail = [wait] if wait is not None else []
    plans = [
        (node, node_plan(node, [ops[i] for i in idx] + tail, stats, asking)) for node, idx in groups
    ]
    results: list[list[Any]] = yield AtOnce(slots, plans)
    for (_, idx), got in zip(groups, results, strict=True):
        if wait is not None:
            acks.append(got.pop())
        for i, reply in zip(idx, got, strict=True):
            replies[i] = reply


def batch_plan(
    link: Any,
    ops: Sequence[Op],
    after: Sequence[Op],
    replicas: ReplicaWait | None,
    stats: AdapterStatistics,
    where: str,
) -> Plan[list[Any]]:
    """The whole of :meth:`Transport.execute` on ``link``: one node's
    handle, or a :class:`SlotMap`. ``where`` names the store in errors."""
    if not ops and not after:
        return []
    if not isinstance(link, SlotMap):
        # node_plan, its first pipeline written out (the hot path)
        batch = node_batch(ops, after, replicas, stats)
        replies: list[Any] = yield Send(link, [op.args for op in batch])
        for reply in replies:
            if isinstance(reply, Exception):
                replies = yield from _reload(link, batch, replies, stats, False)
                break
        return node_replies(ops, replies, replicas, stats, where)
    wait = replicas.op() if replicas else None
    replies, acks = yield from cluster_plan(link, ops, stats, wait)
    if after:
        yield from cluster_plan(link, after, stats)
    return _checked(ops, replies, acks, replicas, stats, where)


def node_batch(
    ops: Sequence[Op], after: Sequence[Op], replicas: ReplicaWait | None, stats: AdapterStatistics
) -> list[Op]:
    """What :func:`batch_plan` sends to one node first: ``ops``, ``after``,
    then ``WAIT`` (with ``replicas``), counted in ``stats``. A driver that
    sends it itself (the producers' lone call) passes the replies to
    :func:`node_replies`, after :func:`reload_node_plan` when one is an
    error reply."""
    batch = [*ops, *after, replicas.op()] if replicas else [*ops, *after]
    stats.round_trips += 1
    stats.commands += len(batch)
    return batch


def reload_node_plan(
    node: Any, batch: Sequence[Op], replies: list[Any], stats: AdapterStatistics
) -> Plan[list[Any]]:
    """:func:`batch_plan`'s rest on one node once ``replies`` to
    :func:`node_batch` came with an error reply (scripts loaded, ops run again)."""
    return _reload(node, batch, replies, stats, False)


def node_replies(
    ops: Sequence[Op],
    replies: list[Any],
    replicas: ReplicaWait | None,
    stats: AdapterStatistics,
    where: str,
) -> list[Any]:
    """:func:`batch_plan`'s result from one node's ``replies`` to
    :func:`node_batch` (after any reload): the replies of ``ops``. Raises
    as :func:`batch_plan` does (an error reply, too few replicas)."""
    acks: list[Any] = []
    if replicas is not None:
        acks.append(replies[-1])
    if len(replies) > len(ops):
        del replies[len(ops) :]
    return _checked(ops, replies, acks, replicas, stats, where)


def _checked(
    ops: Sequence[Op],
    replies: list[Any],
    acks: list[Any],
    replicas: ReplicaWait | None,
    stats: AdapterStatistics,
    where: str,
) -> list[Any]:
    check_replies(ops, replies, where)
    if replicas is not None:
        stats.replica_waits += len(acks)
        replicas.check(acks, where, lambda e: store_error(where, e))
    return replies


def first_failure(results: Sequence[Any]) -> list[Any]:
    """``results`` of an :class:`AtOnce` gathered with their failures (an
    exception in place of a node's replies): raises the first failure, or
    returns them."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)
