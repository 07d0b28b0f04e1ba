"""gauges: reads the jobs per state of every queue for the metrics object's
``queue_depths``, on the elected leader only.

A singleton duty like the janitor's: every worker runs this actor, but only
the one holding the app's leadership reads the store (one ``stats`` call over
every known queue per ``gauge_interval``), so N workers cost the store one
scan per interval, not N, and a scrape of ``/metrics`` never reads Redis.
A worker whose metrics object has no ``queue_depths`` (or none at all)
never reads anything. A worker that stops leading reports one empty
reading, so its metrics can withdraw the figures it no longer updates.
A failed read is logged and retried next round; what
the metrics object raises is logged and the round skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import trio
from trio_util import periodic

from ..runtime._state import Runtime, log
from ..store import QueueStats, StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    report = getattr(rt.registry.metrics, "queue_depths", None)
    task_status.started()
    if report is None:
        await trio.sleep(math.inf)
        return
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
            log.warning("gauges: reading queue depths failed (%s); will retry", exc)
            continue
        reported = True
        _report(report, stats)


def _report(report: Callable[[Sequence[QueueStats]], None], stats: Sequence[QueueStats]) -> None:
    try:
        report(stats)
    except Exception:
        log.exception("metrics queue_depths raised; this reading is dropped")
