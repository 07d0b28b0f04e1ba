"""Reading a job's outcome and waiting for it, sans IO (see ``_core``):
shared by the Trio store (``_results``) and the producers outside Trio.

The waiting protocol (:func:`wait_plan`), whoever drives it:

1. the driver makes sure its one subscription to the namespace's done
   channel is confirmed by Redis;
2. the plan registers the waiter for the job's key (a :class:`WaiterTable`
   entry);
3. it reads the job with ``watch.lua`` (a :class:`Watch` step), which, while
   the job is not finished, names the channel in the record (field ``w``)
   in the same atomic step;
4. when the job was not finished, it blocks (a :class:`Block` step) until
   the listener sees the job's key published, then reads again from step 2.

Every script that finishes a job publishes its key on the channel its
record names, so a finish after step 3 is published after the subscription
(step 1) and the registration (step 2): no wake-up is lost between the check
and the block. When the subscription drops, the listener subscribes again
and wakes every waiter once that is confirmed (:meth:`WaiterTable.dispatch`),
and each reads its job again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from ...records._jobs import FINISHED_STATES, JobOutcome, JobRef, JobState
from ...records._log import log_event
from .._topology_placement import locate
from ._codec import parse_count, parse_number
from ._core import Call, Plan, RedisCore, cached_locations_plan, ref_locations_plan
from ._scripts import WATCH, Op
from .keys import KeySpace, PartitionKeys

#: How long one poll of a subscription blocks (a listener notices a stop within this).
POLL_BLOCK = 1.0
#: Messages read per poll at most (one thread hop carries a burst).
POLL_BATCH = 1000
#: Pause before subscribing again after the connection failed.
RESUBSCRIBE_DELAY = 0.5

log = logging.getLogger("chronos_trio.store.redis")


def subscription_failed(exc: BaseException) -> None:
    """Log that a listener's subscription failed (it subscribes again after
    :data:`RESUBSCRIBE_DELAY`, and wakes every waiter to read again)."""
    log_event(
        log,
        logging.WARNING,
        "result waiters' subscription failed; subscribing again",
        error=f"{type(exc).__name__}: {exc}",
    )


class _Settable(Protocol):
    def set(self) -> None: ...


E = TypeVar("E", bound=_Settable)


class WaiterTable(Generic[E]):
    """The waiters of one listener, by job key; each is an event (a
    ``trio.Event``, ``threading.Event`` or ``asyncio.Event``, made by
    ``new_event``) that is set when the key is published. Every change holds
    a lock, so threads may share one table."""

    def __init__(self, new_event: Callable[[], E]) -> None:
        self._new_event = new_event
        self._waiters: dict[bytes, list[E]] = {}
        self._lock = threading.Lock()

    def register(self, job_key: bytes) -> E:
        event = self._new_event()
        with self._lock:
            self._waiters.setdefault(job_key, []).append(event)
        return event

    def unregister(self, job_key: bytes, event: E) -> None:
        with self._lock:
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
        with self._lock:
            return sum(len(e) for e in self._waiters.values())

    def wake(self, job_key: bytes) -> None:
        with self._lock:
            events = self._waiters.pop(job_key, ())
        for event in events:
            event.set()

    def wake_all(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, {}
        for events in waiters.values():
            for event in events:
                event.set()

    def dispatch(self, messages: Iterable[dict[str, Any]]) -> int:
        """Wake the waiters of each published key in ``messages`` (redis-py
        pub/sub messages); returns how many subscriptions they confirm. A
        confirmation (again, after a reconnect: what was published meanwhile
        is lost) wakes every waiter, so each reads its job again."""
        confirmed = 0
        for message in messages:
            kind = message.get("type")
            if kind == "message":
                data = message.get("data")
                if isinstance(data, bytes):
                    self.wake(data)
            elif kind == "subscribe":
                confirmed += 1
                self.wake_all()
        return confirmed


def poll(pubsub: Any, stop: threading.Event, block: float = POLL_BLOCK) -> list[dict[str, Any]]:
    """Blocking: the next messages of a redis-py ``PubSub`` (waiting up to
    ``block`` seconds for the first). Closes it when asked to stop."""
    messages: list[dict[str, Any]] = []
    try:
        message = pubsub.get_message(timeout=block)
        while message is not None:
            messages.append(message)
            if len(messages) >= POLL_BATCH:
                break
            message = pubsub.get_message(timeout=0.0)
    finally:
        if stop.is_set():
            pubsub.close()
    return messages


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def outcome_from(job_id: str, queue: str, reply: Sequence[Any]) -> JobOutcome | None:
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


def watch_plan(
    core: RedisCore, ref: JobRef, channel: str
) -> Plan[tuple[JobOutcome | None, bytes | None]]:
    """Run watch.lua where ``ref``'s job lives (naming ``channel`` in its
    record while it is unfinished; "" only reads): its outcome and its key
    (None, None: no such job)."""
    tried: list[PartitionKeys] = []
    if ref.queue is not None and locate(ref.placement) is None:
        # A job is looked for where the cached topology puts it first: found
        # there (the usual case: a workflow's steps, a handle made from an
        # ID), it costs one round trip, not a fresh topology read before it.
        # Only a job not found there needs the fresh read (a version added
        # since the cache was filled), and then only the places not yet seen.
        tried = yield from cached_locations_plan(core, ref.job_id, ref.queue)
        found = yield from _watch_at(tried, ref, channel)
        if found[0] is not None:
            return found
    places = yield from ref_locations_plan(core, ref)
    seen = {pk.tag for pk in tried}
    return (yield from _watch_at([pk for pk in places if pk.tag not in seen], ref, channel))


def _watch_at(
    places: Sequence[PartitionKeys], ref: JobRef, channel: str
) -> Plan[tuple[JobOutcome | None, bytes | None]]:
    """watch.lua at each of ``places`` (one round trip): the first found."""
    if not places:
        return None, None
    replies = yield Call(
        [Op.script_call(WATCH, [pk.job(ref.job_id)], [channel], soft=True) for pk in places]
    )
    for pk, reply in zip(places, replies, strict=True):
        if isinstance(reply, Exception):
            continue
        outcome = outcome_from(ref.job_id, pk.queue, reply)
        if outcome is not None:
            return outcome, pk.job(ref.job_id).encode()
    return None, None


def expected_key(keys: KeySpace, ref: JobRef) -> bytes:
    """The job key ``ref``'s job most likely has (b"" when its queue is unknown)."""
    if ref.queue is None:
        return b""  # unknown: the first watch tells
    where = locate(ref.placement) or (1, 0)  # unknown: the first partition's (a guess)
    pk = keys.partition(ref.queue, *where)
    return pk.job(ref.job_id).encode()


