"""Running batches of ops on redis-py's blocking clients (no Trio).

The Trio adapter runs these functions in worker threads; the synchronous
producer calls them directly (:class:`BlockingExecutor`), and waits for
outcomes with a :class:`BlockingDoneListener`. Either way a batch
is one pipeline per node; a ``NOSCRIPT`` reply loads the script on that node
and re-runs exactly the ops that got it (they did not run); on a Cluster the
ops are grouped by the node owning each op's slot (redis-py's cluster
pipeline refuses ``EVALSHA``), and a ``MOVED``/``ASK`` reply refreshes the
slot map and re-runs the ops that got it.
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
from ._batch import AdapterStatistics, check_replies, reload_plan, store_error
from ._core import Call, NeedMeta, Plan, RedisCore, T, meta_plan
from ._scripts import Op, ReplicaWait
from ._watch import RESUBSCRIBE_DELAY, WaiterTable, poll, subscription_failed

#: How long one poll of a producer's subscription blocks (``stop`` returns within it).
_POLL = 0.25

#: Errors that mean "Redis is unreachable or refused", mapped to StoreError.
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)

Client = redis.Redis | redis.cluster.RedisCluster


def moved(replies: Sequence[Any], pending: Sequence[int]) -> list[int]:
    """The ops of ``pending`` whose slot moved (``MOVED`` is an ``ASK`` in redis-py)."""
    return [i for i in pending if isinstance(replies[i], redis.exceptions.AskError)]


def pipeline(client: redis.Redis, ops: Sequence[Op], stats: AdapterStatistics) -> list[Any]:
    """One pipeline on one node (error replies returned as exceptions)."""
    stats.round_trips += 1
    stats.commands += len(ops)
    if len(ops) == 1:
        try:
            return [client.execute_command(*ops[0].args)]  # type: ignore[no-untyped-call]
        except redis.exceptions.ResponseError as exc:
            return [exc]
    pipe = client.pipeline(transaction=False)
    for op in ops:
        pipe.execute_command(*op.args)  # type: ignore[no-untyped-call]
    return list(pipe.execute(raise_on_error=False))


def run_on_node(client: redis.Redis, ops: Sequence[Op], stats: AdapterStatistics) -> list[Any]:
    """One pipeline on one node; reload scripts and re-run ops that got NOSCRIPT."""
    replies = pipeline(client, ops, stats)
    missing, scripts = reload_plan(ops, replies)
    if missing:
        for script in scripts:
            client.script_load(script.source)
            stats.script_loads += 1
        for i, reply in zip(
            missing, pipeline(client, [ops[i] for i in missing], stats), strict=True
        ):
            replies[i] = reply
    return replies


def node_groups(
    cluster: redis.cluster.RedisCluster, ops: Sequence[Op], pending: Sequence[int]
) -> dict[str, tuple[redis.Redis, list[int]]]:
    """The ops of ``pending`` grouped by the node owning their route (any
    node for a route of None), with each node's own client."""
    groups: dict[str, tuple[redis.Redis, list[int]]] = {}
    for i in pending:
        route = ops[i].route
        if route is not None:
            node = cluster.get_node_from_key(route)  # type: ignore[no-untyped-call]
        else:
            node = cluster.get_default_node()  # type: ignore[no-untyped-call]
        if node.name not in groups:
            groups[node.name] = (cluster.get_redis_connection(node), [])
        groups[node.name][1].append(i)
    return groups


class BlockingExecutor:
    """Runs batches and sans-IO plans (see ``_core``) on a blocking redis-py
    client, for the synchronous producer. Safe to use from many threads
    (redis-py's clients pool their connections); a Cluster's nodes are
    visited one after the other.

    ``client`` is made by ``factory`` on first use (a ``RedisCluster``
    connects as soon as it is built); every failure is a StoreError naming
    ``description``."""

    def __init__(self, factory: Callable[[], Client], core: RedisCore, description: str) -> None:
        self._factory = factory
        self._client: Client | None = None
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
                        self._client = self._factory()
                    except REDIS_ERRORS as exc:
                        raise store_error(self.description, exc) from exc
                client = self._client
        return client

    def run(self, plan: Plan[T]) -> T:
        """Run a plan to its result (its topology reads through the core's
        cache). Raises what its batches raise (the plan is closed then)."""
        try:
            step = next(plan)
            while True:
                reply: Any
                if type(step) is Call:
                    reply = self.execute(step.ops, step.after, replicas=step.replicas)
                elif type(step) is NeedMeta:
                    reply = self.run(meta_plan(self.core, step.queues, fresh=step.fresh))
                else:
                    raise TypeError(f"cannot run a {type(step).__name__} step here")
                step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            plan.close()

    def execute(
        self, ops: Sequence[Op], after: Sequence[Op] = (), *, replicas: ReplicaWait | None = None
    ) -> list[Any]:
        """Like ``RedisAdapter.execute``: the replies of ``ops``, in order;
        ``after`` runs once they are applied; StoreError for an error reply
        of an op that is not soft, or fewer replicas than ``replicas`` asks."""
        if not ops and not after:
            return []
        client = self.client()
        acks: list[Any] = []
        try:
            if isinstance(client, redis.Redis):
                batch = [*ops, *after, *([replicas.op()] if replicas else [])]
                replies = run_on_node(client, batch, self.stats)
                if replicas is not None:
                    acks.append(replies[-1])
                replies = replies[: len(ops)]
            else:
                replies = self._execute_cluster(client, ops, replicas, acks)
                if after:
                    self._execute_cluster(client, after)
        except REDIS_ERRORS as exc:
            raise store_error(self.description, exc) from exc
        check_replies(ops, replies, self.description)
        if replicas is not None:
            self.stats.replica_waits += len(acks)
            replicas.check(acks, self.description, lambda e: store_error(self.description, e))
        return replies

    def _execute_cluster(
        self,
        cluster: redis.cluster.RedisCluster,
        ops: Sequence[Op],
        wait: ReplicaWait | None = None,
        acks: list[Any] | None = None,
    ) -> list[Any]:
        replies: list[Any] = [None] * len(ops)
        pending = list(range(len(ops)))
        for attempt in range(3):
            for client, idx in node_groups(cluster, ops, pending).values():
                got = run_on_node(
                    client, [ops[i] for i in idx] + ([wait.op()] if wait else []), self.stats
                )
                if wait is not None and acks is not None:
                    acks.append(got.pop())
                for i, reply in zip(idx, got, strict=True):
                    replies[i] = reply
            pending = moved(replies, pending)
            if not pending:
                break
            if attempt < 2:
                # the slot moved (resharding or failover): refresh the map, re-run those ops
                cluster.nodes_manager.initialize()
        return replies

    def close(self) -> None:
        """Close the connection pools; the executor cannot be used afterwards."""
        self._closed = True
        with self._lock:
            client, self._client = self._client, None
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
                    pubsub = self._client_of().pubsub()  # type: ignore[no-untyped-call]
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
