"""notifier: delivers the runtime's events to their subscribers (dead-letter
hooks today; metrics and result waiters hang here too), off the settle path.

Takes events from ``rt.events`` in publish order and runs each subscriber
call in its own task, at most ``hook_concurrency`` at once, each bounded by
``hook_timeout``: a hook that hangs costs one of those places for that long
and is then cancelled (logged); one that raises is logged. Neither ever
reaches the actors that settle jobs, and neither can kill this actor. When
every place is taken, events wait in the bus's bounded buffer (see
:mod:`chronos_trio.runtime._events` for what happens when that fills).

Inline subscribers (quick plain functions such as the metrics feed, see
``EventBus.subscribe``) are called right here, in order, with no task of
their own; the loop yields every ``INLINE_BATCH`` events so a flood of
them never starves the worker.
"""

from __future__ import annotations

import logging

import trio

from ..records._log import log_event
from ..runtime._events import Event, Subscription, deliver, deliver_inline
from ..runtime._state import Runtime

log = logging.getLogger("chronos_trio.events")

#: Events handled between two checkpoints when no subscriber call waits.
INLINE_BATCH = 128


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    bus = rt.events
    places = trio.Semaphore(cfg.hook_concurrency)
    task_status.started()
    handled = 0
    async with trio.open_nursery() as nursery:
        while True:
            event = await bus.next()
            handled += 1
            try:
                if handled % INLINE_BATCH == 0:
                    await trio.lowlevel.checkpoint()
                for subscription in bus.subscribers_of(event):
                    if subscription.inline:
                        deliver_inline(subscription, event)
                        continue
                    await places.acquire()
                    bus.delivery_started()
                    nursery.start_soon(_call, rt, subscription, event, places)
            finally:  # cancelled midway: the rest of this event is dropped
                bus.event_done()


async def _call(
    rt: Runtime, subscription: Subscription, event: Event, places: trio.Semaphore
) -> None:
    timeout = rt.config.hook_timeout
    try:
        with trio.move_on_after(timeout) as scope:
            await deliver(subscription, event)
        if scope.cancelled_caught:
            log_event(
                log,
                logging.ERROR,
                "event subscriber timed out",
                subscriber=subscription.name,
                on=type(event).__name__,
                timeout=timeout,
            )
    finally:
        places.release()
        rt.events.delivery_done()
