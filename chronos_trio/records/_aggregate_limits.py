"""The limits of per-minute aggregates (``records._aggregates``): the
run-time histogram's buckets, how long a store keeps them, the longest
name. Apart from the records so that a worker checks its options and
counts its runs without defining them: they are built only when its
aggregator first writes (after its first jobs)."""

from __future__ import annotations

import math

from ._checks import is_number

#: Upper bounds (seconds) of the run-time histogram's buckets, 1-2-5 steps
#: from 1 ms to 500 s; a last bucket holds longer runs.
LATENCY_BOUNDS: tuple[float, ...] = tuple(
    m * 10.0**e for e in range(-3, 3) for m in (1.0, 2.0, 5.0)
)
#: Buckets in a histogram: one per bound, and one for longer runs.
BUCKETS = len(LATENCY_BOUNDS) + 1
#: The shortest and longest a store may be asked to keep aggregates (seconds).
MIN_KEEP = 60.0
MAX_KEEP = 31 * 86400.0
#: The longest queue or kind name an aggregate takes (longer is a ValueError).
MAX_NAME = 1000
#: Seconds in one aggregate's minute.
MINUTE = 60


def check_keep(keep: object) -> float:
    """``keep`` as a float if it is a number of seconds from :data:`MIN_KEEP`
    to :data:`MAX_KEEP`; ``ValueError`` otherwise."""
    if is_number(keep) and math.isfinite(keep) and MIN_KEEP <= keep <= MAX_KEEP:
        return float(keep)
    raise ValueError(f"a number of seconds from {MIN_KEEP:g} to {MAX_KEEP:g}, got {keep!r}")
