"""Per-minute aggregates on Redis (:class:`~chronos_trio.store.AggregatesRole`):
one hash per (queue, minute), ``{ns:agg:<queue>}:<minute>``, fields
``<what>|<kind>`` counted with HINCRBY, expiring ``keep`` seconds after the
minute ends (``lua/aggregates_add.lua``). An add is one script per queue,
every queue in one round trip; a read is one ``aggregates_read.lua`` per
queue (the script reads the store's clock and the minutes' hashes), also
in one round trip.

Memory: a (queue, minute) hash holds, per kind, the fields ``s``, ``f``,
``r`` that are not zero and one field per run-time bucket that was hit
(typically 2-4): a small listpack (see ``docs/BENCHMARKS.md`` for measured
bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...records._aggregates import (
    BUCKETS,
    KindCounts,
    MinuteCounts,
    check_add,
)
from ._scripts import AGGREGATES_ADD, AGGREGATES_READ, Op

if TYPE_CHECKING:
    from ._context import StoreContext

_CODES = {"s": 0, "f": 1, "r": 2}


def fields_of(counts: Sequence[KindCounts]) -> list[object]:
    """The field/increment pairs of ``counts`` (all of one queue)."""
    argv: list[object] = []
    for c in counts:
        for code, n in (("s", c.succeeded), ("f", c.failed), ("r", c.retried)):
            if n:
                argv += [f"{code}|{c.kind}", n]
        for i, n in enumerate(c.latency):
            if n:
                argv += [f"{i}|{c.kind}", n]
    return argv


async def add(ctx: StoreContext, counts: Sequence[KindCounts], keep: float) -> None:
    keep = check_add(counts, keep)
    by_queue: dict[str, list[KindCounts]] = {}
    for c in counts:
        by_queue.setdefault(c.queue, []).append(c)
    ops = []
    for queue, group in by_queue.items():
        argv = fields_of(group)
        if argv:
            ops.append(Op.script_call(AGGREGATES_ADD, [ctx.keys.aggregates(queue)], [keep, *argv]))
    if ops:
        await ctx.adapter.execute(ops)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read(ctx: StoreContext, queues: Sequence[str], since: float) -> list[MinuteCounts]:
    names = list(dict.fromkeys(queues))
    if not names:
        return []
    ops = [
        Op.script_call(AGGREGATES_READ, [ctx.keys.aggregates(q)], [int(since // 60) * 60])
        for q in names
    ]
    replies = await ctx.adapter.execute(ops)
    out: list[MinuteCounts] = []
    for queue, reply in zip(names, replies, strict=True):
        for k in range(0, len(reply), 2):
            minute = int(reply[k])
            fields = reply[k + 1]
            kinds: dict[str, list[int]] = {}
            for j in range(0, len(fields), 2):
                code, _, kind = _text(fields[j]).partition("|")
                row = kinds.get(kind)
                if row is None:
                    row = kinds[kind] = [0] * (3 + BUCKETS)
                at = _CODES.get(code)
                if at is None:
                    if not code.isdigit() or int(code) >= BUCKETS:
                        continue  # a field of a newer version: not ours to read
                    at = 3 + int(code)
                row[at] += int(fields[j + 1])
            for kind in sorted(kinds):
                r = kinds[kind]
                out.append(MinuteCounts(queue, kind, minute, r[0], r[1], r[2], tuple(r[3:])))
    return out
