"""Trio-native round trips to a Redis Cluster: one :class:`~._native.NativeNode`
per master, no thread hop.

A hop through ``trio.to_thread`` costs more CPU than a local round trip, and
a Cluster batch made one per node. Here redis-py's cluster client only keeps
the slot map (``nodes_manager``: which master owns each of the 16384 slots);
this module reads it, and has redis-py rebuild it (``initialize``, in a
thread: it blocks, and it is rare). A batch:

* is split by the master owning each op's slot (``Op.route``; ops without a
  route go to the cluster's default node); each master's ops go out as one
  pipeline on that master's NativeNode, every master at once, and the
  replies come back in the ops' order;
* ``MOVED`` (the slot has another owner: resharding, failover): the map is
  rebuilt and the ops that got it, which did not run, go to the new owner;
  at most :data:`MAX_REFRESHES` rebuilds per batch, then a ``MOVED`` reply
  stands as that op's error reply;
* ``ASK`` (the slot is being migrated and the key is not on the source any
  more): the op goes once more, after ``ASKING``, to the node the reply
  names; the map stays as it is (the source owns the slot until the end of
  the migration);
* ``NOSCRIPT``: the node loads the script and runs the ops that got it again,
  as on a single node (``run`` does that);
* ``TRYAGAIN`` (a multi-key op during a migration) and ``CLUSTERDOWN`` stay
  the op's error reply, as with redis-py in threads; ``CLUSTERDOWN`` also
  has the map rebuilt before the next batch;
* a master that cannot be reached (refused, reset, timed out) fails the batch
  with redis-py's ``ConnectionError``/``TimeoutError`` once every master's
  round trip ended (the adapter makes that a StoreError); that node's idle
  connections are closed and the map is rebuilt before the next batch, so a
  replica promoted in its place (another address) gets a node of its own,
  and a restarted master is connected to afresh.

A batch, once started, runs to completion or fails whether or not its caller
is cancelled, as a single round trip does: a cancelled settle must not lose
the replies of the nodes that applied it. Every step is bounded by the socket
and connect timeouts (a rebuild by redis-py's).

Only masters are talked to. A cluster client that reads from replicas, or has
a ``redis_connect_func`` of its own, is not covered (:meth:`NativeCluster.for_client`
returns None), nor is TLS: redis-py in threads then.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.exceptions
import trio
from redis.crc import key_slot

from ._native import NativeNode
from ._scripts import Op

#: Sends ``ops`` to one node as one pipeline (``ASKING`` before each op when
#: the flag is set) and returns their replies, NOSCRIPT handled.
RunOps = Callable[[NativeNode, Sequence[Op], bool], Awaitable[list[Any]]]

#: Rebuilds of the slot map one batch makes after MOVED replies.
MAX_REFRESHES = 2

#: A node that cannot be reached: the batch fails and the map is rebuilt.
_UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
#: What a node's round trip may raise (the adapter makes them StoreError).
_FAILURES = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)

N = TypeVar("N")


async def send_at_once(
    groups: Sequence[tuple[N, list[int]]],
    send: Callable[[N, list[int]], Awaitable[list[Any]]],
    replies: list[Any],
    acks: list[Any] | None = None,
) -> None:
    """``send(node, idx)`` for every group (a node and the indices of its ops
    in ``replies``) at once; each reply goes to its op's place in
    ``replies``, and with ``acks`` the last reply of each group (its WAIT's)
    goes there. Raises the first failure once every group's round trip
    ended (redis-py's exception, never an ExceptionGroup)."""
    failures: list[BaseException] = []

    async def one(node: N, idx: list[int]) -> None:
        try:
            got = await send(node, idx)
        except _FAILURES as exc:  # kept out of the nursery's ExceptionGroup
            failures.append(exc)
            return
        if acks is not None:
            acks.append(got.pop())
        for i, reply in zip(idx, got, strict=True):
            replies[i] = reply

    if len(groups) == 1:
        await one(*groups[0])
    else:
        async with trio.open_nursery() as nursery:
            for node, idx in groups:
                nursery.start_soon(one, node, idx)
    if failures:
        raise failures[0]


class NativeCluster:
    """Round trips to the masters of one ``RedisCluster`` client over Trio
    sockets. Build it with :meth:`for_client`."""

    def __init__(
        self, cluster: redis.cluster.RedisCluster, run: RunOps, limiter: trio.CapacityLimiter
    ) -> None:
        self._cluster = cluster
        self._run = run
        self._limiter = limiter
        #: By node name (``host:port``); kept for the adapter's life (closed
        #: with it), with the idle connections of a node that left closed.
        self._nodes: dict[str, NativeNode] = {}
        self._refresh_lock = trio.Lock()
        #: Slot map rebuilds so far (for tests and monitoring).
        self.refreshes = 0
        #: Rebuilds tried, failed ones too: tells a batch whether one was
        #: tried since it routed its ops.
        self._attempts = 0
        #: Rebuild the map before the next batch (a node failed).
        self._stale = False
        self._closed = False

    @classmethod
    def for_client(
        cls, cluster: redis.cluster.RedisCluster, run: RunOps, limiter: trio.CapacityLimiter
    ) -> NativeCluster | None:
        """Native round trips for ``cluster``, or None when this path does not
        cover its connections (TLS, custom connection classes, credential
        providers or connect hooks, reads from replicas). ``run`` sends one
        node's pipeline; ``limiter`` bounds the threads of map rebuilds."""
        if (
            cluster.read_from_replicas
            or cluster.load_balancing_strategy is not None
            or cluster.user_on_connect_func is not None
        ):
            return None
        made = cls(cluster, run, limiter)
        default = cluster.get_default_node()  # type: ignore[no-untyped-call]
        # Every node's client is made with the same connection settings.
        if default is None or made._native(default) is None:
            return None
        return made

    def _native(self, node: redis.cluster.ClusterNode) -> NativeNode | None:
        native = self._nodes.get(node.name)
        if native is None:
            client: redis.Redis = self._cluster.get_redis_connection(node)
            # The cluster's own connect hook only adds READONLY for replica
            # reads, which for_client ruled out.
            native = NativeNode.for_client(client, connect_func=self._cluster.on_connect)
            if native is None:
                return None
            self._nodes[node.name] = native
        return native

    def _node(self, node: redis.cluster.ClusterNode) -> NativeNode:
        native = self._native(node)
        if native is None:  # pragma: no cover - every node has the same settings
            raise redis.exceptions.RedisClusterException(
                f"node {node.name}: its connections are not covered by native round trips"
            )
        return native

    def _node_at(self, host: str, port: int) -> NativeNode:
        """The node at an address an ``ASK`` reply names (maybe not in the map)."""
        node = self._cluster.nodes_manager.get_node(host, port)
        if node is None:
            node = redis.cluster.ClusterNode(host, port, redis.cluster.PRIMARY)  # type: ignore[no-untyped-call]
        return self._node(node)

    # -- batches --------------------------------------------------------------------
    async def execute(
        self,
        ops: Sequence[Op],
        after: Sequence[Op] = (),
        *,
        wait: Op | None = None,
        acks: list[Any] | None = None,
    ) -> list[Any]:
        """Run ``ops`` (one pipeline per master, masters at once), then
        ``after`` as a second step (their replies are not returned), and
        return the replies of ``ops`` in order, error replies as redis-py
        exception instances. ``wait``: a ``WAIT`` op ending each pipeline of
        ``ops``, whose replies go to ``acks``.

        Raises redis-py's ConnectionError/TimeoutError when a master cannot
        be reached, RedisClusterException when the map cannot be rebuilt or
        a slot has no owner; never returns before every round trip it
        started has ended, even when cancelled."""
        if self._closed:
            raise redis.exceptions.ConnectionError("the store is closed")
        if wait is not None and acks is None:
            acks = []
        with trio.CancelScope(shield=True):
            replies = await self._execute(ops, wait, acks)
            if after:
                await self._execute(after)
        return replies

    async def _execute(
        self, ops: Sequence[Op], wait: Op | None = None, acks: list[Any] | None = None
    ) -> list[Any]:
        if not ops:
            return []
        if self._stale:
            await self._refresh(self._attempts)
        replies: list[Any] = [None] * len(ops)
        pending: Sequence[int] = range(len(ops))
        for attempt in range(MAX_REFRESHES + 1):
            seen = self._attempts
            groups = self._route(ops, pending)
            await self._send(groups, ops, replies, wait, acks, asking=False)
            errors = [i for i in pending if isinstance(replies[i], redis.exceptions.ResponseError)]
            if not errors:
                break
            if any(isinstance(replies[i], redis.exceptions.ClusterDownError) for i in errors):
                self._stale = True
            asked: dict[tuple[str, int], list[int]] = {}
            for i in errors:
                reply = replies[i]
                if type(reply) is redis.exceptions.AskError:  # not MovedError, its subclass
                    asked.setdefault(reply.node_addr, []).append(i)
            if asked:
                targets = [(self._node_at(*addr), idx) for addr, idx in asked.items()]
                await self._send(targets, ops, replies, wait, acks, asking=True)
            pending = [i for i in errors if isinstance(replies[i], redis.exceptions.MovedError)]
            if not pending or attempt == MAX_REFRESHES:
                break
            # Those ops did not run: rebuild the map and send them to the new owner.
            await self._refresh(seen)
        return replies

    def _route(
        self, ops: Sequence[Op], pending: Sequence[int]
    ) -> list[tuple[NativeNode, list[int]]]:
        """``pending`` (indices into ``ops``) grouped by the master of each op's slot."""
        slots = self._cluster.nodes_manager.slots_cache
        groups: dict[str, tuple[NativeNode, list[int]]] = {}
        for i in pending:
            route = ops[i].route
            if route is None:
                node = self._cluster.get_default_node()  # type: ignore[no-untyped-call]
                if node is None:
                    raise redis.exceptions.RedisClusterException("the cluster has no node")
            else:
                slot = key_slot(route.encode() if isinstance(route, str) else route)
                owners = slots.get(slot)
                if not owners:
                    self._stale = True
                    raise redis.exceptions.SlotNotCoveredError(
                        f"slot {slot} is not covered by the cluster"
                    )
                node = owners[0]
            group = groups.get(node.name)
            if group is None:
                group = groups[node.name] = (self._node(node), [])
            group[1].append(i)
        return list(groups.values())

    async def _send(
        self,
        groups: Sequence[tuple[NativeNode, list[int]]],
        ops: Sequence[Op],
        replies: list[Any],
        wait: Op | None,
        acks: list[Any] | None,
        *,
        asking: bool,
    ) -> None:
        """One pipeline per group, groups at once (see :func:`send_at_once`)."""

        async def send(node: NativeNode, idx: list[int]) -> list[Any]:
            batch = [ops[i] for i in idx] + ([wait] if wait is not None else [])
            try:
                return await self._run(node, batch, asking)
            except _UNREACHABLE:
                self._stale = True
                await node.close_idle()  # as stale as the one that failed
                raise

        await send_at_once(groups, send, replies, acks if wait is not None else None)

    async def _refresh(self, seen: int) -> None:
        """Rebuild the slot map, unless a rebuild was tried since the caller
        saw ``_attempts`` == ``seen``: concurrent batches that all got MOVED
        share one rebuild, and when the nodes do not answer, batches queued
        behind a rebuild that failed do not each wait for one more (they go
        on with the map as it is). RedisClusterException when no node answers."""
        async with self._refresh_lock:
            if self._attempts != seen:
                return
            self._attempts += 1
            await trio.to_thread.run_sync(
                self._cluster.nodes_manager.initialize, limiter=self._limiter
            )
            self.refreshes += 1
            self._stale = False
            masters = {n.name for n in self._cluster.get_primaries()}  # type: ignore[no-untyped-call]
            for name, node in self._nodes.items():
                if name not in masters:
                    await node.close_idle()

    async def aclose(self) -> None:
        """Close every node's connections."""
        self._closed = True
        for node in self._nodes.values():
            await node.aclose()
