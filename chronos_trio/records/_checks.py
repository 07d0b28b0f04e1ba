"""Small checks of option values, each raising an error that names the
option and the value. Public through :mod:`._options`; a module of their
own so that :mod:`._control` may use them (``_options`` names ``_control``
in its annotations)."""

from __future__ import annotations

import math
from typing import TypeGuard


def is_number(value: object) -> TypeGuard[int | float]:
    """A real number (an int or a float, never a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: object) -> TypeGuard[int]:
    """An int (an int subclass too), never a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_seconds(
    name: str,
    value: object,
    *,
    zero: bool = False,
    note: str = "",
    what: str = "a finite number of seconds",
) -> float:
    """``value`` if it is a finite real number > 0 (>= 0 with ``zero``),
    never a bool; else ``ValueError`` naming ``name`` and the value
    (``what`` it must be, then the bound and ``note``)."""
    if is_number(value) and math.isfinite(value) and (value >= 0 if zero else value > 0):
        return value
    bound = ">= 0" if zero else "> 0"
    raise ValueError(f"{name} must be {what} {bound}{note}, got {value!r}")


def check_positive_int(name: str, value: object, *, note: str = "") -> int:
    """``value`` if it is an int >= 1 (never a bool), else ``ValueError``
    naming ``name`` and the value (``note`` after the requirement)."""
    if is_int(value) and value >= 1:
        return value
    raise ValueError(f"{name} must be an int >= 1{note}, got {value!r}")


def check_bool(name: str, value: object, *, error: type[Exception] = ValueError) -> bool:
    """``value`` if it is a bool (``"no"`` is truthy), else ``error``
    (``ValueError`` unless the caller's contract says otherwise) naming it."""
    if not isinstance(value, bool):
        raise error(f"{name} must be a bool, got {value!r}")
    return value


def check_text(name: str, value: object, *, strip: bool = False, note: str = "") -> str:
    """``value`` if it is a non-empty string (with ``strip``, not only
    whitespace either), else ``ValueError`` naming ``name`` and the value
    (``note`` after the requirement)."""
    if not isinstance(value, str) or not (value.strip() if strip else value):
        raise ValueError(f"{name} must be a non-empty string{note}, got {value!r}")
    return value
