"""The blocking transport: batches on redis-py's blocking clients (no Trio).

:class:`BlockingExecutor` implements ``_transport.BlockingTransport`` for
the synchronous producer: it runs the transport's sans-IO ``batch_plan``
(one pipeline per node, the ``NOSCRIPT`` reload and retry, ``MOVED``/``ASK``
on a Cluster, whose ops go to the node owning their slot because redis-py's
cluster pipeline refuses ``EVALSHA``) and answers its requests with
:func:`pipeline` calls, a Cluster's nodes one after the other. The Trio
adapter runs :func:`pipeline` in worker threads when it cannot use Trio
sockets. The producer waits for outcomes with a :class:`BlockingDoneListener`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.cluster
import redis.exceptions

from .._roles import StoreError
from ._batch import AdapterStatistics, store_error
from ._blocking_node import BlockingNode
from ._core import Call, NeedMeta, Plan, RedisCore, T, drive, meta_plan
from ._scripts import Op, ReplicaWait
from ._transport import (
    AtOnce,
    Rebuild,
    Send,
    SlotMap,
    batch_plan,
    node_batch,
    node_replies,
    reload_node_plan,
)
from ._watch import RESUBSCRIBE_DELAY, WaiterTable, poll, subscription_failed

#: How long one poll of a producer's subscription blocks (``stop`` returns within it).
_POLL = 0.25

#: Errors that mean "Redis is unreachable or refused", mapped to StoreError.
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)

Client = redis.Redis | redis.cluster.RedisCluster


def pipeline(client: redis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """One pipeline on one node (error replies returned as exceptions): the
    answer to a transport plan's ``Send`` on redis-py's blocking client.

    The commands go out in one write on a connection of the client's pool
    and their replies are read back in order, through the client's own
    response callbacks (:func:`lean_pipeline`); a client of one pinned
    connection goes through redis-py's pipeline."""
    if client.connection is None:
        return lean_pipeline(client, commands)
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
    return list(pipe.execute(raise_on_error=False))


def lean_pipeline(client: redis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``commands`` as one write on a pooled connection, their replies as
    redis-py's pipeline gives them (each through the client's response
    callback; an error reply as its exception, in place), without the
    pipeline's per-call machinery (about 250 us a round trip here).

    Failures behave as the Trio-native transport's (``_native``): a
    connection that fails is closed, never pooled half-read (also when the
    call is interrupted); a pooled connection that dies before any reply
    (the server restarted since it was last used: the commands never ran)
    is replaced and the commands sent once more; any other failure is
    raised (a ``TimeoutError`` is never retried: the commands may be
    running). Raises redis-py's ConnectionError or TimeoutError."""
    pool = client.connection_pool
    parse = client.parse_response
    for attempt in (1, 2):
        # A connection that was idle in the pool (not one made now) may have
        # died since; unknown pool internals count as pooled.
        pooled = bool(getattr(pool, "_available_connections", True))
        conn = pool.get_connection()
        replied = False
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for command in commands:
                try:
                    replies.append(parse(conn, command[0]))  # type: ignore[no-untyped-call]
                except redis.exceptions.ResponseError as exc:
                    replies.append(exc)
                replied = True
        except redis.exceptions.ConnectionError:
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            if attempt == 1 and pooled and not replied:
                continue
            raise
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            raise
        pool.release(conn)
        return replies
    raise AssertionError("unreachable")  # pragma: no cover


