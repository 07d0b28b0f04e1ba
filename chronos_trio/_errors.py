"""Exceptions users see, in one place."""

from __future__ import annotations

from .store._base import StoreError as StoreError
from .store._base import TopologyError as TopologyError


class ChronosError(Exception):
    """Base class of chronos_trio's own errors."""


class SkipRetry(ChronosError):
    """Raise from a handler to dead-letter the job at once, without retries.

    ``raise SkipRetry("card declined")`` or ``raise SkipRetry(exc) from exc``.
    """


class PayloadError(ChronosError, ValueError):
    """A payload could not be encoded (at enqueue) or is too large."""


class UnknownTask(ChronosError, LookupError):
    """No task is registered under that kind."""


class ActorFailed(ChronosError):
    """An actor exceeded its restart intensity; the worker stops."""

    def __init__(self, actor: str, restarts: int, period: float) -> None:
        super().__init__(f"actor {actor!r} crashed {restarts} times within {period:g}s; giving up")
        self.actor = actor
        self.restarts = restarts
        self.period = period
