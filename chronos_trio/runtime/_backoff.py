"""Backing off while the store is unreachable."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import trio

from ..records._errors import StoreError
from ..records._log import log_event

P = ParamSpec("P")
T = TypeVar("T")


class Backoff:
    """Exponential backoff with jitter between ``initial`` and ``maximum`` seconds.

    Actors call :meth:`failed` when a store call raises, and :meth:`reset`
    after a success, so a Redis outage costs a few log lines and retries, not
    a crash loop that would exhaust the restart intensity.
    """

    def __init__(
        self, logger: logging.Logger, what: str, initial: float = 0.05, maximum: float = 5.0
    ) -> None:
        self._log = logger
        self._what = what
        self._initial = initial
        self._maximum = maximum
        self._delay = 0.0
        self.failures = 0

    async def failed(self, exc: BaseException) -> None:
        """Count and log a failure, then sleep the backoff (with jitter)."""
        self._count(exc, "retrying", round(self._next_delay(), 3))
        await trio.sleep(random.uniform(self._delay / 2, self._delay))

    def failed_nowait(self, exc: BaseException) -> None:
        """Count and log a failure without sleeping: for a caller whose
        own period paces its retries (the heartbeater's ticks)."""
        self._count(exc, "retrying at the next tick")

    def _next_delay(self) -> float:
        self._delay = min(self._maximum, max(self._initial, self._delay * 2))
        return self._delay

    def _count(self, exc: BaseException, then: str, delay: float | None = None) -> None:
        self.failures += 1
        level = (
            logging.WARNING
            if self.failures in (1, 10) or self.failures % 100 == 0
            else logging.DEBUG
        )
        event = f"{self._what} failed; {then}"
        error = f"{type(exc).__name__}: {exc}"
        if delay is None:
            log_event(self._log, level, event, error=error, failure=self.failures)
        else:
            log_event(self._log, level, event, error=error, failure=self.failures, delay=delay)

    async def call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """``await fn(*args, **kwargs)`` until it does not raise StoreError,
        backing off between tries; the actors' way to ride out an outage."""
        while True:
            try:
                result = await fn(*args, **kwargs)
            except StoreError as exc:
                await self.failed(exc)
                continue
            self.reset()
            return result

    def reset(self) -> None:
        if self.failures:
            log_event(self._log, logging.INFO, f"{self._what} works again", failures=self.failures)
        self.failures = 0
        self._delay = 0.0
