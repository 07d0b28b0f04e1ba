"""aggregator: adds what this worker ran to the store's per-minute
aggregates (``records._aggregates``), off the settle path.

The completer and recovery count each confirmed outcome in the runtime's
:class:`~chronos_trio.runtime._aggregates.AggregateTally` (in memory). This
actor wakes every ``aggregate_interval`` seconds and, when anything was
counted, adds it all in one ``add_aggregates`` call (one round trip): at
most one write per interval, none while the worker is idle. A failed write
puts its counts back (they go with the next one) and is retried after a
backoff, so counts are never lost to a store outage; a write whose reply
was lost may count them twice. What is counted after this actor stops (the
shutdown's last settles) is written once by the worker, after the
settlement group stopped. It runs only on a store with aggregates
(``AggregatesRole``).
"""

from __future__ import annotations

import logging

import trio

from ..records._log import log_event
from ..runtime._aggregates import AggregateTally
from ..runtime._backoff import Backoff
from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "aggregator")
    tally = rt.aggregates
    task_status.started()
    if tally is None:  # the worker starts this actor only when the store has them
        await trio.sleep_forever()
    interval = rt.config.aggregate_interval
    while True:
        await trio.sleep(interval)
        try:
            await write(rt, tally)
        except StoreError as exc:
            await backoff.failed(exc)
            continue
        backoff.reset()


async def write(rt: Runtime, tally: AggregateTally) -> None:
    """Add what ``tally`` counted to the store (nothing when it counted
    nothing); on any failure (cancellation too) the counts go back to the
    tally and the exception propagates."""
    if not tally.pending:
        return
    counts = tally.take()
    try:
        await rt.store.add_aggregates(counts, keep=rt.config.aggregate_keep)
    except (ValueError, TypeError) as exc:
        # counts the store refuses would be refused at every retry (and would
        # hold up the shutdown's last write): dropped, and said
        tally.failed += 1
        log_event(log, logging.ERROR, "aggregates refused and dropped", error=str(exc))
        return
    except BaseException:
        tally.put_back(counts)
        tally.failed += 1
        raise
    tally.writes += 1
