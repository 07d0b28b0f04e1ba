"""Values of store URL query options, read one way by every backend: each
function returns the value or raises ``ValueError`` naming the option and
what it must be."""

from __future__ import annotations


def seconds(name: str, value: str) -> float:
    """A positive, finite number of seconds."""
    try:
        parsed = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number of seconds") from None
    if not parsed > 0 or parsed == float("inf"):
        raise ValueError(f"{name}={value!r} must be a positive number of seconds")
    return parsed


def whole_number(name: str, value: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high``."""
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
    if not low <= parsed <= high:
        raise ValueError(f"{name}={value!r} must be between {low} and {high}")
    return parsed
