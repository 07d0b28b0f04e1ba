"""Retry backoff."""

from __future__ import annotations

import random

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr


@attrs.frozen
class RetryPolicy:
    """Exponential backoff: ``base * factor**(attempt-1)``, capped at ``max_delay``.

    The defaults give 1 s -> 2 s -> 4 s ... up to 1 min. With ``jitter=True``
    the delay is drawn uniformly from ``[0, backoff]`` ("full jitter"), which
    spreads out a herd of jobs that failed together.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    base: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    factor: float = attrs.field(default=2.0, validator=attrs.validators.ge(1))
    max_delay: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    jitter: bool = False

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = max(0, attempt - 1)
        # Cap the exponent so factor**exponent cannot overflow a float.
        backoff = min(self.max_delay, self.base * self.factor ** min(exponent, 64))
        if self.jitter:
            return (rng or random).uniform(0.0, backoff)
        return backoff
