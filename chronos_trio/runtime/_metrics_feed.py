"""The event subscriber that feeds an ``App(metrics=...)`` object
(``runtime._metrics`` describes the seam) with :class:`JobMetric` records.
Apart from the seam so that a worker whose app has no metrics object never
loads them: the worker subscribes a :class:`MetricsFeed` only when there
is one."""

from __future__ import annotations

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._public import fixup_module_metadata
from . import _metrics
from ._events import (
    ActorRestarted,
    Event,
    JobAbortApplied,
    JobDead,
    JobRetried,
    JobsRecovered,
    JobSucceeded,
    LeaseLost,
    NotesWritten,
)
from ._job_metric import JobMetric
from ._metrics import Metrics

#: The events a metrics object is fed from.
METRIC_EVENTS: tuple[type, ...] = (
    JobSucceeded,
    JobRetried,
    JobDead,
    JobAbortApplied,
    LeaseLost,
    JobsRecovered,
    ActorRestarted,
    NotesWritten,
)


@attrs.frozen
class MetricsFeed:
    """The event subscriber that turns events into :class:`Metrics` calls."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    metrics: Metrics

    def __call__(self, event: Event) -> None:
        m = self.metrics
        if isinstance(event, JobSucceeded):
            self._finished(event, "succeeded")
        elif isinstance(event, JobRetried):
            self._finished(event, "retried")
        elif isinstance(event, JobDead):
            self._finished(event, "dead")
        elif isinstance(event, JobAbortApplied):
            self._finished(event, "aborted")
        elif isinstance(event, LeaseLost):
            m.lease_lost(event.job.queue, event.job.kind)
        elif isinstance(event, JobsRecovered):
            m.jobs_recovered(len(event.job_ids))
        elif isinstance(event, ActorRestarted):
            m.actor_restarted(event.actor)
        elif isinstance(event, NotesWritten):
            # optional (see MetricsBase): an older metrics object lacks it
            written = getattr(m, "notes_written", None)
            if written is not None:
                written(event.progress, event.lines, event.refused)

    def _finished(
        self, event: JobSucceeded | JobRetried | JobDead | JobAbortApplied, outcome: str
    ) -> None:
        job, started_at, leased_at = event.job, event.started_at, event.leased_at
        self.metrics.job_finished(
            JobMetric(
                job.queue,
                job.kind,
                outcome,
                job.attempts,
                event.duration,
                None if started_at is None else started_at - job.run_at,
                None if leased_at is None else leased_at - job.run_at,
            )
        )


# The seam's annotations name JobMetric (imported there for type checkers
# only): bound there once loaded, so ``typing.get_type_hints`` resolves them.
_metrics.JobMetric = JobMetric  # type: ignore[attr-defined]

# Public as ``chronos_trio.runtime.MetricsFeed``, loaded on first use (the
# package names it lazily): it reports that module however it was reached.
fixup_module_metadata("chronos_trio.runtime", {"MetricsFeed": MetricsFeed})
