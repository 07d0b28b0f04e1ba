"""What every adapter shares about running a batch of ops, with neither
redis-py nor Trio: its counters, the plan of the ``NOSCRIPT`` retry, and
how failures and error replies become StoreError.

Used by the Trio adapter (``_adapter``), redis-py's blocking path
(``_blocking``: threads, the synchronous producer) and the asyncio
producer's (``_asyncio``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ...records._attrs_methods import fields_eq, fields_repr
from .._roles import StoreError
from ._errors import describe, is_noscript
from ._scripts import Op, Script


@attrs.define
class AdapterStatistics:
    """Counters of one adapter, for tests and monitoring."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    round_trips: int = 0  # pipelines / commands sent (one per node per batch)
    commands: int = 0  # commands inside them
    script_loads: int = 0  # NOSCRIPT recoveries
    blocking_waits: int = 0  # blocking reads (XREAD BLOCK) issued
    replica_waits: int = 0  # WAITs sent (one per node per batch)
    native_round_trips: int = 0  # of round_trips: over Trio sockets (no thread hop)


def store_error(where: str, exc: BaseException) -> StoreError:
    """The StoreError for a redis-py failure at ``where`` (a redacted URL)."""
    return StoreError(f"Redis at {where} failed: {type(exc).__name__}: {describe(exc)}")


def with_waits(commands: Sequence[Sequence[Any]], rerun: list[int]) -> list[int]:
    """``rerun`` (indices of commands to send again, in order) with every
    ``WAIT`` after the first of them: a WAIT acknowledges the writes sent
    before it on its connection, so one that ran before the re-sent commands
    does not cover them."""
    if not rerun:
        return rerun
    first = rerun[0]
    waits = [i for i in range(first + 1, len(commands)) if commands[i][0] == "WAIT"]
    return sorted(set(rerun) | set(waits))


def reload_plan(ops: Sequence[Op], replies: Sequence[Any]) -> tuple[list[int], list[Script]]:
    """The ops that got NOSCRIPT (they did not run) and the scripts to load
    before running them again (with any WAIT after them: it must cover them)."""
    missing = [i for i, r in enumerate(replies) if isinstance(r, Exception) and is_noscript(r)]
    if not missing:
        return missing, []
    scripts = {ops[i].script for i in missing}
    # wake-ups after the first re-run op go again: the first time they ran
    # before it had applied, so the waiter they woke may have found nothing
    wakes = [i for i in range(missing[0] + 1, len(ops)) if ops[i].wake]
    rerun = sorted(set(missing) | set(wakes))
    return with_waits([op.args for op in ops], rerun), [s for s in scripts if s is not None]


def check_replies(ops: Sequence[Op], replies: Sequence[Any], where: str) -> None:
    """Raise StoreError for the first error reply of an op that is not ``soft``."""
    for op, reply in zip(ops, replies, strict=True):
        if isinstance(reply, Exception) and not op.soft:
            raise store_error(where, reply)
