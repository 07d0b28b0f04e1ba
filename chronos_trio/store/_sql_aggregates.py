"""Per-minute aggregates in the SQL stores (:class:`~chronos_trio.store.
AggregatesRole`): one row per (queue, minute, kind) of the ``aggregates``
table, columns ``succeeded``, ``failed``, ``retried`` and ``b0`` ..
``b18`` (the run-time histogram's buckets, ``records._aggregates``).

An add is one transaction: one upsert per (queue, kind) into the minute of
the store's clock (``ON CONFLICT ... DO UPDATE`` adds the counts), then one
``DELETE`` of the minutes older than ``keep`` (by the ``minute`` index), so
the table holds at most ``keep / 60 + 1`` minutes per (queue, kind). A read
is one statement. The statements are the same on PostgreSQL and SQLite but
for their placeholders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..records._aggregates import BUCKETS, MINUTE, KindCounts, MinuteCounts

#: The count columns, in the order of a row after (queue, kind, minute).
COUNT_COLUMNS: tuple[str, ...] = (
    "succeeded",
    "failed",
    "retried",
    *(f"b{i}" for i in range(BUCKETS)),
)


def upsert(mark: str, minute: str) -> str:
    """The upsert of one (queue, kind) row; ``mark`` the placeholder,
    ``minute`` the SQL of the minute (the store's clock)."""
    cols = ", ".join(COUNT_COLUMNS)
    marks = ", ".join([mark] * len(COUNT_COLUMNS))
    sets = ", ".join(f"{c} = aggregates.{c} + excluded.{c}" for c in COUNT_COLUMNS)
    return (
        f"INSERT INTO aggregates (queue, kind, minute, {cols}) "
        f"VALUES ({mark}, {mark}, {minute}, {marks}) "
        f"ON CONFLICT (queue, minute, kind) DO UPDATE SET {sets}"
    )


def trim(mark: str) -> str:
    """The delete of minutes that ended more than the given seconds ago."""
    return f"DELETE FROM aggregates WHERE minute < {mark}"


def read(mark: str, count: int) -> str:
    """The read of ``count`` queues' rows from a minute on."""
    marks = ", ".join([mark] * count)
    return (
        f"SELECT queue, kind, minute, {', '.join(COUNT_COLUMNS)} FROM aggregates "
        f"WHERE queue IN ({marks}) AND minute >= {mark} ORDER BY queue, minute, kind"
    )


def rows_of(counts: Sequence[KindCounts]) -> list[tuple[Any, ...]]:
    """One parameter row per count, (queue, kind, *counts): several of one
    (queue, kind) summed first (an upsert of one row twice in one
    statement is an error on PostgreSQL)."""
    summed: dict[tuple[str, str], list[int]] = {}
    for c in counts:
        row = summed.setdefault((c.queue, c.kind), [0] * len(COUNT_COLUMNS))
        row[0] += c.succeeded
        row[1] += c.failed
        row[2] += c.retried
        for i, n in enumerate(c.latency):
            row[3 + i] += n
    return [(q, k, *r) for (q, k), r in summed.items()]


def oldest(now: float, keep: float) -> int:
    """The first minute a store keeps at ``now``."""
    return int((now - keep - MINUTE) // MINUTE) * MINUTE


def first_minute(since: float) -> int:
    return int(since // MINUTE) * MINUTE


def minute_counts(rows: Iterable[Sequence[Any]], queues: Sequence[str]) -> list[MinuteCounts]:
    """Read rows as MinuteCounts, in the order of ``queues``."""
    order = {q: i for i, q in enumerate(dict.fromkeys(queues))}
    out = [
        MinuteCounts(
            str(r[0]),
            str(r[1]),
            int(r[2]),
            int(r[3]),
            int(r[4]),
            int(r[5]),
            tuple(int(n) for n in r[6:]),
        )
        for r in rows
    ]
    out.sort(key=lambda m: (order.get(m.queue, 0), m.minute, m.kind))
    return out


#: The table, as both stores create it (PostgreSQL with BIGINT, SQLite's
#: STRICT INTEGER is 64-bit too).
def table_sql(integer: str, suffix: str = "") -> tuple[str, str]:
    cols = ",\n    ".join(f"{c} {integer} NOT NULL DEFAULT 0" for c in COUNT_COLUMNS)
    return (
        "CREATE TABLE aggregates (\n"
        "    queue TEXT NOT NULL,\n"
        "    kind TEXT NOT NULL,\n"
        f"    minute {integer} NOT NULL,\n"
        f"    {cols},\n"
        f"    PRIMARY KEY (queue, minute, kind)\n){suffix}",
        "CREATE INDEX aggregates_minute ON aggregates (minute)",
    )


__all__ = [
    "COUNT_COLUMNS",
    "first_minute",
    "minute_counts",
    "oldest",
    "read",
    "rows_of",
    "table_sql",
    "trim",
    "upsert",
]
