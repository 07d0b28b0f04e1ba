"""The event seam: what the runtime reports after the store confirmed it, for
code that must never sit on the settle path (dead-letter hooks, metrics,
result waiters, workflow continuations that are not part of the settle).

Actors :meth:`~EventBus.publish` typed events without awaiting anything; the
supervised ``notifier`` actor delivers them to subscribers. Guarantees:

* **Publishing never blocks or fails.** Events wait in a bounded buffer
  (``capacity``); when subscribers fall so far behind that it is full, the
  newest event is dropped and counted (:attr:`EventBus.dropped`, in the
  worker's statistics as ``events_dropped``), with a warning. Memory never
  grows without bound and no settle ever waits for a subscriber.
* **At most once, in publish order.** Each subscriber sees each event at
  most once, started in the order events were published (several may run at
  once, see the notifier). An event is delivered only if the worker is still
  running when its turn comes: a shutdown gives pending events
  ``flush_timeout`` seconds, then drops what is left. Durable facts live in
  the store (a dead job stays in the dead set until trimmed or requeued);
  events are notifications of them.
* **Only what happened.** Outcome events are published after the store
  applied the outcome under the lease's fence; a refused (stale) outcome
  produces ``LeaseLost``, never a success.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._jobs import Job
from ..records._log import log_event

log = logging.getLogger("chronos_trio.events")


@attrs.frozen
class JobSucceeded:
    """A handler returned and the store recorded the success."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job
    #: Seconds the handler ran (Trio's clock).
    duration: float
    #: When its handler started (epoch seconds on the store's clock, from
    #: its lease's start; None: it did not run or nobody asked): metrics
    #: derive lateness from it.
    started_at: float | None = None
    #: When its lease was taken (epoch seconds on the store's clock, as the
    #: store reported it; None: not leased by this worker, e.g. recovered,
    #: expired or set aside): metrics derive pickup from it.
    leased_at: float | None = None


@attrs.frozen
class JobRetried:
    """A handler failed and the job waits ``delay`` seconds for its next attempt."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job
    duration: float
    error: str
    delay: float
    #: When its handler started (epoch seconds on the store's clock, from
    #: its lease's start; None: it did not run or nobody asked): metrics
    #: derive lateness from it.
    started_at: float | None = None
    #: When its lease was taken (epoch seconds on the store's clock, as the
    #: store reported it; None: not leased by this worker, e.g. recovered,
    #: expired or set aside): metrics derive pickup from it.
    leased_at: float | None = None


@attrs.frozen
class JobDead:
    """The job was dead-lettered: by its handler's outcome (``recovered``
    False), or by lease recovery after its attempts ran out (True). ``job``
    is the job as the store now holds it (state dead, ``last_error`` set)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job
    error: str
    recovered: bool = False
    #: Seconds its last handler ran (None: dead-lettered by recovery, or
    #: without running, e.g. an unknown kind).
    duration: float | None = None
    #: When its handler started (epoch seconds on the store's clock, from
    #: its lease's start; None: it did not run or nobody asked): metrics
    #: derive lateness from it.
    started_at: float | None = None
    #: When its lease was taken (epoch seconds on the store's clock, as the
    #: store reported it; None: not leased by this worker, e.g. recovered,
    #: expired or set aside): metrics derive pickup from it.
    leased_at: float | None = None


@attrs.frozen
class JobAbortApplied:
    """An abort asked for the job took effect: the store recorded it as
    aborted, by this worker's settle (its run called off, or never started;
    ``recovered`` False) or by lease recovery after its worker was lost
    (True). ``job`` is the job as it was leased (as recovery stored it, when
    recovered). Dead-letter hooks do not run for it."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job
    recovered: bool = False
    #: Seconds its handler ran before it was called off (None: it did not run,
    #: or recovery aborted it).
    duration: float | None = None
    #: When its handler started (epoch seconds on the store's clock, from
    #: its lease's start; None: it did not run or nobody asked): metrics
    #: derive lateness from it.
    started_at: float | None = None
    #: When its lease was taken (epoch seconds on the store's clock, as the
    #: store reported it; None: not leased by this worker, e.g. recovered,
    #: expired or set aside): metrics derive pickup from it.
    leased_at: float | None = None


@attrs.frozen
class JobReleased:
    """A leased job went back to ready without running to an outcome
    (shutdown, or a crashed executor); its attempt was given back."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job


@attrs.frozen
class LeaseLost:
    """This worker lost a job's lease (renewal or settle refused by the
    store's fence); its handler was cancelled, its outcome discarded."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job: Job


@attrs.frozen
class JobsRecovered:
    """Expired leases (of crashed or hung workers) were taken back to ready."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    job_ids: tuple[str, ...]


@attrs.frozen
class ActorRestarted:
    """An actor crashed and was restarted by the supervisor."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    actor: str
    error: str
    restarts: int


@attrs.frozen
class NotesWritten:
    """The noter wrote a batch of running jobs' notes: ``progress`` updates
    and log ``lines`` the store took, and writes it ``refused`` (their
    lease was lost). One per batch, published only when someone listens."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    progress: int
    lines: int
    refused: int


