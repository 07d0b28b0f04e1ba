"""The memory store's per-minute aggregates (see
:class:`~chronos_trio.store.AggregatesRole`): one list of counts per
(queue, minute, kind), minutes older than ``keep`` dropped by each add."""

from __future__ import annotations

from collections.abc import Sequence

from ...records._aggregates import BUCKETS, MINUTE, KindCounts, MinuteCounts, minute_of

#: succeeded, failed, retried, then the histogram's buckets.
_WIDTH = 3 + BUCKETS


class Aggregates:
    """Every (queue, minute) -> kind -> counts the store holds."""

    def __init__(self) -> None:
        self._minutes: dict[tuple[str, int], dict[str, list[int]]] = {}

    def add(self, counts: Sequence[KindCounts], keep: float, now: float) -> None:
        """Add ``counts`` (already checked) to the minute of ``now``; drop
        minutes that ended more than ``keep`` seconds before ``now``."""
        minute = minute_of(now)
        for c in counts:
            kinds = self._minutes.setdefault((c.queue, minute), {})
            row = kinds.get(c.kind)
            if row is None:
                row = kinds[c.kind] = [0] * _WIDTH
            row[0] += c.succeeded
            row[1] += c.failed
            row[2] += c.retried
            for i, n in enumerate(c.latency):
                row[3 + i] += n
        oldest = now - keep - MINUTE
        for key in [k for k in self._minutes if k[1] < oldest]:
            del self._minutes[key]

    def read(self, queues: Sequence[str], since: float) -> list[MinuteCounts]:
        first = minute_of(since)
        out: list[MinuteCounts] = []
        for queue in dict.fromkeys(queues):
            keys = sorted(m for q, m in self._minutes if q == queue and m >= first)
            for minute in keys:
                for kind, row in sorted(self._minutes[(queue, minute)].items()):
                    out.append(
                        MinuteCounts(queue, kind, minute, row[0], row[1], row[2], tuple(row[3:]))
                    )
        return out

    def __len__(self) -> int:
        """(queue, kind, minute) records held."""
        return sum(len(kinds) for kinds in self._minutes.values())
