"""Inspection of flow-control state on Redis: the rate and concurrency limit
keys a queue's jobs used (``<tag>:limits``, see ``keys``), read in two
pipelined round trips (one more for the holders of concurrency limits, one
to drop the keys that lapsed from the listing).

A holder of a concurrency limit counts while its record is leased and its
lease unexpired, as lease.lua counts it (a renewed holder's score in the
zset is its first expiry; the record has the current one).

Each operation here is a sans-IO plan (see ``_core``), run by
``StoreContext.run`` (``store.py`` calls ``ctx.run(plan)``).
"""

from __future__ import annotations

from typing import Any

from ...records._unique import RUN_SLOT_PREFIX
from .._roles import LimitUsage
from ._admin import partitions_of_queue
from ._codec import ident, parse_number
from ._context import StoreContext
from ._core import Call, Plan
from ._scripts import Op
from .keys import PartitionKeys

_RUN_SLOTS = "cap:" + RUN_SLOT_PREFIX


def limit_usage(ctx: StoreContext, queue: str) -> Plan[list[LimitUsage]]:
    pks = yield from partitions_of_queue(ctx, queue)
    if not pks:
        return []
    listed = yield Call(
        [Op.soft_command(pk.tag, "SMEMBERS", f"{pk.tag}:limits") for pk in pks]
        + [Op.command(None, "TIME")]
    )
    t = listed[-1]
    now = int(t[0]) + int(t[1]) / 1_000_000
    names: list[tuple[PartitionKeys, str]] = [
        (pk, ident(name))
        for pk, members in zip(pks, listed, strict=False)
        if not isinstance(members, Exception)
        for name in sorted(members)
        # unique keys' run slots are not listed by lease.lua; an older one did
        if not ident(name).startswith(_RUN_SLOTS)
    ]
    if not names:
        return []
    states = yield Call(
        [
            Op.soft_command(pk.tag, "GET", f"{pk.tag}:{name}")
            if name.startswith("rl:")
            else Op.soft_command(pk.tag, "ZRANGE", f"{pk.tag}:{name}", 0, -1)
            for pk, name in names
        ]
    )
    # keys that lapsed (a rate limit's time came, a concurrency limit's last
    # holder left) leave the listing: a key per tenant must not pile up
    gone = [
        Op.soft_command(pk.tag, "SREM", f"{pk.tag}:limits", name)
        for (pk, name), state in zip(names, states, strict=True)
        if state is None or state == []
    ]
    if gone:
        yield Call(gone)
    holders = [
        (n, pk, ident(m))
        for n, ((pk, name), state) in enumerate(zip(names, states, strict=True))
        if name.startswith("cap:") and isinstance(state, list)
        for m in state
    ]
    leases: list[Any] = []
    if holders:
        leases = yield Call(
            [
                Op.soft_command(pk.tag, "HMGET", pk.job(m), "state", "lease_expires_at")
                for _, pk, m in holders
            ]
        )
    held: dict[int, int] = {}
    for (n, _pk, _m), got in zip(holders, leases, strict=True):
        if isinstance(got, list) and got[0] == b"leased":
            until = parse_number(got[1]) if got[1] else None
            if until is not None and until > now:
                held[n] = held.get(n, 0) + 1
    merged: dict[tuple[str, str], LimitUsage] = {}
    for n, ((_pk, name), state) in enumerate(zip(names, states, strict=True)):
        if state is None or state == []:
            continue
        kind, _, key = name.partition(":")
        if kind == "rl":
            booked = parse_number(state) if isinstance(state, bytes) else None
            prior = merged.get(("rate", key))
            if prior is not None and prior.booked_until is not None:
                booked = max(booked or 0.0, prior.booked_until)
            merged[("rate", key)] = LimitUsage(queue, key, "rate", 0, booked)
        else:
            prior = merged.get(("concurrency", key))
            count = held.get(n, 0) + (prior.in_use if prior is not None else 0)
            merged[("concurrency", key)] = LimitUsage(queue, key, "concurrency", count)
    return [merged[k] for k in sorted(merged)]
