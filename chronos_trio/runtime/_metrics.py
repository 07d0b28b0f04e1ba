"""The metrics seam: what a worker reports to an ``App(metrics=...)``
object, with no dependency (a Prometheus or OpenTelemetry adapter implements
:class:`Metrics`).

Metrics are fed from the event seam (``runtime._events``) by the
supervised notifier, never on the settle path: a failing metrics object
loses only its own calls (what it raises is logged), never a job. Its
methods are called inline in the notifier's loop (a task per event would
cap delivery far below a busy worker's rate), so they must be quick: a slow
one delays the other event subscribers, and once the bus's bounded buffer
fills, events are dropped and counted, but no settle ever waits for it.
With no metrics object nothing subscribes, and the completer does not even
build the events (zero cost).

Two more feeds do not go through the event seam, because they are not
events of a job: store round trips and queue depths. Neither calls the
metrics object from the store's hot path: the store tells a
:class:`RoundTripTally` of every batch (a dict increment, our code), and the
``gauges`` actor hands the counts to ``store_round_trips`` every
``ROUND_TRIP_INTERVAL`` seconds (the worker the rest as it stops); queue
depths are read by the elected leader only, on an interval (see
``actors.gauges``). Process restarts are reported by the process manager,
in its own process.

Which methods are required: the four of the first version
(``job_finished``, ``lease_lost``, ``jobs_recovered``, ``actor_restarted``).
The later ones (``store_round_trips``, ``queue_depths``,
``process_restarted``, ``process_recycled``, ``notes_written``) are looked
up once, when a worker starts: an object without them is simply not fed
those figures, so a metrics object written for the first version keeps
working. Subclass :class:`MetricsBase` to get
no-op methods for everything you do not implement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..records._log import log_event
from ..store import QueueStats

if TYPE_CHECKING:
    # The record (with the feed, ``runtime._metrics_feed``) loads only for
    # an app with a metrics object.
    from ._job_metric import JobMetric

log = logging.getLogger("chronos_trio.metrics")


class Metrics(Protocol):
    """What a worker calls (from its notifier, one call at a time per
    event, in the order things happened). Every method must be quick and
    must not raise; what one raises is logged and the event dropped."""

    def job_finished(self, metric: JobMetric) -> None: ...

    def lease_lost(self, queue: str, kind: str) -> None: ...

    def jobs_recovered(self, count: int) -> None: ...

    def actor_restarted(self, actor: str) -> None: ...


class MetricsBase:
    """A :class:`Metrics` whose every method does nothing: subclass it and
    override what you record. It also has the optional methods, each
    documented here."""

    def job_finished(self, metric: JobMetric) -> None:
        """One run's outcome (from the notifier)."""

    def lease_lost(self, queue: str, kind: str) -> None:
        """A lease this worker held was lost (its handler was cancelled)."""

    def jobs_recovered(self, count: int) -> None:
        """``count`` expired leases were taken back by this worker's recoverer."""

    def actor_restarted(self, actor: str) -> None:
        """The supervisor restarted ``actor`` after it failed."""

    def store_round_trips(self, operation: str, sent: int, failed: int) -> None:
        """Optional. Since the last call the store sent ``sent`` batches
        named ``operation`` (see ``store._observer``), ``failed`` of them
        raised StoreError (counted in ``sent`` too). Called from the
        ``gauges`` actor every ``ROUND_TRIP_INTERVAL`` seconds, once per
        operation with batches, never from the store's hot path."""

    def queue_depths(self, stats: Sequence[QueueStats]) -> None:
        """Optional. Jobs per state of every queue the store knows, read by
        the elected leader only, every ``WorkerConfig.gauge_interval``
        seconds (a follower never calls it). An empty ``stats``: this
        worker stopped leading (withdraw what it reported)."""

    def notes_written(self, progress: int, lines: int, refused: int) -> None:
        """Optional. The worker wrote a batch of running jobs' notes:
        ``progress`` updates (``job.progress``) and log ``lines``
        (``job.log``) the store took, and ``refused`` writes of lost leases
        (dropped). From the notifier, once per batch (at most every
        ``notes_interval``, plus jobs' final flushes)."""

    def process_restarted(self, index: int) -> None:
        """Optional. The process manager restarted child ``index`` (called in
        the manager's process)."""

    def process_recycled(self, index: int) -> None:
        """Optional. Child ``index`` recycled itself (``--max-jobs-per-child``,
        ``--max-memory-per-child``) and the process manager replaced it
        (called in the manager's process; not a restart)."""


#: Seconds between two ``store_round_trips`` feeds.
ROUND_TRIP_INTERVAL = 1.0


class RoundTripTally:
    """The store's round trips, counted for the metrics object by operation
    until the ``gauges`` actor takes them. The store's observer (called
    once per batch, in the Trio thread, on the hot path): only a dict
    increment here, never user code."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, bool], int] = {}

    def __call__(self, operation: str, failed: bool) -> None:
        key = (operation, failed)
        self._counts[key] = self._counts.get(key, 0) + 1

    def feed(self, metrics: object) -> None:
        """Hand what was counted since the last feed to ``metrics``'s
        ``store_round_trips``, once per operation (nothing when it has none).
        What it raises is logged and the rest of these counts dropped."""
        record = getattr(metrics, "store_round_trips", None)
        if record is None:
            return
        for operation, (sent, failed) in self.take().items():
            try:
                record(operation, sent, failed)
            except Exception:
                log_event(
                    log,
                    logging.ERROR,
                    "metrics store_round_trips raised; these counts are dropped",
                    exc_info=True,
                )
                return

    def take(self) -> dict[str, tuple[int, int]]:
        """``{operation: (sent, failed)}`` since the last take (and forget them)."""
        counts, self._counts = self._counts, {}
        taken: dict[str, tuple[int, int]] = {}
        for (operation, failed), n in counts.items():
            sent, bad = taken.get(operation, (0, 0))
            taken[operation] = (sent + n, bad + (n if failed else 0))
        return taken
