"""The charts of the queues and queue pages: throughput (succeeded, failed,
retried per time slot) and p50/p99 run time, per queue and per kind, over
the last hours, from the store's per-minute aggregates
(:class:`~chronos_trio.store.AggregatesRole`).

Drawn server-side as inline SVG (no chart library, no script needed): this
module turns the aggregates into slots and the slots into shapes with
plain numbers; ``templates/_charts.html`` writes them out, with a data
table beside each chart for screen readers and for exact figures. The
page's script reloads the charts' fragment (``GET /charts``) with the live
updates (see ``static/dashboard.js``). A store without aggregates shows a
note instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Sequence

import attrs

from ..app._inspector import Inspector
from ..records._aggregates import BUCKETS, MINUTE, MinuteCounts, merge, quantile
from ..store import AggregatesRole

#: The windows a page offers (hours) and the minutes one bar covers in each,
#: so a chart has at most 96 bars.
WINDOWS: dict[int, int] = {1: 1, 3: 2, 6: 5, 24: 15}
DEFAULT_HOURS = 3
#: The SVG's drawing box (the page scales it to its width).
WIDTH, HEIGHT = 600.0, 120.0
LEFT, BOTTOM, TOP = 44.0, 18.0, 6.0


@attrs.frozen
class Slot:
    """One bar's time span: its counts and run-time percentiles."""

    start: int
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    p50: float | None = None
    p99: float | None = None

    @property
    def total(self) -> int:
        return self.succeeded + self.failed + self.retried


@attrs.frozen
class Shape:
    """A bar (``w``/``h`` set) or a point (``w`` 0) of a chart; ``label``
    its tooltip (the SVG's ``<title>``)."""

    cls: str
    x: float
    y: float
    w: float
    h: float
    label: str


@attrs.frozen
class Chart:
    """One chart's shapes, lines, axis ticks and summary (its accessible name)."""

    kind: str  # "throughput" or "latency"
    shapes: tuple[Shape, ...]
    lines: tuple[tuple[str, str], ...]  # (class, SVG points)
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...]
    summary: str


@attrs.frozen
class History:
    """The charts of one queue (``kind`` None: all its kinds) or one kind."""

    queue: str
    kind: str | None
    slots: tuple[Slot, ...]
    step: int  # minutes per slot
    throughput: Chart
    latency: Chart

    @property
    def totals(self) -> Slot:
        return Slot(
            self.slots[0].start if self.slots else 0,
            sum(s.succeeded for s in self.slots),
            sum(s.failed for s in self.slots),
            sum(s.retried for s in self.slots),
        )

    @property
    def empty(self) -> bool:
        """Nothing ran in the window (the page shows a line, not two empty charts)."""
        return not any(s.total for s in self.slots)

    @property
    def dom_id(self) -> str:
        """A stable id for the chart's elements (names may hold anything)."""
        key = f"{self.queue}\x00{self.kind or ''}".encode()
        return "h" + hashlib.sha1(key, usedforsecurity=False).hexdigest()[:12]


def hours_of(text: str | None) -> int:
    """The window asked for (``?hours=``), one of :data:`WINDOWS`, or the default."""
    try:
        hours = int(text) if text else DEFAULT_HOURS
    except ValueError:
        return DEFAULT_HOURS
    return hours if hours in WINDOWS else DEFAULT_HOURS


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M")


def seconds_text(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.3g} ms"
    return f"{s:.3g} s"


