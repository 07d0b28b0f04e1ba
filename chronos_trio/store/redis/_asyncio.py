"""The asyncio transport: running batches and waiting for outcomes on
asyncio (no Trio), for the asyncio producer.

:class:`AsyncioExecutor` implements ``_transport.Transport``: it runs the
transport's sans-IO ``batch_plan``, the rules every runtime shares (one
pipeline per node, the ``NOSCRIPT`` reload and retry, ``MOVED``/``ASK`` on
a Cluster, whose ops go to a client of the node owning their slot because
redis-py's cluster pipeline refuses ``EVALSHA``), and answers its requests
on a plain node (``redis://``, ``unix://``) with an
:class:`~._asyncio_node.AsyncioNode` of the loop's own sockets (one write,
the replies read back: about one loopback round trip), on any other client
(TLS, Sentinel, custom connections) with ``redis.asyncio`` pipelines, a
Cluster's nodes at once. Waiting for outcomes subscribes with
``redis.asyncio``'s pub/sub. Every failure is a StoreError.

Clients and events belong to the event loop that made them: use one
producer inside one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._roles import StoreError
from ._asyncio_node import AsyncioNode
from ._batch import AdapterStatistics, store_error
from ._blocking import REDIS_ERRORS
from ._core import Call, NeedMeta, Plan, RedisCore, T, drive_async, meta_plan
from ._scripts import Op, ReplicaWait
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
from ._watch import POLL_BLOCK, RESUBSCRIBE_DELAY, WaiterTable, subscription_failed


def _is_cluster(client: Any) -> bool:
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, RedisCluster)


class _AsyncioSlots(SlotMap[Any]):
    """A ``redis.asyncio`` Cluster's slot map."""

    def new_node(self, host: str, port: int) -> Any:
        """A master the map does not know, with the default node's settings."""
        from redis.asyncio.cluster import ClusterNode

        default = self.cluster.get_default_node()
        settings = {k: v for k, v in default.connection_kwargs.items() if k not in ("host", "port")}
        return ClusterNode(
            host, port, "primary", connection_class=default.connection_class, **settings
        )


class AsyncioExecutor:
    """The asyncio transport (``_transport.Transport``): runs batches and
    sans-IO plans (see ``_core``) on a ``redis.asyncio`` client made by
    ``factory`` on first use, a plain node's pipelines on an
    :class:`~._asyncio_node.AsyncioNode` with the client's settings."""

    def __init__(self, factory: Callable[[], Any], core: RedisCore, description: str) -> None:
        self._factory = factory
        self._client: Any = None
        #: The plain node's own connections (None: redis-py's pipelines).
        self._node: AsyncioNode | None = None
        self._lock: asyncio.Lock | None = None
        self._slots: SlotMap[Any] | None = None  # a Cluster's, with each node's own client
        self.core = core
        self.description = description
        self.stats = AdapterStatistics()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def client(self) -> Any:
        """The client, made (and, for a Cluster, initialized) on first use.
        RuntimeError in another event loop than the first (its connections
        belong to that one)."""
        if self._closed:
            raise StoreError("the producer is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError(
                "an AsyncioProducer belongs to the event loop that first used it; "
                "make one per loop (e.g. in the app's lifespan)"
            )
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                try:
                    client = self._factory()
                    if _is_cluster(client):
                        await client.initialize()
                except REDIS_ERRORS as exc:
                    raise store_error(self.description, exc) from exc
                from redis.asyncio.client import Redis as AsyncioRedis

                if isinstance(client, AsyncioRedis):
                    self._node = AsyncioNode.for_client(client)
                self.core.one_node = not _is_cluster(client)
                self._client = client
        return self._client

    async def run(self, plan: Plan[T]) -> T:
        """Run a plan to its result (its topology reads through the core's
        cache). Raises what its batches raise (the plan is closed then)."""
        return await drive_async(plan, self._answer_store)

    async def _answer_store(self, step: Call | NeedMeta) -> Any:
        if type(step) is Call:
            return await self.execute(step.ops, step.after, replicas=step.replicas)
        if type(step) is NeedMeta:
            return await self.run(meta_plan(self.core, step.queues, fresh=step.fresh))
        raise TypeError(f"cannot run a {type(step).__name__} step here")

    async def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """As ``RedisAdapter.execute`` (``_transport.batch_plan``), on asyncio."""
        client = await self.client()
        node = self._node
        if node is not None and (ops or after):
            # a plain node: batch_plan's steps driven here, without its plan
            try:
                batch = node_batch(ops, after, replicas, self.stats)
                replies = await node.execute([op.args for op in batch])
                for reply in replies:
                    if isinstance(reply, Exception):
                        plan = reload_node_plan(node, batch, replies, self.stats)
                        replies = await self._drive(plan)
                        break
                return node_replies(ops, replies, replicas, self.stats, self.description)
            except REDIS_ERRORS as exc:
                raise store_error(self.description, exc) from exc
        try:
            link: Any
            if self._node is not None:
                link = self._node
            else:
                link = client if not _is_cluster(client) else self._slot_map(client)
            plan = batch_plan(link, ops, after, replicas, self.stats, self.description)
            return await self._drive(plan)
        except REDIS_ERRORS as exc:
            raise store_error(self.description, exc) from exc

    def _slot_map(self, cluster: Any) -> SlotMap[Any]:
        if self._slots is None:
            self._slots = _AsyncioSlots(cluster, self._node_client)
        return self._slots

    async def _drive(self, plan: Plan[T]) -> T:
        return await drive_async(plan, self._answer)

    async def _answer(self, step: Send | AtOnce | Rebuild) -> Any:
        if type(step) is Send:
            node = step.node
            if type(node) is AsyncioNode:
                return await node.execute(step.commands)
            pipe = node.pipeline(transaction=False)
            for command in step.commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))
        if type(step) is AtOnce:
            got = await asyncio.gather(
                *(self._drive(p) for _, p in step.plans), return_exceptions=True
            )
            for result in got:
                if isinstance(result, REDIS_ERRORS):
                    step.slots.unreachable(result)
            return first_failure(got)
        assert type(step) is Rebuild
        if step.slots.rebuilding(step.seen):
            await step.slots.cluster.nodes_manager.initialize()
            step.slots.rebuilt()
        return None

    def _node_client(self, node: Any) -> Any:
        """A plain client of one Cluster node, with the cluster's connection
        settings (made once per node, see ``SlotMap.handle``)."""
        from redis.asyncio import ConnectionPool
        from redis.asyncio.client import Redis

        pool = ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
        return Redis(connection_pool=pool)

    async def aclose(self) -> None:
        """Close every connection; the executor cannot be used afterwards."""
        self._closed = True
        nodes = list(self._slots.nodes.values()) if self._slots is not None else []
        self._slots = None
        client, self._client = self._client, None
        plain, self._node = self._node, None
        if plain is not None:
            plain.close()
        for node in nodes:
            with contextlib.suppress(Exception):
                await node.aclose()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()


