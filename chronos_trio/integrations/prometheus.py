"""Prometheus metrics for chronos_trio workers (the ``prometheus`` extra:
``prometheus-client``).

``App(metrics=PrometheusMetrics())`` records every figure of the metrics
seam (see :class:`~chronos_trio.Metrics`) in Prometheus metrics; serve them
with ``python -m chronos_trio worker APP --metrics-port P`` (which installs a
``PrometheusMetrics`` itself when the app has no metrics object) or with
:func:`serve_metrics` in your own program. The names, labels and buckets
are listed in ``docs/metrics.md`` and in :data:`METRIC_NAMES`.

Cost: a finished run is appended to a buffer (a deque append); the buffer
is applied to the metrics in batches: when it holds ``BATCH`` runs, when
it is older than ``MAX_AGE`` seconds at the next call (any call: an idle
worker still makes leadership round trips every ``leader_ttl / 2`` or
sooner), and before every scrape of :attr:`PrometheusMetrics.registry`
(a collector registered first). Each label combination is bound once and
cached. See ``benchmarks/metrics.py`` for what it costs per job.

Several processes (``--processes N``): prometheus-client's multiprocess
mode. The process manager makes a fresh directory, sets
``PROMETHEUS_MULTIPROC_DIR`` before the app (and so prometheus-client) is
imported, in itself and so in every child; each child writes its figures
to its own memory-mapped files there, and the manager serves one
``/metrics`` that sums them (:func:`multiprocess_registry`). A dead child's
files stay, so totals never go back when a child is restarted; the queue
depth gauges keep the most recent value written by any process (only the
leader writes them). The manager removes the directory when it exits.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..records._jobs import JobState
from ..runtime._job_metric import JobMetric
from ..runtime._metrics import MetricsBase
from ..store import QueueStats

#: Handler run time, seconds: from 5 ms to 5 min.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
#: Lateness and pickup, seconds: a healthy queue is in the first buckets
#: (ms), a backlog in the last ones (up to an hour).
DELAY_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip

#: Runs buffered before they are applied to the metrics at once.
BATCH = 256
#: Oldest a buffered run may be at the next call before the buffer is applied.
MAX_AGE = 0.5


class _Observed:
    """Observations of one histogram child gathered in a batch: one
    increment per bucket touched and one of the sum, instead of a locked
    increment of each per observation (prometheus-client's ``observe``).
    Uses the child's bucket values (``_upper_bounds``, ``_buckets``,
    ``_sum``, non-cumulative: its own ``observe`` increments one bucket);
    falls back to ``observe`` if they are not there."""

    __slots__ = ("child", "counts", "total", "values")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.counts: dict[int, int] = {}
        self.total = 0.0
        self.values: list[float] = []

    def add(self, amount: float) -> None:
        self.values.append(amount)

    def apply(self) -> None:
        child = self.child
        bounds = getattr(child, "_upper_bounds", None)
        buckets = getattr(child, "_buckets", None)
        total = getattr(child, "_sum", None)
        if bounds is None or buckets is None or total is None:
            for amount in self.values:
                child.observe(amount)
            return
        counts: dict[int, int] = {}
        for amount in self.values:
            i = bisect.bisect_left(bounds, amount)  # the first bound >= amount
            counts[i] = counts.get(i, 0) + 1
        for i, n in counts.items():
            buckets[i].inc(n)
        total.inc(sum(self.values))


class _Batch:
    """The buffered runs of one (queue, kind, outcome)."""

    __slots__ = ("count", "duration", "jobs", "lateness", "pickup")

    def __init__(self, bound: tuple[Any, Any, Any, Any]) -> None:
        self.jobs = bound[0]
        self.count = 0
        self.duration, self.lateness, self.pickup = (_Observed(b) for b in bound[1:])

    def add(self, metric: JobMetric) -> None:
        self.count += 1
        if metric.duration is not None:
            self.duration.add(metric.duration)
        if metric.lateness is not None:
            self.lateness.add(max(0.0, metric.lateness))
        if metric.pickup is not None:
            self.pickup.add(max(0.0, metric.pickup))

    def apply(self) -> None:
        self.jobs.inc(self.count)
        for observed in (self.duration, self.lateness, self.pickup):
            if observed.values:
                observed.apply()


class _FlushFirst(Collector):
    """Registered first in the registry: applies the buffered runs before
    the other collectors are read (a scrape sees every run finished so far)."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        self._metrics.flush()
        return ()


