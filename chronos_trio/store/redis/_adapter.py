"""A thin Trio adapter over redis-py (sync client, hiredis parser), or over
no redis-py client at all.

On a single node reached over plain TCP or a Unix socket, a batch (one
pipeline, plus any ``NOSCRIPT`` reload and retry) is one round trip over Trio
sockets (``_native``), with no thread hop; so is each master's share of a
Cluster batch (``_cluster``). For a plain ``redis://`` or ``unix://`` URL the
client is a :class:`~._native.NodeClient`: the same round trips, and redis-py
is not even imported until a feature needs it (see ``_errors``), so a worker
starts sooner. Otherwise (TLS, ``native=False``) blocking
redis-py calls run in worker threads via ``trio.to_thread.run_sync``, one hop
per batch (per node on a Cluster); blocking waits (``XREAD BLOCK``) of a
Cluster or behind Sentinel always do.
Either way the adapter adds no per-job overhead, and every failure surfaces
as :class:`~chronos_trio.store.StoreError`.

Redis Cluster: redis-py's cluster pipeline refuses ``EVALSHA``, so a batch is
grouped by the node owning each op's slot and pipelined to that node, one
round trip per node (nodes in parallel). A ``MOVED`` reply refreshes the slot
map and re-runs the affected ops; natively, an ``ASK`` reply sends the op
once to the node it names, after ``ASKING`` (see ``_cluster``), while in
threads it is treated like ``MOVED``.

Redis Sentinel: the client is redis-py's ``Sentinel.master_for``; round trips
take the native path to the master a :class:`~._sentinel.MasterWatch` names
(re-discovered after a connection error or a ``READONLY`` reply, and checked
once a second), TLS and blocking reads go through redis-py's Sentinel pool, which
asks the sentinels on every new connection.

``WAIT``: a batch can end with ``WAIT numreplicas timeout`` in its own
pipeline (:class:`ReplicaWait`; one per node on a Cluster), which covers
every write of that pipeline's connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import trio

from .._observer import StoreObserver
from .._roles import StoreError
from ._batch import AdapterStatistics as AdapterStatistics
from ._batch import check_replies, reload_plan, store_error
from ._errors import caught, settled
from ._kinds import is_client, is_cluster, is_node
from ._native import NativeNode, NodeClient
from ._scripts import Op
from ._scripts import ReplicaWait as ReplicaWait

if TYPE_CHECKING:
    import redis
    import redis.cluster

    from ._cluster import NativeCluster
    from ._sentinel import MasterWatch

    #: What an adapter runs on: redis-py's clients, or a NodeClient.
    AnyClient = redis.Redis | redis.cluster.RedisCluster | NodeClient

T = TypeVar("T")


def _cluster(client: AnyClient) -> redis.cluster.RedisCluster:
    """``client``, which is not one node's: redis-py's Cluster client."""
    assert is_cluster(client), client
    return client


#: Extra seconds to wait for a blocking read's reply beyond its block time before the
#: connection counts as dead.
BLOCK_READ_SLACK = 5.0


class RedisAdapter:
    """Runs redis-py calls for Trio.

    ``client`` is a :class:`~._native.NodeClient`, a ``Redis`` or
    ``RedisCluster``, or a function making one of the last two: it is then
    called in a thread on first use, because a ``RedisCluster`` connects (and
    may fail) as soon as it is built.
    """

    def __init__(
        self,
        client: AnyClient | Callable[[], AnyClient],
        *,
        description: str,
        max_block: float = 30.0,
        threads: int = 32,
        native: bool = True,
    ) -> None:
        self._client: AnyClient | None = None
        self._factory: Callable[[], AnyClient] | None = None
        if is_client(client):
            self._client = client
        else:
            self._factory = cast("Callable[[], AnyClient]", client)
        self._client_lock = trio.Lock()
        self.description = description
        #: Longest single blocking read (its reply is read with its own timeout).
        self.max_block = max_block
        self.stats = AdapterStatistics()
        self._limiter = trio.CapacityLimiter(threads)
        # Blocking waits get their own threads so idle waiters never starve the hot path.
        self._blocking_limiter = trio.CapacityLimiter(threads)
        self._closed = False
        #: Round trips to a single node go over Trio sockets when the client's
        #: connection kind allows it (see ``_native``); None until decided.
        self._use_native = native
        self._native: NativeNode | None = None
        self._native_cluster: NativeCluster | None = None
        #: Set once the client is known to be a Sentinel master's.
        self.watch: MasterWatch | None = None
        #: Told of every batch :meth:`execute` sends (see ``store._observer``).
        self.observer: StoreObserver | None = None

    # -- errors ---------------------------------------------------------------------
    def _error(self, exc: BaseException) -> StoreError:
        return store_error(self.description, exc)

    async def client(self) -> AnyClient:
        """The client, made on first use (errors become StoreError)."""
        if self._closed:
            raise StoreError("the store is closed")
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._client is None:
                assert self._factory is not None
                try:
                    client = await trio.to_thread.run_sync(self._factory, limiter=self._limiter)
                except caught() as exc:
                    raise self._error(exc) from exc
                if is_node(client) and not isinstance(client, NodeClient):
                    from ._sentinel import MasterWatch

                    self.watch = MasterWatch.for_client(client)
                self._client = client
            return self._client

    async def redis_py_client(self) -> redis.Redis | redis.cluster.RedisCluster:
        """redis-py's client (for pub/sub): the client itself, or a
        NodeClient's redis-py client, made on first use (errors become
        StoreError)."""
        client = await self.client()
        if not isinstance(client, NodeClient):
            return client
        try:
            return await client.redis_py(self._limiter)
        except caught() as exc:
            raise self._error(exc) from exc

    # -- batches --------------------------------------------------------------------
    async def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """Run ``ops`` (one pipeline per node) and return their replies in order.

        ``after`` ops (wake-ups) run once ``ops`` have been applied: appended to
        the same pipeline on a single node (Redis applies a connection's
        commands in order), or as a second step on a Cluster, whose nodes run
        in parallel. Their replies are not returned. An error reply raises
        StoreError after the whole batch ran, except for a ``soft`` op, whose
        error reply is returned as the exception.

        ``replicas``: the pipeline ends with ``WAIT`` (on a single node after
        ``after``; on a Cluster in each node's pipeline of ``ops``). StoreError
        when fewer replicas acknowledged within the timeout: the batch was
        applied on the master, but a failover may still lose it.
        """
        if not ops and not after:
            return []
        observer = self.observer
        if observer is None:  # the common case: one check, nothing else
            return await self._execute(ops, after, replicas)
        first = (ops or after)[0]
        name = first.script.name if first.script is not None else str(first.args[0]).lower()
        try:
            replies = await self._execute(ops, after, replicas)
        except StoreError:
            observer(name, True)
            raise
        observer(name, False)
        return replies

    async def _execute(
        self, ops: Sequence[Op], after: Sequence[Op], replicas: ReplicaWait | None
    ) -> list[Any]:
        client = await self.client()
        acks: list[Any] = []
        try:
            if is_node(client):
                native = self._native_node(client)
                if self.watch is not None and native is None:
                    self.watch.poke()  # redis-py's pool drops idle connections to an old master
                batch = [*ops, *after, *([replicas.op()] if replicas else [])]
                if native is not None:
                    replies = await self._run_native(native, batch)
                else:
                    assert not isinstance(client, NodeClient)  # always native
                    replies = await trio.to_thread.run_sync(
                        self._run_on_node, client, batch, limiter=self._limiter
                    )
                if replicas is not None:
                    acks.append(replies[-1])
                replies = replies[: len(ops)]
            elif (cluster := self._cluster_node(_cluster(client))) is not None:
                wait = replicas.op() if replicas else None
                replies = await cluster.execute(ops, after, wait=wait, acks=acks)
            else:
                replies = await self._execute_cluster(_cluster(client), ops, replicas, acks)
                if after:
                    await self._execute_cluster(_cluster(client), after)
        except caught() as exc:
            raise self._error(exc) from exc
        check_replies(ops, replies, self.description)
        if replicas is not None:
            self.stats.replica_waits += len(acks)
            replicas.check(acks, self.description, self._error)
        return replies

    def _native_node(self, client: redis.Redis | NodeClient) -> NativeNode | None:
        if self._use_native and self._native is None:
            if isinstance(client, NodeClient):
                self._native = client.node
            else:
                self._native = NativeNode.for_client(client, self.watch)
            self._use_native = self._native is not None
        return self._native

    def _cluster_node(self, client: redis.cluster.RedisCluster) -> NativeCluster | None:
        if self._use_native and self._native_cluster is None:
            from ._cluster import NativeCluster

            self._native_cluster = NativeCluster.for_client(client, self._run_native, self._limiter)
            self._use_native = self._native_cluster is not None
        return self._native_cluster

    async def _run_native(
        self, node: NativeNode, ops: Sequence[Op], asking: bool = False
    ) -> list[Any]:
        """``_run_on_node`` over Trio sockets: one pipeline, scripts reloaded
        and the ops that got NOSCRIPT re-run. ``asking``: each op (but a
        WAIT) is sent after ``ASKING``, for a Cluster node importing its slot."""
        replies = await self._send_native(node, ops, asking)
        missing, scripts = reload_plan(ops, replies)
        if missing:
            for script in scripts:
                [loaded] = await node.execute([("SCRIPT", "LOAD", script.source)])
                if isinstance(loaded, Exception):
                    raise loaded
                self.stats.script_loads += 1
            again = await self._send_native(node, [ops[i] for i in missing], asking)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = settled(reply)  # still missing (not ours): redis-py's error
        return replies

    async def _send_native(self, node: NativeNode, ops: Sequence[Op], asking: bool) -> list[Any]:
        self.stats.round_trips += 1
        self.stats.native_round_trips += 1
        self.stats.commands += len(ops)
        if not asking:
            return await node.execute([op.args for op in ops])
        # ASKING lets only the next command into a slot the node is importing.
        commands: list[tuple[Any, ...]] = []
        for op in ops:
            if op.args[0] != "WAIT":
                commands.append(("ASKING",))
            commands.append(op.args)
        replies = await node.execute(commands)
        return [r for c, r in zip(commands, replies, strict=True) if c[0] != "ASKING"]

    def _run_on_node(self, client: redis.Redis, ops: Sequence[Op]) -> list[Any]:
        """In a thread: one pipeline on one node (see ``_blocking.run_on_node``)."""
        from ._blocking import run_on_node

        return run_on_node(client, ops, self.stats)

    async def _execute_cluster(
        self,
        cluster: redis.cluster.RedisCluster,
        ops: Sequence[Op],
        wait: ReplicaWait | None = None,
        acks: list[Any] | None = None,
    ) -> list[Any]:
        """Run ``ops`` grouped by node; with ``wait``, each node's pipeline ends
        with WAIT and its reply is appended to ``acks``."""
        from ._blocking import moved, node_groups
        from ._cluster import send_at_once

        replies: list[Any] = [None] * len(ops)
        pending = list(range(len(ops)))
        for attempt in range(3):
            groups = node_groups(cluster, ops, pending)

            async def run_group(client: redis.Redis, idx: list[int]) -> list[Any]:
                batch = [ops[i] for i in idx] + ([wait.op()] if wait else [])
                return await trio.to_thread.run_sync(
                    self._run_on_node, client, batch, limiter=self._limiter
                )

            await send_at_once(list(groups.values()), run_group, replies, acks if wait else None)
            pending = moved(replies, pending)
            if not pending:
                break
            if attempt < 2:
                # the slot moved (resharding or failover): refresh the map, re-run those ops
                await trio.to_thread.run_sync(
                    cluster.nodes_manager.initialize, limiter=self._limiter
                )
        return replies

    # -- walking the keyspace ----------------------------------------------------------
    async def scan_nodes(self) -> list[str | None]:
        """The nodes a walk of the whole keyspace must visit: every primary of
        a Cluster (by name), or None for the one server. StoreError when the
        store cannot be reached."""
        client = await self.client()
        if is_cluster(client):
            return [node.name for node in client.get_primaries()]  # type: ignore[no-untyped-call]
        return [None]

    async def scan(
        self, node: str | None, cursor: int, match: str, count: int
    ) -> tuple[int, list[bytes]]:
        """One ``SCAN cursor MATCH match COUNT count`` step on ``node`` (a name
        from :meth:`scan_nodes`): the next cursor (0 when the walk is done) and
        the keys of this step. StoreError when the store cannot be reached or
        the node is no longer a primary of the Cluster (walk again)."""
        client = await self.client()
        if not is_cluster(client):
            (reply,) = await self.execute(
                [Op.command(None, "SCAN", cursor, "MATCH", match, "COUNT", count)]
            )
            return int(reply[0]), list(reply[1])
        target = client.get_node(node_name=node)  # type: ignore[no-untyped-call]
        if target is None:
            raise StoreError(f"Redis at {self.description}: node {node} left the cluster")
        direct: redis.Redis = client.get_redis_connection(target)

        def step() -> tuple[int, list[bytes]]:
            self.stats.round_trips += 1
            self.stats.commands += 1
            got = direct.scan(cursor, match=match, count=count)
            return int(got[0]), [k if isinstance(k, bytes) else k.encode() for k in got[1]]

        try:
            return await trio.to_thread.run_sync(step, limiter=self._limiter)
        except caught() as exc:
            raise self._error(exc) from exc

    # -- blocking -------------------------------------------------------------------
    async def xread(self, streams: Sequence[tuple[str, bytes]], count: int, timeout: float) -> Any:
        """``XREAD COUNT count BLOCK timeout STREAMS ...``: up to ``count``
        entries of each stream in ``streams`` ((key, last seen ID) pairs;
        every key in one slot) after its ID, waiting up to ``timeout``
        seconds (capped at ``max_block``) for one. The raw reply: None when
        nothing came, else ``[[key, [[id, [field, value, ...]], ...]], ...]``.

        On a single node over TCP or a Unix socket it runs on Trio sockets
        (``NativeNode.block``); otherwise in a thread, on a connection of its
        own. Cancellable at once either way: the abandoned read ends on its
        own within its block time, and reading changes nothing, so a
        cancelled waiter takes no wake-up from another. StoreError when the
        store cannot be reached.
        """
        client = await self.client()
        block = max(0.001, min(timeout, self.max_block))
        keys = [key for key, _ in streams]
        command = (
            "XREAD", "COUNT", count, "BLOCK", max(1, round(block * 1000)), "STREAMS",
            *keys, *(seen for _, seen in streams),
        )  # fmt: skip
        if is_node(client) and self.watch is None:
            native = self._native_node(client)
            if native is not None:
                # Trio sockets: no thread hop between a wake-up and its waiter
                self.stats.blocking_waits += 1
                try:
                    return await native.block(command, block, BLOCK_READ_SLACK)
                except caught() as exc:
                    raise self._error(exc) from exc
        assert not isinstance(client, NodeClient)  # always native
        direct: redis.Redis
        if is_cluster(client):
            # Every wake-up stream shares one hash tag: the first key routes all.
            node = client.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            direct = client.get_redis_connection(node)
        else:
            direct = cast("redis.Redis", client)

        def blocking_read() -> Any:
            if watch is not None:
                # Behind Sentinel: make sure the pool's idle connections are
                # not to a master that was replaced (wake-ups go to the new one).
                watch.recheck_sync()
            # A connection of our own, read with a timeout longer than the
            # block: the pool's socket timeout (meant to catch a dead server
            # quickly) would otherwise cap how long an idle worker may sleep.
            pool = direct.connection_pool
            conn = pool.get_connection()
            try:
                conn.send_command(*command)  # type: ignore[no-untyped-call]
                return conn.read_response(timeout=block + BLOCK_READ_SLACK)
            finally:
                pool.release(conn)

        watch = self.watch
        self.stats.blocking_waits += 1
        try:
            return await trio.to_thread.run_sync(
                blocking_read, abandon_on_cancel=True, limiter=self._blocking_limiter
            )
        except caught() as exc:
            raise self._error(exc) from exc

    async def aclose(self) -> None:
        """Close every connection pool (a thread still blocked in a read gets an error
        that nobody waits for)."""
        if self._closed:
            return
        self._closed = True
        if self._native is not None:
            await self._native.aclose()
        if self._native_cluster is not None:
            await self._native_cluster.aclose()
        if self._client is not None:
            await trio.to_thread.run_sync(self._client.close, limiter=self._limiter)
        if self.watch is not None:
            await trio.to_thread.run_sync(self.watch.close, limiter=self._limiter)
