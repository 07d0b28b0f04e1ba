"""The aggregates tally: what this worker ran since its last write of the
per-minute aggregates (``records._aggregates``), kept until the
``aggregator`` actor adds it to the store (``actors.aggregator``).

Counting costs the settle path one dict lookup, three list increments at
most and a ``bisect`` over 18 bounds per confirmed outcome (the completer
counts successes and retries, ``Runtime.report_dead`` every dead-letter,
whoever made it); no store call, no await, no allocation but the first
outcome of a (queue, kind) since the last write. Nothing is counted on a
store without aggregates (the tally is then None).

Bounds: one list of ``3 + BUCKETS`` ints per (queue, kind) counted since
the last write; the aggregator empties it every ``aggregate_interval``.
"""

from __future__ import annotations

from bisect import bisect_left as _bisect
from typing import TYPE_CHECKING

import attrs

from ..records._aggregate_limits import BUCKETS, LATENCY_BOUNDS, MAX_NAME
from ..records._attrs_methods import fields_eq, fields_hash, fields_repr

if TYPE_CHECKING:
    # defined at the first take (the aggregator's first write), not at start-up
    from ..records._aggregates import KindCounts

_WIDTH = 3 + BUCKETS


@attrs.frozen
class AggregatesStatistics:
    """What a worker's aggregates did: ``writes`` (store calls that added
    counts), ``failed`` (writes that failed: their counts went back),
    ``pending`` ((queue, kind) pairs counted since the last write)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    writes: int = 0
    failed: int = 0
    pending: int = 0


def shown_name(name: str) -> str:
    """``name`` as the aggregates take it: as it is, cut to :data:`MAX_NAME`
    characters, or ``"?"`` when empty (a damaged record's kind)."""
    if not name:
        return "?"
    return name if len(name) <= MAX_NAME else name[:MAX_NAME]


class AggregateTally:
    """Outcomes and run times per (queue, kind) not yet written (see the
    module docstring). One owner: the completer and recovery count, the
    aggregator takes (all on the worker's Trio thread)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], list[int]] = {}
        self.writes = 0
        self.failed = 0

    def _row(self, queue: str, kind: str) -> list[int]:
        key = (queue, kind)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0] * _WIDTH
        return row

    # The three counters are written out (no shared helper): each is one
    # Python call on the settle path, a dict lookup and a bisect in C.
    def succeeded(self, queue: str, kind: str, duration: float | None) -> None:
        row = self._rows.get((queue, kind)) or self._row(queue, kind)
        row[0] += 1
        if duration is not None:
            row[3 + _bisect(LATENCY_BOUNDS, duration)] += 1

    def failed_run(self, queue: str, kind: str, duration: float | None) -> None:
        """A dead-letter (by a settle or by recovery)."""
        row = self._rows.get((queue, kind)) or self._row(queue, kind)
        row[1] += 1
        if duration is not None:
            row[3 + _bisect(LATENCY_BOUNDS, duration)] += 1

    def retried(self, queue: str, kind: str, duration: float | None) -> None:
        row = self._rows.get((queue, kind)) or self._row(queue, kind)
        row[2] += 1
        if duration is not None:
            row[3 + _bisect(LATENCY_BOUNDS, duration)] += 1

    @property
    def pending(self) -> bool:
        """Whether anything was counted since the last take."""
        return bool(self._rows)

    def take(self) -> list[KindCounts]:
        """Everything counted, as one KindCounts per (queue, kind), and forget it.
        A name the aggregates would refuse (a damaged record's empty kind, one
        over :data:`MAX_NAME` characters) is counted under :func:`shown_name`."""
        from ..records._aggregates import KindCounts

        rows, self._rows = self._rows, {}
        named: dict[tuple[str, str], list[int]] = {}
        for (q, k), r in rows.items():
            key = (shown_name(q), shown_name(k))
            if key in named:  # two names shown alike: one row
                named[key] = [a + b for a, b in zip(named[key], r, strict=True)]
            else:
                named[key] = r
        return [
            KindCounts(q, k, r[0], r[1], r[2], tuple(r[3:]) if any(r[3:]) else ())
            for (q, k), r in named.items()
        ]

    def put_back(self, counts: list[KindCounts]) -> None:
        """Counts whose write failed: added back, to go with the next write."""
        for c in counts:
            row = self._row(c.queue, c.kind)
            row[0] += c.succeeded
            row[1] += c.failed
            row[2] += c.retried
            for i, n in enumerate(c.latency):
                row[3 + i] += n

    def statistics(self) -> AggregatesStatistics:
        return AggregatesStatistics(self.writes, self.failed, len(self._rows))


__all__ = ["AggregateTally", "AggregatesStatistics"]