@attrs.frozen
class Watch:
    """A wait plan's request: :func:`watch_plan` for ``ref`` naming ``channel``;
    the plan is sent its (outcome, key)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    ref: JobRef
    channel: str


@attrs.frozen
class Block:
    """A wait plan's request: return once ``event`` is set (the driver's
    deadline may end the plan instead); the plan is sent None."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    event: Any


def wait_plan(
    table: WaiterTable[Any], keys: KeySpace, ref: JobRef, channel: str
) -> Plan[JobOutcome | None]:
    """Steps 2-4 of the module doc, until the job is finished (its outcome)
    or not found (None). The driver confirmed the subscription to
    ``channel`` first, and enforces the deadline (it closes the plan, which
    unregisters the waiter)."""
    while True:
        # register under the key we expect (the common case: the handle
        # knows where its job lives); watch tells where it really is
        key = expected_key(keys, ref)
        event = table.register(key)
        try:
            found, real_key = yield Watch(ref, channel)
            if found is None or found.state in FINISHED_STATES:
                return found  # type: ignore[no-any-return]
            if real_key != key:
                table.unregister(key, event)
                assert real_key is not None
                key = real_key
                # registered after the watch: read once more so a finish
                # in between is seen
                event = table.register(key)
                found, _ = yield Watch(ref, channel)
                if found is None or found.state in FINISHED_STATES:
                    return found  # type: ignore[no-any-return]
            yield Block(event)
        finally:
            table.unregister(key, event)
