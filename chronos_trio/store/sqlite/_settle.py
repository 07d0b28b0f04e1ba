"""Renew, settle and recovery on SQLite (STUB: to be written)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...records._jobs import LeaseRef
from .._roles import RecoverResult, RenewResult, Settlement, SettleResult


def renew(
    conn: sqlite3.Connection, leases: Sequence[LeaseRef], lease_duration: float, now: float
) -> RenewResult:
    raise NotImplementedError


def settle(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> tuple[SettleResult, bool]:
    """The settle's result, and whether it filled the workflow outbox."""
    raise NotImplementedError


def recover(
    conn: sqlite3.Connection, queues: Sequence[str], limit: int, now: float
) -> RecoverResult:
    raise NotImplementedError
