"""The Trio side of a Redis Cluster: its slot map (:class:`TrioCluster`,
shared by the adapter's batches) and the native round trips to it, one
:class:`~._native.NativeNode` per master, no thread hop.

A hop through ``trio.to_thread`` costs more CPU than a local round trip, and
a Cluster batch made one per node. Here redis-py's cluster client only keeps
the slot map (``nodes_manager``: which master owns each of the 16384 slots);
this module reads it, and has redis-py rebuild it (``initialize``, in a
thread: it blocks, and it is rare). A batch runs the transport's
``cluster_plan`` (``_transport``: the rules below are written there once,
for every runtime; the adapter answers its requests):

* is split by the master owning each op's slot (``Op.route``; ops without a
  route go to the cluster's default node); each master's ops go out as one
  pipeline on that master's NativeNode, every master at once, and the
  replies come back in the ops' order (with an idle connection to each,
  the steady state, the adapter writes every pipeline before it waits for
  any reply, in the caller's task: no task per master);
* ``MOVED`` (the slot has another owner: resharding, failover): the map is
  rebuilt and the ops that got it, which did not run, go to the new owner;
  at most ``MAX_REFRESHES`` (``_transport``) rebuilds per batch, then a ``MOVED`` reply
  stands as that op's error reply;
* ``ASK`` (the slot is being migrated and the key is not on the source any
  more): the op goes once more, after ``ASKING``, to the node the reply
  names; the map stays as it is (the source owns the slot until the end of
  the migration);
* ``NOSCRIPT``: the node loads the script and runs the ops that got it again,
  as on a single node (``node_plan``);
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

from typing import Any

import redis
import redis.cluster
import redis.exceptions
import trio

from ._native import NativeNode
from ._transport import SlotMap


class TrioCluster(SlotMap[Any]):
    """The slot map of one ``RedisCluster`` client for the Trio adapter:
    each master's handle is made by ``handle`` (redis-py's own client of
    that node, for round trips in threads; a :class:`NativeNode` in
    :class:`NativeCluster`); rebuilds run in a thread, one at a time."""

    def __init__(
        self,
        cluster: redis.cluster.RedisCluster,
        handle: Any,
        limiter: trio.CapacityLimiter,
    ) -> None:
        super().__init__(cluster, handle)
        self._limiter = limiter
        self._refresh_lock = trio.Lock()

    async def refresh(self, seen: int) -> None:
        """Rebuild the slot map, unless a rebuild was tried since the caller
        saw ``attempts`` == ``seen`` (see :meth:`SlotMap.rebuilding`); the
        idle connections of native nodes that are no longer masters are
        closed. RedisClusterException when no node answers."""
        async with self._refresh_lock:
            if not self.rebuilding(seen):
                return
            await trio.to_thread.run_sync(
                self.cluster.nodes_manager.initialize, limiter=self._limiter
            )
            self.rebuilt()
            masters = self.masters()
            for name, node in self.nodes.items():
                if name not in masters and isinstance(node, NativeNode):
                    await node.close_idle()

    async def aclose(self) -> None:
        """Close every native node's connections."""
        for node in self.nodes.values():
            if isinstance(node, NativeNode):
                await node.aclose()


class NativeCluster(TrioCluster):
    """Round trips to the masters of one ``RedisCluster`` client over Trio
    sockets. Build it with :meth:`for_client`."""

    def __init__(self, cluster: redis.cluster.RedisCluster, limiter: trio.CapacityLimiter) -> None:
        super().__init__(cluster, self._node, limiter)

    @classmethod
    def for_client(
        cls, cluster: redis.cluster.RedisCluster, limiter: trio.CapacityLimiter
    ) -> NativeCluster | None:
        """Native round trips for ``cluster``, or None when this path does not
        cover its connections (TLS, custom connection classes, credential
        providers or connect hooks, reads from replicas). ``limiter`` bounds
        the threads of map rebuilds."""
        if (
            cluster.read_from_replicas
            or cluster.load_balancing_strategy is not None
            or cluster.user_on_connect_func is not None
        ):
            return None
        made = cls(cluster, limiter)
        default = cluster.get_default_node()  # type: ignore[no-untyped-call]
        # Every node's client is made with the same connection settings.
        native = made._native(default) if default is not None else None
        if native is None:
            return None
        made.nodes[default.name] = native
        return made

    def _native(self, node: redis.cluster.ClusterNode) -> NativeNode | None:
        client: redis.Redis = self.cluster.get_redis_connection(node)
        # The cluster's own connect hook only adds READONLY for replica
        # reads, which for_client ruled out.
        return NativeNode.for_client(client, connect_func=self.cluster.on_connect)

    def _node(self, node: redis.cluster.ClusterNode) -> NativeNode:
        native = self._native(node)
        if native is None:  # pragma: no cover - every node has the same settings
            raise redis.exceptions.RedisClusterException(
                f"node {node.name}: its connections are not covered by native round trips"
            )
        return native
