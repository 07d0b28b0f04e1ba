"""The record of one run's outcome that a worker hands an
``App(metrics=...)`` object (``runtime._metrics`` describes the seam).
Loaded with the feed (``runtime._metrics_feed``): only for an app with a
metrics object."""

from __future__ import annotations

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._public import fixup_module_metadata


@attrs.frozen
class JobMetric:
    """One run's outcome, as the store recorded it.

    ``outcome``: ``succeeded``, ``retried`` (a retry or a deferral),
    ``dead`` (or discarded) or ``aborted``. ``attempt``: which attempt this
    was (1 for the first). Seconds, all of them: ``duration`` the handler
    ran (None: it did not run, e.g. recovery dead-lettered the job);
    ``lateness`` from the job's due time to its handler's start;
    ``pickup`` from its due time to its lease (the part of the lateness
    spent waiting in the store). The due time is on the store's clock and
    the start on the worker's: their skew is in both."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    kind: str
    outcome: str
    attempt: int
    duration: float | None
    lateness: float | None
    pickup: float | None


# Public as ``chronos_trio.JobMetric``, loaded on first use (the packages name
# it lazily): it reports that module however it was first reached.
fixup_module_metadata("chronos_trio", {"JobMetric": JobMetric})