class AsyncioDoneListener:
    """The asyncio producer's one subscription to the done channel, shared
    by every waiting task (see ``_watch``): a task of the event loop reads
    it and sets the waiters' ``asyncio.Event``; it starts with the first
    wait and ends with :meth:`aclose`.

    :meth:`ready` raises StoreError while the channel could never be
    subscribed (Redis is unreachable); after a drop, waiters wait for the
    re-subscription within their own time (and read their jobs again)."""

    def __init__(
        self, client_of: Callable[[], Awaitable[Any]], channel: str, description: str
    ) -> None:
        self._client_of = client_of
        self.channel = channel
        self.description = description
        self.table: WaiterTable[asyncio.Event] = WaiterTable(asyncio.Event)
        # made in the loop (an asyncio.Event binds to the loop that waits on it)
        self._tried: asyncio.Event | None = None
        self._up: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: Subscriptions confirmed (re-subscriptions after a drop count too).
        self.subscriptions = 0

    async def ready(self, timeout: float) -> bool:
        """Whether the subscription is confirmed within ``timeout`` seconds
        (starting the listener task on first use). StoreError when it could
        never be made."""
        if self._closed:
            raise StoreError("the producer is closed")
        if self._task is not None and self._task.get_loop() is not asyncio.get_running_loop():
            raise RuntimeError(
                "an AsyncioProducer belongs to the event loop that first used it; "
                "make one per loop (e.g. in the app's lifespan)"
            )
        if self._task is None:
            self._tried, self._up = asyncio.Event(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="chronos-done-listener"
            )
        tried, up = self._tried, self._up
        assert tried is not None and up is not None
        deadline = time.monotonic() + timeout
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tried.wait(), timeout)
        if not up.is_set() and self._error is not None and not self.subscriptions:
            raise store_error(self.description, self._error) from self._error
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(up.wait(), max(0.0, deadline - time.monotonic()))
        return up.is_set()

    def _set(self, *, up: bool, error: BaseException | None = None) -> None:
        assert self._tried is not None and self._up is not None
        self._error = error
        if up:
            self._up.set()
        else:
            self._up.clear()
        self._tried.set()

    async def _run(self) -> None:
        pubsub: Any = None
        try:
            while True:
                try:
                    if pubsub is None:
                        pubsub = (await self._client_of()).pubsub()
                        await pubsub.subscribe(self.channel)
                    messages = []
                    message = await pubsub.get_message(timeout=POLL_BLOCK)
                    while message is not None:
                        messages.append(message)
                        message = await pubsub.get_message(timeout=0.0)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Anything: redis-py raises odd errors when a connection
                    # closes under a read; the task must go on.
                    subscription_failed(exc)
                    self._set(up=False, error=exc)
                    self.table.wake_all()  # they read their jobs again once subscribed
                    if pubsub is not None:
                        with contextlib.suppress(Exception):
                            await pubsub.aclose()
                        pubsub = None
                    await asyncio.sleep(RESUBSCRIBE_DELAY)
                    continue
                confirmed = self.table.dispatch(messages)
                if confirmed:
                    self.subscriptions += confirmed
                    self._set(up=True)
        finally:
            if pubsub is not None:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def aclose(self) -> None:
        """End the listener and wake every waiter."""
        self._closed = True
        self.table.wake_all()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
