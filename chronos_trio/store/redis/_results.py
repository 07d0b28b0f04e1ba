"""Job outcomes for producers, and waiting for them without polling.

A waiter (``wait_outcome``):

1. makes sure this store's one subscription to the namespace's done channel
   is confirmed by Redis (:class:`DoneListener`);
2. registers itself for the job's key (a :class:`trio.Event`);
3. runs ``watch.lua``, which reads the job's outcome and, while the job is
   not finished, names the channel in the record (field ``w``) in the same
   atomic step;
4. when the job was not finished, blocks on its event until the listener
   sees the job's key published, then reads again from step 2.

Every script that finishes a job (settle, recovery to dead, dead-lettering,
delete) publishes the job's key on the channel its record names, so a finish
after step 3 is always published, and the subscription (step 1) and the
registration (step 2) came before it: no wake-up is lost between the check
and the block. A job nobody waits on publishes nothing.

All waiters of a store share one connection, held by one thread running
redis-py's ``PubSub`` (it covers TCP, TLS, Unix sockets, Sentinel and the
Cluster, where a message published on any node reaches a subscriber on any
node). When that connection drops, messages may be lost: the listener
subscribes again and wakes every waiter once it is confirmed, and each reads
its job again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

import redis
import redis.client
import redis.exceptions
import trio

from ...records._jobs import FINISHED_STATES, JobOutcome, JobRef, JobState
from ._adapter import Client
from ._admin import _locations
from ._codec import parse_count, parse_number
from ._context import StoreContext
from ._scripts import WATCH, Op

log = logging.getLogger("chronos_trio.store.redis")

#: How long one poll of the subscription blocks in its thread (the listener
#: notices a stop within this).
_POLL_BLOCK = 1.0
#: Messages read per poll at most (one thread hop carries a burst).
_POLL_BATCH = 1000
#: Pause before subscribing again after the connection failed.
_RESUBSCRIBE_DELAY = 0.5


def _poll(pubsub: redis.client.PubSub, stop: threading.Event) -> list[dict[str, Any]]:
    """In a thread: the next messages of ``pubsub`` (blocking up to
    :data:`_POLL_BLOCK` for the first). Closes it when asked to stop."""
    messages: list[dict[str, Any]] = []
    try:
        message = pubsub.get_message(timeout=_POLL_BLOCK)
        while message is not None:
            messages.append(message)
            if len(messages) >= _POLL_BATCH:
                break
            message = pubsub.get_message(timeout=0.0)
    finally:
        if stop.is_set():
            pubsub.close()
    return messages


class DoneListener:
    """One subscription per store to the namespace's done channel, shared by
    every waiter of the process; started by the first waiter, in a Trio
    system task (it outlives the task that started it), stopped by
    :meth:`stop` or the end of the Trio run."""

    def __init__(self, adapter_client: Any, channel: str) -> None:
        self._client_of = adapter_client  # async () -> redis-py client
        self.channel = channel
        self._waiters: dict[bytes, list[trio.Event]] = {}
        self._confirmed = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop = threading.Event()
        self._limiter = trio.CapacityLimiter(1)
        #: Subscriptions confirmed (re-subscriptions after a drop count too).
        self.subscriptions = 0

    async def ready(self) -> None:
        """Return once the subscription is confirmed (starting the listener
        in this Trio run if it is not running)."""
        token = trio.lowlevel.current_trio_token()
        if self._token is not token:
            # first use, or a new trio.run (a listener dies with its run)
            self._token = token
            self._confirmed = trio.Event()
            self._waiters.clear()
            self._stop = threading.Event()
            self._limiter = trio.CapacityLimiter(1)
            trio.lowlevel.spawn_system_task(self._run, self._stop, name="chronos-done-listener")
        await self._confirmed.wait()

    def register(self, job_key: bytes) -> trio.Event:
        event = trio.Event()
        self._waiters.setdefault(job_key, []).append(event)
        return event

    def unregister(self, job_key: bytes, event: trio.Event) -> None:
        events = self._waiters.get(job_key)
        if events is not None:
            try:
                events.remove(event)
            except ValueError:
                pass
            if not events:
                del self._waiters[job_key]

    def waiting(self) -> int:
        """How many waiters are registered (for tests and monitoring)."""
        return sum(len(e) for e in self._waiters.values())

    def _wake(self, job_key: bytes) -> None:
        for event in self._waiters.pop(job_key, ()):
            event.set()

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for events in waiters.values():
            for event in events:
                event.set()

    def stop(self) -> None:
        self._stop.set()
        self._token = None
        self._wake_all()

    async def _run(self, stop: threading.Event) -> None:
        pubsub: redis.client.PubSub | None = None
        while not stop.is_set():
            try:
                if pubsub is None:
                    client: Client = await self._client_of()
                    pubsub = await trio.to_thread.run_sync(
                        self._subscribe, client, limiter=self._limiter
                    )
                messages = await trio.to_thread.run_sync(
                    _poll, pubsub, stop, abandon_on_cancel=True, limiter=self._limiter
                )
            except Exception as exc:
                # Anything: a system task must never raise (it would crash the
                # Trio run), and redis-py raises odd errors when the store
                # closes the connection under a poll.
                if stop.is_set():
                    return
                log.warning(
                    "result waiters' subscription failed (%s: %s); subscribing again",
                    type(exc).__name__,
                    exc,
                )
                self._confirmed = trio.Event()
                self._wake_all()  # they read their jobs again once subscribed
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await trio.to_thread.run_sync(pubsub.close, limiter=self._limiter)
                    pubsub = None
                await trio.sleep(_RESUBSCRIBE_DELAY)
                continue
            for message in messages:
                kind = message.get("type")
                if kind == "message":
                    data = message.get("data")
                    if isinstance(data, bytes):
                        self._wake(data)
                elif kind == "subscribe":
                    # (again, after a reconnect: what was published meanwhile
                    # is lost, so every waiter reads its job again)
                    self.subscriptions += 1
                    self._wake_all()
                    self._confirmed.set()

    def _subscribe(self, client: Client) -> redis.client.PubSub:
        pubsub: redis.client.PubSub = client.pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(self.channel)
        return pubsub


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def _outcome_from(job_id: str, queue: str, reply: Sequence[Any]) -> JobOutcome | None:
    """The outcome in a watch.lua reply (total: an unreadable field reads as
    its default; a job whose state cannot be read counts as unfinished)."""
    if len(reply) < 9 or reply[1] != 1:
        return None
    now = parse_number(reply[0]) if isinstance(reply[0], bytes) else None
    state_raw = reply[2]
    try:
        state = JobState(_text(state_raw)) if state_raw else JobState.READY
    except ValueError:
        state = JobState.READY
    attempts = parse_count(reply[3]) if isinstance(reply[3], bytes) else None
    finished_at = parse_number(reply[5]) if isinstance(reply[5], bytes) else None
    result = reply[6] if isinstance(reply[6], bytes) else None
    until = parse_number(reply[7]) if isinstance(reply[7], bytes) else None
    if until is None:
        result = None
    expired = until is not None and now is not None and until <= now
    return JobOutcome(
        job_id,
        queue,
        state,
        attempts or 0,
        _text(reply[4]),
        finished_at,
        None if expired else result,
        until,
        expired,
        _text(reply[8]),
    )


async def _watch(
    ctx: StoreContext, ref: JobRef, channel: str
) -> tuple[JobOutcome | None, bytes | None]:
    """Run watch.lua where ``ref``'s job lives: its outcome and its key."""
    if ref.queue is not None and ref.queue_version is not None and ref.partition is not None:
        places = [ctx.keys.partition(ref.queue, ref.queue_version, ref.partition)]
    else:
        places = await _locations(ctx, ref.job_id, ref.queue)
    if not places:
        return None, None
    replies = await ctx.adapter.execute(
        [Op.script_call(WATCH, [pk.job(ref.job_id)], [channel], soft=True) for pk in places]
    )
    for pk, reply in zip(places, replies, strict=True):
        if isinstance(reply, Exception):
            continue
        outcome = _outcome_from(ref.job_id, pk.queue, reply)
        if outcome is not None:
            return outcome, pk.job(ref.job_id).encode()
    return None, None


