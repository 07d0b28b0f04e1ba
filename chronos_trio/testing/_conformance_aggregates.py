"""Conformance checks of the per-minute aggregates
(:class:`~chronos_trio.store.AggregatesRole`): counts add up per (queue,
kind, minute of the store's clock), reads filter by queue and minute, bad
input is refused before anything is added. Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported.

Expiry (a minute goes ``keep`` seconds after it ends) takes at least a
minute of store time, so each backend's tests check it on its own clock."""

from __future__ import annotations

from collections.abc import Awaitable

import trio

from ..records._aggregates import BUCKETS, MINUTE, KindCounts, MinuteCounts, minute_of
from ..store._capabilities import Capability
from ..store._roles import Store
from .conformance import Fresh, check

KEEP = 3600.0


def hist(**at: int) -> tuple[int, ...]:
    """A histogram with ``b<i>=n`` buckets set."""
    out = [0] * BUCKETS
    for name, n in at.items():
        out[int(name[1:])] = n
    return tuple(out)


async def add_in_one_minute(store: Store, *batches: list[KindCounts]) -> int:
    """Add ``batches`` within one minute of the store's clock (waiting out a
    minute's end that is too close); the minute they went to."""
    while True:
        now = await store.now()
        if now - minute_of(now) < MINUTE - 5:
            break
        # a minute's end is at most 5 s away: wait it out
        await trio.sleep(MINUTE - (now - minute_of(now)) + 0.1)
    for batch in batches:
        await store.add_aggregates(batch, keep=KEEP)
    after = await store.now()
    assert minute_of(after) == minute_of(now), "the adds took more than 5 s"
    return minute_of(now)


@check(Capability.AGGREGATES)
async def check_aggregates_add_up_per_queue_kind_minute(fresh: Fresh) -> None:
    store = await fresh()
    assert await store.aggregates(["q"], 0.0) == [], "a new store holds no aggregates"
    await store.add_aggregates([], keep=KEEP)  # nothing
    minute = await add_in_one_minute(
        store,
        [
            KindCounts("q", "a", succeeded=2, latency=hist(b3=1, b4=1)),
            KindCounts("q", "b", failed=1, retried=3),
            KindCounts("q", "a", succeeded=1, latency=hist(b4=1)),  # the same pair again
            KindCounts("other", "a", succeeded=7),
        ],
        [KindCounts("q", "a", failed=1, retried=1, latency=hist(b18=2))],
    )
    got = await store.aggregates(["q"], minute)
    assert got == [
        MinuteCounts("q", "a", minute, 3, 1, 1, hist(b3=1, b4=2, b18=2)),
        MinuteCounts("q", "b", minute, 0, 1, 3, hist()),
    ], got
    assert got[0].runs == 5
    both = await store.aggregates(["other", "q", "missing"], minute - 3600)
    assert [(m.queue, m.kind) for m in both] == [("other", "a"), ("q", "a"), ("q", "b")]
    assert both[0] == MinuteCounts("other", "a", minute, 7, 0, 0, hist())
    assert await store.aggregates(["q"], minute + MINUTE) == [], "since: later minutes only"
    assert await store.aggregates([], 0.0) == []
    # names are text: any character goes through unchanged
    odd = "k|ind:{x} é\n"
    await store.add_aggregates([KindCounts("q:{1}|x", odd, succeeded=1)], keep=KEEP)
    read = await store.aggregates(["q:{1}|x"], minute)
    assert [(m.queue, m.kind, m.succeeded) for m in read] == [("q:{1}|x", odd, 1)]


@check(Capability.AGGREGATES)
async def check_aggregates_refuse_bad_input(fresh: Fresh) -> None:
    store = await fresh()
    good = KindCounts("q", "k", succeeded=1)
    bad: list[object] = [
        KindCounts("q", "k", succeeded=-1),
        KindCounts("q", "k", latency=(1, 2)),
        KindCounts("", "k"),
        KindCounts("q", "k", retried=True),  # a bool is no count
        "q",
    ]
    for wrong in bad:
        await _refused(store.add_aggregates([good, wrong], keep=KEEP))  # type: ignore[list-item]
    for keep in (0.0, 59.0, float("inf"), float("nan"), 40 * 86400.0):
        await _refused(store.add_aggregates([good], keep=keep), "a number of seconds from")
    assert await store.aggregates(["q"], 0.0) == [], "a refused batch added nothing"


async def _refused(call: Awaitable[None], text: str = "") -> None:
    try:
        await call
    except (ValueError, TypeError) as exc:
        assert text in str(exc), exc
    else:
        raise AssertionError("bad input was accepted")


__all__ = ["hist"]
