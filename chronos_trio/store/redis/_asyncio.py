"""Running batches and waiting for outcomes on ``redis.asyncio`` (no Trio),
for the asyncio producer.

The same rules as the blocking path (``_blocking``): one pipeline per node,
``NOSCRIPT`` answered by loading the script there and re-running exactly
the ops that got it; on a Cluster, ops grouped by the node that owns their
slot (redis-py's cluster pipeline refuses ``EVALSHA``) and pipelined on a
client of that node, the nodes in parallel; ``MOVED``/``ASK`` refreshes the
slot map and re-runs those ops. Every failure is a StoreError.

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
from ._batch import AdapterStatistics, check_replies, reload_plan, store_error
from ._blocking import REDIS_ERRORS, moved
from ._core import Call, NeedMeta, Plan, RedisCore, T, meta_plan
from ._scripts import Op, ReplicaWait
from ._watch import POLL_BLOCK, RESUBSCRIBE_DELAY, WaiterTable, subscription_failed


def _is_cluster(client: Any) -> bool:
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, RedisCluster)


class AsyncioExecutor:
    """Runs batches and sans-IO plans (see ``_core``) on a ``redis.asyncio``
    client made by ``factory`` on first use."""

    def __init__(self, factory: Callable[[], Any], core: RedisCore, description: str) -> None:
        self._factory = factory
        self._client: Any = None
        self._lock: asyncio.Lock | None = None
        self._nodes: dict[str, Any] = {}  # a Cluster node's name -> its own client
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
                self._client = client
        return self._client

    async def run(self, plan: Plan[T]) -> T:
        """Run a plan to its result (its topology reads through the core's
        cache). Raises what its batches raise (the plan is closed then)."""
        try:
            step = next(plan)
            while True:
                reply: Any
                if type(step) is Call:
                    reply = await self.execute(step.ops, step.after, replicas=step.replicas)
                elif type(step) is NeedMeta:
                    reply = await self.run(meta_plan(self.core, step.queues, fresh=step.fresh))
                else:
                    raise TypeError(f"cannot run a {type(step).__name__} step here")
                step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            plan.close()

    async def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """Like ``RedisAdapter.execute``: the replies of ``ops``, in order;
        ``after`` runs once they are applied; StoreError for an error reply
        of an op that is not soft, or fewer replicas than ``replicas`` asks."""
        if not ops and not after:
            return []
        client = await self.client()
        acks: list[Any] = []
        try:
            if not _is_cluster(client):
                batch = [*ops, *after, *([replicas.op()] if replicas else [])]
                replies = await self._run_on_node(client, batch)
                if replicas is not None:
                    acks.append(replies[-1])
                replies = replies[: len(ops)]
            else:
                replies = await self._execute_cluster(client, ops, replicas, acks)
                if after:
                    await self._execute_cluster(client, after)
        except REDIS_ERRORS as exc:
            raise store_error(self.description, exc) from exc
        check_replies(ops, replies, self.description)
        if replicas is not None:
            self.stats.replica_waits += len(acks)
            replicas.check(acks, self.description, lambda e: store_error(self.description, e))
        return replies

    async def _pipeline(self, client: Any, ops: Sequence[Op]) -> list[Any]:
        import redis.exceptions

        self.stats.round_trips += 1
        self.stats.commands += len(ops)
        if len(ops) == 1:
            try:
                return [await client.execute_command(*ops[0].args)]
            except redis.exceptions.ResponseError as exc:
                return [exc]
        pipe = client.pipeline(transaction=False)
        for op in ops:
            pipe.execute_command(*op.args)
        return list(await pipe.execute(raise_on_error=False))

    async def _run_on_node(self, client: Any, ops: Sequence[Op]) -> list[Any]:
        replies = await self._pipeline(client, ops)
        missing, scripts = reload_plan(ops, replies)
        if missing:
            for script in scripts:
                await client.script_load(script.source)
                self.stats.script_loads += 1
            again = await self._pipeline(client, [ops[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    def _node_client(self, node: Any) -> Any:
        """A plain client of one Cluster node, with the cluster's connection
        settings (made once per node)."""
        client = self._nodes.get(node.name)
        if client is None:
            from redis.asyncio import ConnectionPool
            from redis.asyncio.client import Redis

            pool = ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
            client = self._nodes[node.name] = Redis(connection_pool=pool)
        return client

    async def _execute_cluster(
        self,
        cluster: Any,
        ops: Sequence[Op],
        wait: ReplicaWait | None = None,
        acks: list[Any] | None = None,
    ) -> list[Any]:
        replies: list[Any] = [None] * len(ops)
        pending = list(range(len(ops)))
        for attempt in range(3):
            groups: dict[str, tuple[Any, list[int]]] = {}
            for i in pending:
                route = ops[i].route
                node = (
                    cluster.get_node_from_key(route)
                    if route is not None
                    else cluster.get_default_node()
                )
                groups.setdefault(node.name, (self._node_client(node), []))[1].append(i)

            async def run_group(client: Any, idx: list[int]) -> None:
                got = await self._run_on_node(
                    client, [ops[i] for i in idx] + ([wait.op()] if wait else [])
                )
                if wait is not None and acks is not None:
                    acks.append(got.pop())
                for i, reply in zip(idx, got, strict=True):
                    replies[i] = reply

            await asyncio.gather(*(run_group(c, idx) for c, idx in groups.values()))
            pending = moved(replies, pending)
            if not pending:
                break
            if attempt < 2:
                # the slot moved (resharding or failover): refresh the map, re-run those ops
                await cluster.nodes_manager.initialize()
        return replies

    async def aclose(self) -> None:
        """Close every connection; the executor cannot be used afterwards."""
        self._closed = True
        nodes, self._nodes = list(self._nodes.values()), {}
        client, self._client = self._client, None
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
