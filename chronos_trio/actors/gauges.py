"""gauges: feeds the metrics object the figures read on an interval rather
than per event: the store's round trips (every worker) and the jobs per
state of every queue (the elected leader only).

* **Round trips.** The store counts every batch in the runtime's
  :class:`~chronos_trio.runtime._metrics.RoundTripTally` (a dict increment
  on its hot path); every ``ROUND_TRIP_INTERVAL`` seconds this actor hands
  the counts to ``store_round_trips``, once per operation; the worker
  hands on the rest once every actor stopped, so a stop reports every
  batch. User code never
  runs on the store's path.
* **Queue depths**, a singleton duty like the janitor's: every worker runs
  this actor, but only the one holding the app's leadership reads the store
  (one ``stats`` call over every known queue per ``gauge_interval``), so N
  workers cost the store one scan per interval, not N, and a scrape of
  ``/metrics`` never reads Redis. A worker that stops leading reports one
  empty reading, so its metrics can withdraw the figures it no longer
  updates. A failed read is logged and retried next round.

A worker whose metrics object takes neither (or has none) reads nothing;
one on a store without admin (no ``stats``) reads no queue depths.
What the metrics object raises is logged and that reading dropped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import trio
from trio_util import periodic

from ..records._log import log_event
from ..runtime._metrics import ROUND_TRIP_INTERVAL, RoundTripTally
from ..runtime._state import Runtime, log
from ..store import Capability, QueueStats, StoreError, capabilities_of


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    metrics = rt.registry.metrics
    depths = getattr(metrics, "queue_depths", None)
    async with trio.open_nursery() as nursery:
        if depths is not None and Capability.ADMIN in capabilities_of(rt.store):
            nursery.start_soon(_read_depths, rt, depths)
        if rt.round_trips is not None:  # the worker made one: metrics takes them
            nursery.start_soon(_feed_round_trips, rt, rt.round_trips)
        task_status.started()
        await trio.sleep(math.inf)


async def _read_depths(rt: Runtime, report: Callable[[Sequence[QueueStats]], None]) -> None:
    reported = False
    async for _ in periodic(rt.config.gauge_interval):
        if rt.leadership.value is None:
            if reported:  # no longer the leader: an empty reading withdraws ours
                reported = False
                _report(report, ())
            await rt.leadership.wait_value(lambda lead: lead is not None)
        try:
            stats = await rt.store.stats(None)
        except StoreError as exc:
            log_event(
                log,
                logging.WARNING,
                "gauges: reading queue depths failed, will retry",
                error=str(exc),
            )
            continue
        reported = True
        _report(report, stats)


def _report(report: Callable[[Sequence[QueueStats]], None], stats: Sequence[QueueStats]) -> None:
    try:
        report(stats)
    except Exception:
        log.exception("metrics queue_depths raised; this reading is dropped")


async def _feed_round_trips(rt: Runtime, tally: RoundTripTally) -> None:
    while True:
        await trio.sleep(ROUND_TRIP_INTERVAL)
        tally.feed(rt.registry.metrics)