#: Every metric this module exports (as scraped: a counter ``x`` is
#: ``x_total``; a histogram ``h`` is ``h_bucket``, ``h_count``, ``h_sum``).
METRIC_NAMES: tuple[str, ...] = (
    "chronos_jobs_total",
    "chronos_job_duration_seconds",
    "chronos_job_lateness_seconds",
    "chronos_job_pickup_seconds",
    "chronos_leases_lost_total",
    "chronos_jobs_recovered_total",
    "chronos_actor_restarts_total",
    "chronos_store_round_trips_total",
    "chronos_store_errors_total",
    "chronos_process_restarts_total",
    "chronos_progress_updates_written_total",
    "chronos_job_log_lines_written_total",
    "chronos_notes_refused_total",
    "chronos_queue_jobs",
    "chronos_queue_jobs_read_timestamp_seconds",
)


class PrometheusMetrics(MetricsBase):
    """A :class:`~chronos_trio.Metrics` recording in Prometheus metrics.

    ``registry``: where the metrics are registered (default: a registry of
    their own, :attr:`registry`; pass ``prometheus_client.REGISTRY`` to
    serve them with the rest of your program's). ``namespace``: the name
    prefix (``chronos``). Registering twice in one registry raises
    ``ValueError`` (prometheus-client's duplicate check).
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "chronos",
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        delay_buckets: Sequence[float] = DELAY_BUCKETS,
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        reg, ns = self.registry, namespace
        # appended to by the worker's thread, emptied by it or by a scrape's:
        # deque.append and popleft are atomic
        self._pending: deque[JobMetric] = deque()
        self._flushed_at = time.monotonic()
        self._flush_lock = threading.Lock()
        reg.register(_FlushFirst(self))
        self.jobs = Counter(
            "jobs", "Runs finished, by outcome (succeeded, retried, dead, aborted).",
            ("queue", "kind", "outcome"), namespace=ns, registry=reg,
        )  # fmt: skip
        self.duration = Histogram(
            "job_duration_seconds", "Handler run time.",
            ("queue", "kind"), namespace=ns, registry=reg, buckets=duration_buckets,
        )  # fmt: skip
        self.lateness = Histogram(
            "job_lateness_seconds", "From a job's due time to its handler's start.",
            ("queue", "kind"), namespace=ns, registry=reg, buckets=delay_buckets,
        )  # fmt: skip
        self.pickup = Histogram(
            "job_pickup_seconds", "From a job's due time to its lease (waiting in the store).",
            ("queue", "kind"), namespace=ns, registry=reg, buckets=delay_buckets,
        )  # fmt: skip
        self.leases_lost = Counter(
            "leases_lost", "Leases lost while their handler ran (it was cancelled).",
            ("queue", "kind"), namespace=ns, registry=reg,
        )  # fmt: skip
        self.recovered = Counter(
            "jobs_recovered", "Expired leases taken back by a recoverer.",
            namespace=ns, registry=reg,
        )  # fmt: skip
        self.actor_restarts = Counter(
            "actor_restarts", "Actors restarted by a worker's supervisor.",
            ("actor",), namespace=ns, registry=reg,
        )  # fmt: skip
        self.round_trips = Counter(
            "store_round_trips", "Batches sent to the store, by their first operation.",
            ("operation",), namespace=ns, registry=reg,
        )  # fmt: skip
        self.store_errors = Counter(
            "store_errors", "Batches that failed (StoreError), by their first operation.",
            ("operation",), namespace=ns, registry=reg,
        )  # fmt: skip
        self.process_restarts = Counter(
            "process_restarts", "Worker processes restarted by the process manager.",
            namespace=ns, registry=reg,
        )  # fmt: skip
        self.process_recycles = Counter(
            "process_recycles",
            "Worker processes that recycled themselves (max jobs or memory per child) "
            "and were replaced by the process manager.",
            namespace=ns, registry=reg,
        )  # fmt: skip
        # Notes (issue 28), counted per batch. No job label: a series per
        # job would grow without bound.
        self.progress_written, self.log_lines_written, self.notes_refused = (
            Counter(name, text, namespace=ns, registry=reg)
            for name, text in (
                ("progress_updates_written", "Progress updates (job.progress) written."),
                ("job_log_lines_written", "Job log lines (job.log) written to the store."),
                ("notes_refused", "Notes writes refused by the store (the lease was lost)."),
            )
        )
        # Written by the elected leader only: the most recent value wins
        # across processes (multiprocess mode), a follower writes nothing.
        self.queue_jobs = Gauge(
            "queue_jobs", "Jobs per state per queue, read by the elected leader.",
            ("queue", "state"), namespace=ns, registry=reg, multiprocess_mode="mostrecent",
        )  # fmt: skip
        self.queue_read_at = Gauge(
            "queue_jobs_read_timestamp_seconds", "When chronos_queue_jobs was last read.",
            namespace=ns, registry=reg, multiprocess_mode="mostrecent",
        )  # fmt: skip
        # Bound label children, made once per combination: labels() costs
        # a lock and a dict of its own on every call.
        self._by_outcome: dict[tuple[str, str, str], tuple[Any, Any, Any, Any]] = {}
        self._by_operation: dict[tuple[bool, str], Any] = {}

    def job_finished(self, metric: JobMetric) -> None:
        pending = self._pending
        pending.append(metric)
        if len(pending) >= BATCH or time.monotonic() - self._flushed_at > MAX_AGE:
            self.flush()

    def flush(self) -> None:
        """Apply every buffered run to the metrics now (done by itself; see
        the module docstring). Safe from any thread."""
        with self._flush_lock:
            self._flushed_at = time.monotonic()
            pending = self._pending
            if not pending:
                return
            batches: dict[tuple[str, str, str], _Batch] = {}
            while pending:
                metric = pending.popleft()
                key = (metric.queue, metric.kind, metric.outcome)
                batch = batches.get(key)
                if batch is None:
                    batch = batches[key] = _Batch(self._bound(key))
                batch.add(metric)
            for batch in batches.values():
                batch.apply()

    def _bound(self, key: tuple[str, str, str]) -> tuple[Any, Any, Any, Any]:
        bound = self._by_outcome.get(key)
        if bound is None:
            labels = key[:2]
            bound = self._by_outcome[key] = (
                self.jobs.labels(*key),
                self.duration.labels(*labels),
                self.lateness.labels(*labels),
                self.pickup.labels(*labels),
            )
        return bound

    def lease_lost(self, queue: str, kind: str) -> None:
        self.leases_lost.labels(queue, kind).inc()

    def jobs_recovered(self, count: int) -> None:
        self.recovered.inc(count)

    def actor_restarted(self, actor: str) -> None:
        self.actor_restarts.labels(actor).inc()

    def store_round_trips(self, operation: str, sent: int, failed: int) -> None:
        if self._pending and time.monotonic() - self._flushed_at > MAX_AGE:
            self.flush()
        self._operation_counter(False, operation).inc(sent)
        if failed:
            self._operation_counter(True, operation).inc(failed)

    def _operation_counter(self, errors: bool, operation: str) -> Any:
        """The round-trip (or error) counter's child for ``operation``, cached."""
        key = (errors, operation)
        bound = self._by_operation.get(key)
        if bound is None:
            counter = self.store_errors if errors else self.round_trips
            bound = self._by_operation[key] = counter.labels(operation)
        return bound

    def queue_depths(self, stats: Sequence[QueueStats]) -> None:
        if not stats:  # this worker stopped leading: withdraw its series
            self.queue_jobs.clear()
            return
        for s in stats:
            for state in JobState:
                self.queue_jobs.labels(s.queue, state.value).set(s.counts.get(state, 0))
        self.queue_read_at.set(time.time())

    def process_restarted(self, index: int) -> None:
        self.process_restarts.inc()

    def process_recycled(self, index: int) -> None:
        self.process_recycles.inc()

    def notes_written(self, progress: int, lines: int, refused: int) -> None:
        self.progress_written.inc(progress)
        self.log_lines_written.inc(lines)
        if refused:
            self.notes_refused.inc(refused)


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A registry summing what every process wrote to ``path`` (default
    ``$PROMETHEUS_MULTIPROC_DIR``), for the one endpoint of a host that
    runs several worker processes. Raises ``ValueError`` when neither is set."""
    registry = CollectorRegistry()
    _multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def multiprocess_mode() -> bool:
    """Whether prometheus-client writes to ``PROMETHEUS_MULTIPROC_DIR``
    (decided when it was first imported)."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue


class MetricsServer:
    """A running ``/metrics`` endpoint (see :func:`serve_metrics`)."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen by the OS for port 0)."""
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and wait for the thread (a scrape in progress ends first)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """Serve ``registry`` on ``http://host:port/metrics`` from
    prometheus-client's own HTTP server thread (a scrape renders the text
    there, not on the Trio loop, and needs nothing from it). Raises
    ``OSError`` when the port cannot be bound."""
    server, thread = start_http_server(port, host, registry=registry)
    return MetricsServer(server, thread)


__all__ = [
    "BATCH",
    "DELAY_BUCKETS",
    "DURATION_BUCKETS",
    "MAX_AGE",
    "METRIC_NAMES",
    "MetricsServer",
    "PrometheusMetrics",
    "multiprocess_mode",
    "multiprocess_registry",
    "serve_metrics",
]