def slots_of(rows: Sequence[MinuteCounts], now: float, hours: int) -> tuple[list[Slot], int]:
    """``rows`` (of one queue or kind) summed into the window's slots, oldest
    first, the last one holding ``now``; and the minutes per slot."""
    step = WINDOWS[hours] * MINUTE
    last = int(now // step) * step
    count = hours * 3600 // step
    first = last - (count - 1) * step
    sums: dict[int, list[int]] = {}
    hists: dict[int, tuple[int, ...]] = {}
    for r in rows:
        if r.minute < first:
            continue
        at = (r.minute - first) // step
        s = sums.setdefault(at, [0, 0, 0])
        s[0] += r.succeeded
        s[1] += r.failed
        s[2] += r.retried
        hists[at] = merge(hists.get(at, ()), r.latency)
    slots = []
    for i in range(count):
        s = sums.get(i, [0, 0, 0])
        h = hists.get(i, (0,) * BUCKETS)
        slots.append(Slot(first + i * step, s[0], s[1], s[2], quantile(h, 0.5), quantile(h, 0.99)))
    return slots, step // MINUTE


def _nice(value: float) -> float:
    """The smallest 1-2-5 number at least ``value`` (1 at least)."""
    if value <= 1:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if m * exp >= value:
            return float(m * exp)
    return float(10 * exp)


def _x_ticks(slots: Sequence[Slot], slot_w: float) -> tuple[tuple[float, str], ...]:
    n = len(slots)
    if not n:
        return ()
    every = max(1, n // 6)
    return tuple((round(LEFT + i * slot_w, 2), _clock(slots[i].start)) for i in range(0, n, every))


def throughput_chart(slots: Sequence[Slot], step: int) -> Chart:
    n = max(1, len(slots))
    slot_w = (WIDTH - LEFT) / n
    plot_h = HEIGHT - BOTTOM - TOP
    top = _nice(max((s.total for s in slots), default=0))
    shapes = []
    for i, s in enumerate(slots):
        y = HEIGHT - BOTTOM
        label = (
            f"{_clock(s.start)} UTC, {step} min: {s.succeeded} succeeded, "
            f"{s.failed} failed, {s.retried} retried"
        )
        for cls, value in (("ok", s.succeeded), ("retried", s.retried), ("failed", s.failed)):
            if not value:
                continue
            h = plot_h * value / top
            y -= h
            shapes.append(
                Shape(
                    f"bar {cls}",
                    round(LEFT + i * slot_w + 0.5, 2),
                    round(y, 2),
                    round(max(slot_w - 1, 0.5), 2),
                    round(h, 2),
                    label,
                )
            )
    ticks = tuple((round(HEIGHT - BOTTOM - plot_h * f, 2), f"{top * f:g}") for f in (0.0, 0.5, 1.0))
    total = sum(s.total for s in slots)
    summary = (
        f"Throughput, {len(slots)} bars of {step} min: {sum(s.succeeded for s in slots)} "
        f"succeeded, {sum(s.failed for s in slots)} failed, "
        f"{sum(s.retried for s in slots)} retried ({total} outcomes)"
    )
    return Chart("throughput", tuple(shapes), (), ticks, _x_ticks(slots, slot_w), summary)


def latency_chart(slots: Sequence[Slot], step: int) -> Chart:
    n = max(1, len(slots))
    slot_w = (WIDTH - LEFT) / n
    plot_h = HEIGHT - BOTTOM - TOP
    values = [v for s in slots for v in (s.p50, s.p99) if v is not None and v > 0]
    low = 10 ** math.floor(math.log10(min(values))) if values else 0.001
    high = 10 ** math.ceil(math.log10(max(values))) if values else 1.0
    if high <= low:
        high = low * 10
    span = math.log10(high) - math.log10(low)

    def y_of(v: float) -> float:
        v = min(max(v, low), high)
        return round(HEIGHT - BOTTOM - plot_h * (math.log10(v) - math.log10(low)) / span, 2)

    shapes = []
    lines = []
    for cls in ("p50", "p99"):
        pts = []
        for i, s in enumerate(slots):
            v = s.p50 if cls == "p50" else s.p99
            if v is None:
                continue
            x = round(LEFT + (i + 0.5) * slot_w, 2)
            y = y_of(v)
            pts.append(f"{x},{y}")
            shapes.append(
                Shape(f"point {cls}", x, y, 0, 0, f"{_clock(s.start)} UTC: {cls} {seconds_text(v)}")
            )
        if len(pts) > 1:
            lines.append((f"line {cls}", " ".join(pts)))
    decades = round(span)
    ticks = tuple((y_of(low * 10**k), seconds_text(low * 10**k)) for k in range(0, decades + 1))
    p50s = [s.p50 for s in slots if s.p50 is not None]
    p99s = [s.p99 for s in slots if s.p99 is not None]
    summary = (
        f"Run time p50 and p99 per {step} min (log scale): latest p50 "
        f"{seconds_text(p50s[-1] if p50s else None)}, "
        f"p99 {seconds_text(p99s[-1] if p99s else None)}"
    )
    return Chart("latency", tuple(shapes), tuple(lines), ticks, _x_ticks(slots, slot_w), summary)


def history_of(
    rows: Sequence[MinuteCounts], now: float, hours: int, queue: str, kind: str | None
) -> History:
    slots, step = slots_of(rows, now, hours)
    return History(
        queue, kind, tuple(slots), step, throughput_chart(slots, step), latency_chart(slots, step)
    )


async def histories(
    inspector: Inspector, queues: Sequence[str], hours: int, *, by_kind: bool = False
) -> list[History] | None:
    """One :class:`History` per queue (and, ``by_kind``, one per kind after
    its queue's); None when the store keeps no aggregates. Raises
    StoreError when the store cannot be reached."""
    store = inspector.store
    if not isinstance(store, AggregatesRole):
        return None
    now = await inspector.now()
    rows = await store.aggregates(queues, now - hours * 3600)
    by_queue: dict[str, list[MinuteCounts]] = {q: [] for q in queues}
    for r in rows:
        by_queue.setdefault(r.queue, []).append(r)
    out = []
    for queue in queues:
        mine = by_queue.get(queue, [])
        out.append(history_of(mine, now, hours, queue, None))
        if by_kind:
            for kind in sorted({r.kind for r in mine}):
                out.append(history_of([r for r in mine if r.kind == kind], now, hours, queue, kind))
    return out


__all__ = ["DEFAULT_HOURS", "WINDOWS", "Chart", "History", "Shape", "Slot", "histories", "hours_of"]
