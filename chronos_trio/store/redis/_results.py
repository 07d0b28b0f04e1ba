"""Job outcomes for producers in Trio, and waiting for them without polling.

The protocol (subscribe first, register, watch, block: no wake-up is lost
between the check and the block) and the watch itself are the sans-IO plans
of ``_watch``, shared with the producers outside Trio; this module drives
them over the store's adapter.

All waiters of a store share one connection, held by one thread running
redis-py's ``PubSub`` (it covers TCP, TLS, Unix sockets, Sentinel and the
Cluster, where a message published on any node reaches a subscriber on any
node). When that connection drops, messages may be lost: the listener
subscribes again and wakes every waiter once it is confirmed, and each reads
its job again.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import TYPE_CHECKING, Any

import trio

from ...records._jobs import JobOutcome, JobRef
from ._context import StoreContext
from ._core import Steps
from ._watch import (
    RESUBSCRIBE_DELAY,
    Block,
    WaiterTable,
    Watch,
    poll,
    subscription_failed,
    wait_plan,
    watch_plan,
)

if TYPE_CHECKING:
    import redis.client
    import redis.cluster

    RedisPy = redis.Redis | redis.cluster.RedisCluster


class DoneListener:
    """One subscription per store to the namespace's done channel, shared by
    every waiter of the process; started by the first waiter, in a Trio
    system task (it outlives the task that started it), stopped by
    :meth:`stop` or the end of the Trio run."""

    def __init__(self, adapter_client: Any, channel: str) -> None:
        self._client_of = adapter_client  # async () -> redis-py client (made on first use)
        self.channel = channel
        self.table: WaiterTable[trio.Event] = WaiterTable(trio.Event)
        self._confirmed = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop = threading.Event()
        self._limiter = trio.CapacityLimiter(1)
        #: Subscriptions confirmed (re-subscriptions after a drop count too).
        self.subscriptions = 0

    def confirmed(self) -> bool:
        """Whether the subscription is confirmed in this Trio run now (then
        :meth:`ready` would return at once, after a checkpoint)."""
        return self._confirmed.is_set() and self._token is trio.lowlevel.current_trio_token()

    async def ready(self) -> None:
        """Return once the subscription is confirmed (starting the listener
        in this Trio run if it is not running)."""
        token = trio.lowlevel.current_trio_token()
        if self._token is not token:
            # first use, or a new trio.run (a listener dies with its run)
            self._token = token
            self._confirmed = trio.Event()
            self.table = WaiterTable(trio.Event)
            self._stop = threading.Event()
            self._limiter = trio.CapacityLimiter(1)
            trio.lowlevel.spawn_system_task(self._run, self._stop, name="chronos-done-listener")
        await self._confirmed.wait()

    def waiting(self) -> int:
        """How many waiters are registered (for tests and monitoring)."""
        return self.table.waiting()

    def stop(self) -> None:
        self._stop.set()
        self._token = None
        self.table.wake_all()

    async def _run(self, stop: threading.Event) -> None:
        pubsub: redis.client.PubSub | None = None
        while not stop.is_set():
            try:
                if pubsub is None:
                    client: RedisPy = await self._client_of()
                    pubsub = await trio.to_thread.run_sync(
                        self._subscribe, client, limiter=self._limiter
                    )
                messages = await trio.to_thread.run_sync(
                    poll, pubsub, stop, abandon_on_cancel=True, limiter=self._limiter
                )
            except Exception as exc:
                # Anything: a system task must never raise (it would crash the
                # Trio run), and redis-py raises odd errors when the store
                # closes the connection under a poll.
                if stop.is_set():
                    return
                subscription_failed(exc)
                self._confirmed = trio.Event()
                self.table.wake_all()  # they read their jobs again once subscribed
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await trio.to_thread.run_sync(pubsub.close, limiter=self._limiter)
                    pubsub = None
                await trio.sleep(RESUBSCRIBE_DELAY)
                continue
            confirmed = self.table.dispatch(messages)
            if confirmed:
                self.subscriptions += confirmed
                self._confirmed.set()

    def _subscribe(self, client: RedisPy) -> redis.client.PubSub:
        pubsub: redis.client.PubSub = client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
        pubsub.subscribe(self.channel)
        return pubsub


async def _watch(
    ctx: StoreContext, ref: JobRef, channel: str
) -> tuple[JobOutcome | None, bytes | None]:
    """Run watch.lua where ``ref``'s job lives: its outcome and its key. A
    read, run lone (``run_shielded``: to completion as any round trip once
    sent, with no cancel scope around it, and in a quiet run without a pass
    of the scheduler, see ``_quiet``)."""
    return await ctx.run_shielded(watch_plan(ctx, ref, channel))


async def outcome(ctx: StoreContext, ref: JobRef) -> JobOutcome | None:
    found, _ = await _watch(ctx, ref, "")
    return found


async def wait_outcome(
    ctx: StoreContext, listener: DoneListener, ref: JobRef, timeout: float
) -> JobOutcome | None:
    """``ref``'s outcome once finished, waiting at most ``timeout`` seconds
    (then its outcome as it stands; None: no such job). The protocol of
    ``_watch``: the subscription confirmed first (waited for only when it
    is not yet: a confirmed one costs no checkpoint), then each read a lone
    round trip (:func:`_watch`); only a block waits under the deadline. A
    finished job is thus one round trip and no scope (issue 29: a chain's
    result read)."""
    if not timeout > 0 or math.isnan(timeout):
        return await outcome(ctx, ref)
    deadline = trio.current_time() + timeout
    if not listener.confirmed():
        with trio.move_on_at(deadline):
            await listener.ready()
        if not listener.confirmed():
            return await outcome(ctx, ref)  # not subscribed in time: as it stands
    with Steps(wait_plan(listener.table, ctx.keys, ref, listener.channel)) as steps:
        for step in steps:
            if type(step) is Watch:
                steps.reply = await _watch(ctx, step.ref, step.channel)
            else:
                assert type(step) is Block
                with trio.move_on_at(deadline):
                    await step.event.wait()
                if not step.event.is_set():
                    break  # the deadline passed
                steps.reply = None
        else:
            return steps.result
    return await outcome(ctx, ref)
