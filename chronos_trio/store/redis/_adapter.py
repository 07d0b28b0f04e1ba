"""The Trio transport of the RedisStore (the ``Transport`` protocol of
``_transport``): over Trio sockets with hiredis, or over redis-py (sync
client) in threads, or over no redis-py client at all.

:meth:`RedisAdapter.execute` runs the transport's sans-IO ``batch_plan``,
which holds every rule of a batch (one pipeline per node, the ``NOSCRIPT``
reload and retry, ``MOVED``/``ASK`` on a Cluster, ``WAIT``, error replies,
statistics) for every runtime; this module only answers its requests with
Trio IO. Where a pipeline goes:

* a single node reached over plain TCP or a Unix socket: a round trip over
  Trio sockets (``_native``), with no thread hop; for a plain ``redis://`` or
  ``unix://`` URL the client is a :class:`~._native.NodeClient`, and
  redis-py is not even imported until a feature needs it (see ``_errors``),
  so a worker starts sooner;
* each master of a Cluster: the same, one native node per master, every
  master at once (``_cluster``);
* otherwise (TLS, ``native=False``): redis-py's blocking client in a worker
  thread (``trio.to_thread.run_sync``), one hop per pipeline; blocking waits
  (``XREAD BLOCK``) of a Cluster or behind Sentinel always do.

Either way the adapter adds no per-job overhead, and every failure surfaces
as :class:`~chronos_trio.store.StoreError`. A Cluster batch, once started,
runs to completion even if its caller is cancelled.

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

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import trio

from .._observer import StoreObserver
from .._roles import StoreError
from ._batch import AdapterStatistics as AdapterStatistics
from ._batch import store_error
from ._core import Plan, drive_async
from ._errors import caught
from ._kinds import is_client, is_cluster, is_node
from ._native import NativeNode, NodeClient
from ._scripts import Op
from ._scripts import ReplicaWait as ReplicaWait
from ._transport import (
    AtOnce,
    Rebuild,
    Send,
    SlotMap,
    batch_plan,
    first_failure,
    node_batch,
    node_replies,
    reload_node_plan,
)

if TYPE_CHECKING:
    import redis
    import redis.cluster

    from ._cluster import NativeCluster, TrioCluster
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
        #: A Cluster's slot map (the native one, or one for threads).
        self._slots: TrioCluster | None = None
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

    async def one_node(self) -> bool:
        """Whether the client is one node's (not a Cluster's); StoreError
        when it cannot be made."""
        return not is_cluster(await self.client())

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

    async def execute_lone(
        self, ops: Sequence[Op], after: Sequence[Op] = (), replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """:meth:`execute` for a plan that must run to completion even if
        its caller is cancelled (``StoreContext.run_shielded``), with no
        cancel scope: on the native node, its round trips are sent with
        ``lone`` (see ``NativeNode.execute``: every wait shielded, the round
        trip timed without a scope) and the transport plan is driven here;
        anything else (no native node yet, an observer, a Cluster, threads,
        a closed store) is :meth:`execute` in a shielded scope. The same
        replies, errors and guarantees either way."""
        node = self._native
        if node is None or self.observer is not None or self._closed:
            with trio.CancelScope(shield=True):
                return await self.execute(ops, after, replicas=replicas)
        assert node is not None  # (the shielded scope above returns)
        if not ops and not after:
            return []
        stats = self.stats
        try:
            # batch_plan's steps for one node, its first round trip sent here
            batch = node_batch(ops, after, replicas, stats)
            stats.native_round_trips += 1
            replies = await node.execute([op.args for op in batch], True)
            for reply in replies:
                if isinstance(reply, Exception):
                    plan = reload_node_plan(node, batch, replies, stats)
                    replies = await self._drive_lone(node, plan)
                    break
            return node_replies(ops, replies, replicas, stats, self.description)
        except caught() as exc:
            raise self._error(exc) from exc

    async def _drive_lone(self, node: NativeNode, plan: Plan[list[Any]]) -> list[Any]:
        """A transport plan on the native node, its round trips sent with
        ``lone`` (see :meth:`execute_lone`)."""
        stats = self.stats
        try:
            step = next(plan)
            while True:
                if type(step) is Send and step.node is node:
                    if step.counted:
                        stats.native_round_trips += 1
                    reply = await node.execute(step.commands, True)
                else:  # pragma: no cover - a single node's plan sends only to it
                    with trio.CancelScope(shield=True):
                        reply = await self._answer(step)
                step = plan.send(reply)
        except StopIteration as done:
            replies: list[Any] = done.value
            return replies
        finally:
            plan.close()

    async def _execute(
        self, ops: Sequence[Op], after: Sequence[Op], replicas: ReplicaWait | None
    ) -> list[Any]:
        client = await self.client()
        try:
            link = self._link(client)
            plan = batch_plan(link, ops, after, replicas, self.stats, self.description)
            if not isinstance(link, SlotMap):
                return await self._drive(plan)
            # A Cluster batch, once started, runs to completion or fails,
            # as one round trip does: a cancelled settle must not lose the
            # replies of the nodes that applied it.
            with trio.CancelScope(shield=True):
                replies = await self._drive(plan)
            return replies
        except caught() as exc:
            raise self._error(exc) from exc

    def _link(self, client: AnyClient) -> NativeNode | redis.Redis | TrioCluster:
        """Where a batch goes: the native node, redis-py's client of the one
        node (in threads), or the Cluster's slot map."""
        if is_node(client):
            native = self._native_node(client)
            if native is not None:
                return native
            assert not isinstance(client, NodeClient)  # always native
            if self.watch is not None:
                self.watch.poke()  # redis-py's pool drops idle connections to an old master
            return client
        if self._slots is None:
            cluster = _cluster(client)
            from ._cluster import NativeCluster, TrioCluster

            if self._use_native:
                self._native_cluster = NativeCluster.for_client(cluster, self._limiter)
                self._use_native = self._native_cluster is not None
            self._slots = self._native_cluster or TrioCluster(
                cluster, cluster.get_redis_connection, self._limiter
            )
        return self._slots

    def _native_node(self, client: redis.Redis | NodeClient) -> NativeNode | None:
        if self._use_native and self._native is None:
            if isinstance(client, NodeClient):
                self._native = client.node
            else:
                self._native = NativeNode.for_client(client, self.watch)
            self._use_native = self._native is not None
        return self._native

    async def _drive(self, plan: Plan[T]) -> T:
        """Run a transport plan (see ``_transport``), answering its requests
        over Trio sockets or in threads."""
        return await drive_async(plan, self._answer)

    async def _answer(self, step: Send | AtOnce | Rebuild) -> Any:
        if type(step) is Send:
            node = step.node
            if type(node) is NativeNode:
                if step.counted:
                    self.stats.native_round_trips += 1
                return await node.execute(step.commands)
            return await trio.to_thread.run_sync(
                self._run_on_node, node, step.commands, limiter=self._limiter
            )
        if type(step) is AtOnce:
            return await self._at_once(step)
        assert type(step) is Rebuild
        slots = cast("TrioCluster", step.slots)  # the only slot map made here
        await slots.refresh(step.seen)
        return None

    async def _at_once(self, step: AtOnce) -> list[Any]:
        """Every node plan of ``step`` at once (see :class:`AtOnce`)."""
        if len(step.plans) > 1 and all(
            type(node) is NativeNode and node.can_begin() for node, _ in step.plans
        ):
            return first_failure(await self._native_at_once(step))
        results: list[Any] = [None] * len(step.plans)

        async def one(i: int, node: Any, plan: Plan[list[Any]]) -> None:
            try:
                results[i] = await self._drive(plan)
            except caught() as exc:  # kept out of the nursery's ExceptionGroup
                results[i] = exc
                if step.slots.unreachable(exc) and isinstance(node, NativeNode):
                    await node.close_idle()  # as stale as the one that failed

        if len(step.plans) == 1:
            await one(0, *step.plans[0])
        else:
            async with trio.open_nursery() as nursery:
                for i, (node, plan) in enumerate(step.plans):
                    nursery.start_soon(one, i, node, plan)
        return first_failure(results)

    async def _native_at_once(self, step: AtOnce) -> list[Any]:
        """:meth:`_at_once` when every node is a native one with an idle
        connection (the steady state of a Cluster batch): each plan's first
        round trip is written to its node before any is waited for, then
        the replies are read node after node (those already there with no
        scheduler pass), and each plan goes on from there, one after the
        other (a plan's further round trips, a script load after NOSCRIPT,
        are rare). No task per node: the same replies and failures as the
        nursery of :meth:`_at_once`, for fewer scheduler passes."""
        begun_at = trio.current_time()
        begun: list[tuple[Any, NativeNode, Plan[list[Any]], Any]] = []
        for node, plan in step.plans:
            first = next(plan)  # a node plan's first step: its pipeline (ops are never empty)
            conn = None
            if type(first) is Send and first.node is node:
                conn = node.begin_nowait(first.commands)
            begun.append((first, node, plan, conn))
        results: list[Any] = [None] * len(begun)
        stats = self.stats
        done = 0
        try:
            for first, node, plan, conn in begun:
                done += 1
                try:
                    if conn is None:
                        reply = await self._answer(first)
                    else:
                        if first.counted:
                            stats.native_round_trips += 1
                        reply = await node.finish(conn, first.commands, begun_at)
                    results[done - 1] = await self._drive_on(plan, reply)
                except caught() as exc:  # as _at_once's tasks keep them
                    results[done - 1] = exc
                    if step.slots.unreachable(exc):
                        await node.close_idle()
                finally:
                    plan.close()
        finally:
            for _, node, plan, conn in begun[done:]:  # only when something else went wrong
                plan.close()
                if conn is not None:
                    await node.abandon(conn)
        return results

    async def _drive_on(self, plan: Plan[T], reply: Any) -> T:
        """:meth:`_drive` for a plan whose first request was answered with ``reply``."""
        try:
            step = plan.send(reply)
            while True:
                step = plan.send(await self._answer(step))
        except StopIteration as done:
            result: T = done.value
            return result

    def _run_on_node(self, client: redis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """In a thread: one pipeline on one node (see ``_blocking.pipeline``)."""
        from ._blocking import pipeline

        return pipeline(client, commands)

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
    async def xread_then(
        self,
        streams: Sequence[tuple[str, bytes]],
        count: int,
        timeout: float,
        then: Sequence[Sequence[Any]],
        *,
        salvage: Callable[[list[Any]], Awaitable[None]],
        grace: float,
    ) -> tuple[Any, list[Any]] | None:
        """:meth:`xread`, and ``then`` (raw commands) in the same pipeline,
        which Redis runs right when the read returns: the read's raw reply
        and the replies of ``then`` (see ``NativeNode.block_then``, which
        also says what a cancellation does with them and ``salvage``).
        None, having sent nothing, where it is not offered: anything but
        one node over Trio sockets without Sentinel. StoreError when the
        store cannot be reached."""
        client = await self.client()
        if not is_node(client) or self.watch is not None:
            return None
        native = self._native_node(client)
        if native is None:
            return None
        block = max(0.001, min(timeout, self.max_block))
        command = (
            "XREAD", "COUNT", count, "BLOCK", max(1, round(block * 1000)), "STREAMS",
            *(key for key, _ in streams), *(seen for _, seen in streams),
        )  # fmt: skip
        self.stats.blocking_waits += 1
        try:
            return await native.block_then(
                command, then, block, BLOCK_READ_SLACK, salvage=salvage, grace=grace
            )
        except caught() as exc:
            raise self._error(exc) from exc

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
        if self._slots is not None:
            await self._slots.aclose()
        if self._client is not None:
            await trio.to_thread.run_sync(self._client.close, limiter=self._limiter)
        if self.watch is not None:
            await trio.to_thread.run_sync(self.watch.close, limiter=self._limiter)
