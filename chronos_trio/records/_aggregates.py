"""Per-minute aggregates: what the workers ran, per (queue, kind, minute)
(issue 30, "history at a glance").

Every worker counts each outcome the store confirmed (succeeded, failed =
dead-lettered, retried) and the run time of each run in a fixed,
log-spaced histogram (:data:`LATENCY_BOUNDS`), in memory; the
``aggregator`` actor adds what it counted to the store every few seconds
in one call (:meth:`~chronos_trio.store.AggregatesRole.add_aggregates`),
and the store sums it into the minute of its own clock. The dashboard
reads the last hours back (:meth:`~chronos_trio.store.AggregatesRole.
aggregates`) and draws throughput, failures, retries and p50/p99 run time.

The aggregates count every settle, whatever the jobs' retention: a job
dropped at its success still counts as succeeded. They are kept for
``keep`` seconds (the worker's ``aggregate_keep``, 24 h by default), then
expire: a store holds at most ``keep / 60`` minutes per (queue, kind).

Percentiles read from the histogram are estimates: the bucket holding the
rank, interpolated on a log scale inside it (the bounds are 1-2-5 steps, so
an estimate is within a factor of 2.5 of the truth, usually far closer).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import attrs

from ._aggregate_limits import BUCKETS as BUCKETS
from ._aggregate_limits import LATENCY_BOUNDS as LATENCY_BOUNDS
from ._aggregate_limits import MAX_KEEP as MAX_KEEP
from ._aggregate_limits import MAX_NAME as MAX_NAME
from ._aggregate_limits import MIN_KEEP as MIN_KEEP
from ._aggregate_limits import MINUTE as MINUTE
from ._aggregate_limits import check_keep as check_keep
from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._public import fixup_module_metadata


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a run of ``seconds`` (negative counts as 0)."""
    return bisect.bisect_left(LATENCY_BOUNDS, seconds)


def minute_of(ts: float) -> int:
    """The start (epoch seconds) of the minute holding ``ts``."""
    return int(ts // MINUTE) * MINUTE


@attrs.frozen
class KindCounts:
    """What a worker adds for one (queue, kind): outcomes and run times
    since its last write. ``latency``: runs per bucket of
    :data:`LATENCY_BOUNDS` (:data:`BUCKETS` counts; empty: none)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    kind: str
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    latency: tuple[int, ...] = ()


@attrs.frozen
class MinuteCounts:
    """What a store holds for one (queue, kind, minute): ``minute`` is the
    minute's start (epoch seconds, store clock), ``latency`` the runs per
    bucket (:data:`BUCKETS` counts)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    queue: str
    kind: str
    minute: int
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    latency: tuple[int, ...] = (0,) * BUCKETS

    @property
    def runs(self) -> int:
        """Runs whose time is in the histogram."""
        return sum(self.latency)


def check_counts(counts: KindCounts) -> KindCounts:
    """``counts`` if a store can add it: non-empty names of at most
    :data:`MAX_NAME` characters, non-negative int counts, ``latency`` empty
    or :data:`BUCKETS` long. ``TypeError`` or ``ValueError`` naming what is
    wrong otherwise."""
    if not isinstance(counts, KindCounts):
        raise TypeError(f"aggregates take KindCounts, got {type(counts).__name__}")
    for name in ("queue", "kind"):
        value = getattr(counts, name)
        if not isinstance(value, str) or not value or len(value) > MAX_NAME:
            raise ValueError(
                f"an aggregate's {name} must be a non-empty str of at most {MAX_NAME} "
                f"characters, got {value!r:.60}"
            )
    numbers = (counts.succeeded, counts.failed, counts.retried, *counts.latency)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        raise ValueError(f"an aggregate's counts must be ints >= 0, got {counts!r:.200}")
    if counts.latency and len(counts.latency) != BUCKETS:
        raise ValueError(
            f"an aggregate's latency must have {BUCKETS} buckets (LATENCY_BOUNDS), "
            f"got {len(counts.latency)}"
        )
    return counts


def check_add(counts: Sequence[KindCounts], keep: object) -> float:
    """What every store checks before ``add_aggregates``: each of ``counts``
    (:func:`check_counts`) and ``keep`` (:func:`check_keep`, returned as a
    float). ``TypeError`` or ``ValueError`` naming what is wrong."""
    for c in counts:
        check_counts(c)
    return check_keep(keep)


def quantile(latency: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q < 1) of a histogram, in seconds: None when
    it holds no run. Interpolated on a log scale inside the bucket holding
    the rank (linearly from 0 in the first); the open last bucket reads as
    its lower bound."""
    total = sum(latency)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(latency):
        if n and seen + n >= rank:
            if i >= len(LATENCY_BOUNDS):
                return LATENCY_BOUNDS[-1]
            upper = LATENCY_BOUNDS[i]
            frac = (rank - seen) / n
            if i == 0:
                return upper * frac
            lower = LATENCY_BOUNDS[i - 1]
            return float(lower * (upper / lower) ** frac)
        seen += n
    return LATENCY_BOUNDS[-1]


def merge(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Two histograms added bucket by bucket (an empty one counts as zeros)."""
    if not a:
        return tuple(b) if b else (0,) * BUCKETS
    if not b:
        return tuple(a)
    return tuple(x + y for x, y in zip(a, b, strict=True))


__all__ = [
    "BUCKETS",
    "LATENCY_BOUNDS",
    "MAX_KEEP",
    "MINUTE",
    "MIN_KEEP",
    "KindCounts",
    "MinuteCounts",
    "bucket_of",
    "check_counts",
    "check_keep",
    "merge",
    "minute_of",
    "quantile",
]


# Public as ``chronos_trio.records.<name>``, loaded on first use (the package
# names them lazily): they report that module however they were first reached.
fixup_module_metadata(
    "chronos_trio.records", {"KindCounts": KindCounts, "MinuteCounts": MinuteCounts}
)