Event = (
    JobSucceeded
    | JobRetried
    | JobDead
    | JobAbortApplied
    | JobReleased
    | LeaseLost
    | JobsRecovered
    | ActorRestarted
    | NotesWritten
)
EVENT_TYPES: tuple[type, ...] = (
    JobSucceeded,
    JobRetried,
    JobDead,
    JobAbortApplied,
    JobReleased,
    LeaseLost,
    JobsRecovered,
    ActorRestarted,
    NotesWritten,
)

#: ``callback(event)``; may be sync or async. Runs in the notifier, never on
#: the settle path, under the notifier's per-call timeout.
Subscriber = Callable[[Event], Awaitable[object] | object]


@attrs.frozen
class Subscription:
    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    types: tuple[type, ...]
    callback: Subscriber
    name: str
    #: Called in the notifier's own loop, not in a task of its own (see
    #: :meth:`EventBus.subscribe`).
    inline: bool = False


class EventBus:
    """A bounded buffer of events between the actors and the notifier."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._pending: deque[Event] = deque()
        self._subscriptions: list[Subscription] = []
        self._by_type: dict[type, list[Subscription]] = {}
        self._wanted: frozenset[type] = frozenset()
        self._waiter: trio.Event | None = None
        self._drained: trio.Event | None = None
        #: An event taken by the notifier whose subscribers are not all started.
        self._taking = 0
        self._delivering = 0
        self.published = 0
        self.dropped = 0

    def subscribe(
        self,
        types: type | tuple[type, ...],
        callback: Subscriber,
        *,
        name: str = "",
        inline: bool = False,
    ) -> None:
        """Deliver events of ``types`` to ``callback`` from now on.

        ``inline``: ``callback`` is a quick plain function (a counter
        increment, like the metrics feed) called in the notifier's loop, in
        order, without a task, a timeout or a place of ``hook_concurrency``
        (a plain function cannot be cancelled by a timeout anyway): a task
        per event would cap delivery far below a busy worker's rate. What it
        raises is logged."""
        as_tuple = types if isinstance(types, tuple) else (types,)
        for t in as_tuple:
            if t not in EVENT_TYPES:
                raise TypeError(f"{t!r} is not an event type")
        label = name or getattr(callback, "__qualname__", repr(callback))
        self._subscriptions.append(Subscription(as_tuple, callback, label, inline))
        self._wanted = frozenset(t for s in self._subscriptions for t in s.types)
        self._by_type.clear()

    def wants(self, event_type: type) -> bool:
        """Whether anyone subscribed to ``event_type``: publishers check this
        first, so an event nobody wants costs nothing to build."""
        return event_type in self._wanted

    def publish(self, event: Event) -> None:
        """Queue ``event`` for its subscribers; never blocks (see the module
        docstring for what happens when the buffer is full)."""
        if type(event) not in self._wanted:
            return
        if len(self._pending) >= self.capacity:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log_event(
                    log,
                    logging.WARNING,
                    "event buffer full: subscribers are behind",
                    capacity=self.capacity,
                    dropped=self.dropped,
                )
            return
        self.published += 1
        self._pending.append(event)
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def subscribers_of(self, event: Event) -> list[Subscription]:
        # cached per event type: the notifier asks once per event
        t = type(event)
        got = self._by_type.get(t)
        if got is None:
            got = self._by_type[t] = [s for s in self._subscriptions if isinstance(event, s.types)]
        return got

    async def next(self) -> Event:
        """The oldest pending event, waiting for one if there is none (the
        notifier calls :meth:`event_done` once it started its deliveries)."""
        while not self._pending:
            if self._waiter is None:
                self._waiter = trio.Event()
            await self._waiter.wait()
        self._taking += 1
        return self._pending.popleft()

    def event_done(self) -> None:
        self._taking -= 1
        self._check_drained()

    def delivery_started(self) -> None:
        self._delivering += 1

    def delivery_done(self) -> None:
        self._delivering -= 1
        self._check_drained()

    @property
    def drained(self) -> bool:
        """No event pending, being taken or being delivered."""
        return not self._pending and not self._taking and not self._delivering

    async def wait_drained(self) -> None:
        """Until every published event has been delivered (or given up on)."""
        while not self.drained:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def _check_drained(self) -> None:
        if self._drained is not None and self.drained:
            self._drained.set()
            self._drained = None

    def discard_pending(self) -> int:
        """Drop every pending event (shutdown past its flush time); returns how many."""
        n = len(self._pending)
        self._pending.clear()
        self.dropped += n
        return n


async def deliver(subscription: Subscription, event: Event) -> None:
    """Call one subscriber; its errors are logged, never raised."""
    try:
        result = subscription.callback(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        _subscriber_failed(subscription, event)


def deliver_inline(subscription: Subscription, event: Event) -> None:
    """Call one plain (not async) subscriber at once; its errors are
    logged, never raised."""
    try:
        subscription.callback(event)
    except Exception:
        _subscriber_failed(subscription, event)


def _subscriber_failed(subscription: Subscription, event: Event) -> None:
    log_event(
        log,
        logging.ERROR,
        "event subscriber failed",
        subscriber=subscription.name,
        on=type(event).__name__,
        exc_info=True,
    )