class BlockingExecutor:
    """The blocking transport (``_transport.BlockingTransport``): runs
    batches and sans-IO plans (see ``_core``) on a blocking redis-py client,
    for the synchronous producer. Safe to use from many threads (redis-py's
    clients pool their connections); a Cluster's nodes are visited one after
    the other.

    ``client`` is made by ``factory`` on first use (a ``RedisCluster``
    connects as soon as it is built); every failure is a StoreError naming
    ``description``."""

    def __init__(self, factory: Callable[[], Client], core: RedisCore, description: str) -> None:
        self._factory = factory
        self._client: Client | None = None
        #: The plain node's own blocking connections (None: redis-py's pool).
        self._node: BlockingNode | None = None
        self._slots: SlotMap[redis.Redis] | None = None
        self._lock = threading.Lock()
        self.core = core
        self.description = description
        self.stats = AdapterStatistics()
        self._closed = False

    def client(self) -> Client:
        """The redis-py client, made on first use (errors become StoreError)."""
        if self._closed:
            raise StoreError("the producer is closed")
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    try:
                        made = self._factory()
                    except REDIS_ERRORS as exc:
                        raise store_error(self.description, exc) from exc
                    if isinstance(made, redis.Redis):
                        self._node = BlockingNode.for_client(made)
                        self.core.one_node = True
                    self._client = made
                client = self._client
        return client

    def run(self, plan: Plan[T]) -> T:
        """Run a plan to its result (its topology reads through the core's
        cache). Raises what its batches raise (the plan is closed then)."""
        return drive(plan, self._answer_store)

    def _answer_store(self, step: Call | NeedMeta) -> Any:
        if type(step) is Call:
            return self.execute(step.ops, step.after, replicas=step.replicas)
        if type(step) is NeedMeta:
            return self.run(meta_plan(self.core, step.queues, fresh=step.fresh))
        raise TypeError(f"cannot run a {type(step).__name__} step here")

    def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """As ``RedisAdapter.execute`` (``_transport.batch_plan``), blocking."""
        client = self.client()
        node = self._node
        if node is not None and (ops or after):
            # a plain node: batch_plan's steps driven here, without its plan
            try:
                batch = node_batch(ops, after, replicas, self.stats)
                replies = node.execute([op.args for op in batch])
                for reply in replies:
                    if isinstance(reply, Exception):
                        plan = reload_node_plan(node, batch, replies, self.stats)
                        replies = self._drive(plan)
                        break
                return node_replies(ops, replies, replicas, self.stats, self.description)
            except REDIS_ERRORS as exc:
                raise store_error(self.description, exc) from exc
        try:
            link: Any
            if isinstance(client, redis.Redis):
                link = client if self._node is None else self._node
            else:
                link = self._slot_map(client)
            return self._drive(batch_plan(link, ops, after, replicas, self.stats, self.description))
        except REDIS_ERRORS as exc:
            raise store_error(self.description, exc) from exc

    def _slot_map(self, cluster: redis.cluster.RedisCluster) -> SlotMap[redis.Redis]:
        if self._slots is None:
            self._slots = SlotMap(cluster, cluster.get_redis_connection)
        return self._slots

    def _drive(self, plan: Plan[T]) -> T:
        return drive(plan, self._answer)

    def _answer(self, step: Send | AtOnce | Rebuild) -> Any:
        if type(step) is Send:
            node = step.node
            if type(node) is BlockingNode:
                return node.execute(step.commands)
            return pipeline(node, step.commands)
        if type(step) is AtOnce:
            results = []
            for _, plan in step.plans:  # one node after the other
                try:
                    results.append(self._drive(plan))
                except REDIS_ERRORS as exc:
                    step.slots.unreachable(exc)
                    raise
            return results
        assert type(step) is Rebuild
        if step.slots.rebuilding(step.seen):
            step.slots.cluster.nodes_manager.initialize()
            step.slots.rebuilt()
        return None

    def close(self) -> None:
        """Close the connection pools; the executor cannot be used afterwards."""
        self._closed = True
        with self._lock:
            client, self._client = self._client, None
            node, self._node = self._node, None
        if node is not None:
            node.close()
        if client is not None:
            client.close()


class BlockingDoneListener:
    """The synchronous producer's one subscription to the done channel,
    shared by every thread that waits (see ``_watch``): a daemon thread
    reads it and sets the waiters' ``threading.Event``; it starts with the
    first wait and ends with :meth:`stop`.

    :meth:`ready` raises StoreError while the channel could never be
    subscribed (Redis is unreachable); after a drop, waiters wait for the
    re-subscription within their own time (and read their jobs again)."""

    def __init__(self, client_of: Callable[[], Client], channel: str, description: str) -> None:
        self._client_of = client_of
        self.channel = channel
        self.description = description
        self.table: WaiterTable[threading.Event] = WaiterTable(threading.Event)
        self._cond = threading.Condition()
        self._up = False
        self._tried = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        #: Subscriptions confirmed (re-subscriptions after a drop count too).
        self.subscriptions = 0

    def ready(self, timeout: float) -> bool:
        """Whether the subscription is confirmed within ``timeout`` seconds
        (starting the listener thread on first use). StoreError when it
        could never be made."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._pid != os.getpid():
                # a forked child (a pre-forking server): the thread stayed
                # in the parent, start this process's own
                self._pid, self._thread, self._up, self._tried = os.getpid(), None, False, False
                self.table = WaiterTable(threading.Event)
            if self._thread is None:
                if self._stop.is_set():
                    raise StoreError("the producer is closed")
                self._thread = threading.Thread(
                    target=self._run, name="chronos-done-listener", daemon=True
                )
                self._thread.start()
            self._cond.wait_for(lambda: self._tried, timeout)
            if not self._up and self._error is not None and not self.subscriptions:
                raise store_error(self.description, self._error) from self._error
            return self._cond.wait_for(lambda: self._up, max(0.0, deadline - time.monotonic()))

    def _set(self, *, up: bool, error: BaseException | None = None) -> None:
        with self._cond:
            self._up, self._tried, self._error = up, True, error
            self._cond.notify_all()

    def _run(self) -> None:
        pubsub: Any = None
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._client_of().pubsub()  # type: ignore[no-untyped-call, unused-ignore]
                    pubsub.subscribe(self.channel)
                messages = poll(pubsub, self._stop, _POLL)
            except Exception as exc:
                # Anything: redis-py raises odd errors when a connection
                # closes under a poll; the thread must go on.
                if self._stop.is_set():
                    break
                subscription_failed(exc)
                self._set(up=False, error=exc)
                self.table.wake_all()  # they read their jobs again once subscribed
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
                    pubsub = None
                self._stop.wait(RESUBSCRIBE_DELAY)
                continue
            confirmed = self.table.dispatch(messages)
            if confirmed:
                self.subscriptions += confirmed
                self._set(up=True)
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def stop(self, timeout: float = 2.0) -> None:
        """End the listener (within its poll time) and wake every waiter."""
        self._stop.set()
        self.table.wake_all()
        with self._cond:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