def _expected_key(ctx: StoreContext, ref: JobRef) -> bytes:
    if ref.queue is None:
        return b""  # unknown: the first watch tells
    pk = ctx.keys.partition(ref.queue, ref.queue_version or 1, ref.partition or 0)
    return pk.job(ref.job_id).encode()


async def outcome(ctx: StoreContext, ref: JobRef) -> JobOutcome | None:
    found, _ = await _watch(ctx, ref, "")
    return found


async def wait_outcome(
    ctx: StoreContext, listener: DoneListener, ref: JobRef, timeout: float
) -> JobOutcome | None:
    if not timeout > 0 or math.isnan(timeout):
        return await outcome(ctx, ref)
    with trio.move_on_after(timeout):
        await listener.ready()
        while True:
            # register under the key we expect (the common case: the handle
            # knows where its job lives); watch tells where it really is
            key = _expected_key(ctx, ref)
            event = listener.register(key)
            try:
                found, real_key = await _watch(ctx, ref, listener.channel)
                if found is None or found.state in FINISHED_STATES:
                    return found
                if real_key != key:
                    listener.unregister(key, event)
                    assert real_key is not None
                    key = real_key
                    # registered after the watch: read once more so a finish
                    # in between is seen
                    event = listener.register(key)
                    found, _ = await _watch(ctx, ref, listener.channel)
                    if found is None or found.state in FINISHED_STATES:
                        return found
                await event.wait()
            finally:
                listener.unregister(key, event)
    return await outcome(ctx, ref)
