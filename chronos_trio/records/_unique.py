"""Unique jobs: at most one job per key in the pipeline, and the checks of
the options that say so.

A unique job takes a lock on its key in the same atomic step that stores
it; another enqueue with the key while the lock holds finds the holder
instead of storing a second job (see :class:`Unique` for what each mode
does). The stores keep the lock next to the job (on Redis in the job's own
partition, so one script does both, on a Cluster too).

Runs of one key never overlap: every unique job also carries a concurrency
limit of 1 on its key (:func:`run_slot_key`, added by the store when it
stores the job, see :func:`with_run_slot`), so a second job of the key (a
debounce stored while the first runs, a lock stored after its ttl lapsed, a
dead job requeued) waits, ready, until the running one settles. It is the
fleet-wide concurrency limit of ``records._control`` (slot taken in the
lease, given back by the fenced settle or when the lease expires), so it
costs nothing to jobs that are not unique.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Literal

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._control import JobControl

#: A unique key is at most this long (a derived key is far shorter).
MAX_UNIQUE_KEY_LENGTH = 200

UniqueMode = Literal["lock", "throttle", "debounce"]
_MODES = ("lock", "throttle", "debounce")


def _check_ttl(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and not (
        isinstance(value, int | float) and math.isfinite(value) and value > 0
    ):
        raise ValueError(f"unique ttl must be a finite number of seconds > 0, got {value!r}")


def _check_mode(instance: Any, attribute: Any, value: str) -> None:
    if value not in _MODES:
        raise ValueError(f"unique mode must be one of {', '.join(_MODES)}, got {value!r}")


def _check_key(instance: Any, attribute: Any, value: str | None) -> None:
    if value is not None and (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_UNIQUE_KEY_LENGTH
        or "\0" in value  # the stores' records end the key with a NUL
    ):
        raise ValueError(
            f"unique key must be a non-empty string of at most {MAX_UNIQUE_KEY_LENGTH} "
            f"characters and no NUL, got {value!r}"
        )


@attrs.frozen
class Unique:
    """At most one job with ``key`` in the pipeline (scheduled, ready,
    leased or retry_wait).

    ``key``: any text (at most 200 characters); None derives it from the
    job's kind and payload (the kind, then a SHA-256 of the payload's
    canonical JSON), so equal payloads of one task are one job. Keys are
    per queue.

    ``mode``:

    * ``"lock"`` (the default): while the key's job is pending, enqueueing
      another stores nothing and returns the pending job's handle with
      ``created`` False. The lock goes with the job: released when it
      succeeds or goes dead (a dead job does not block a new one; requeueing
      it later does not take the key back from a job that has it).
    * ``"throttle"``: as ``"lock"``, and the key stays taken ``ttl`` seconds
      after the job succeeded (at most one run per ``ttl``); a job that does
      not succeed gives it back at once. ``ttl`` is required.
    * ``"debounce"``: a new enqueue while the key's job waits (scheduled,
      ready or retry_wait) replaces that job's payload, headers and due time
      (``created`` False, ``run_at`` the new due time); while it runs, the
      new job is stored and takes the key, and runs after it, with the
      newest payload.

    In every mode two jobs of one key never run at once: a job of a key
    whose other job runs waits for it (see the module docstring); a job
    retried while its successor waited runs after the successor.

    ``ttl`` (seconds, optional for ``"lock"`` and ``"debounce"``): the lock
    also lapses ``ttl`` seconds after the enqueue that took it, whatever the
    job does, so a key is never held longer than that; while the job runs,
    each lease renewal (the worker's heartbeat) keeps the lock for at least
    the lease, so give a ttl of at least the heartbeat interval. None: it
    lasts as long as the job is pending.

    ``raise_duplicate``: raise :class:`DuplicateJob` instead of returning
    the pending job's handle (not for ``"debounce"``, whose enqueues always
    succeed).

    Raises ValueError for a key, mode or ttl out of range.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    key: str | None = attrs.field(default=None, validator=_check_key)
    ttl: float | None = attrs.field(default=None, validator=_check_ttl)
    mode: UniqueMode = attrs.field(default="lock", validator=_check_mode)
    raise_duplicate: bool = False

    def __attrs_post_init__(self) -> None:
        if self.mode == "throttle" and self.ttl is None:
            raise ValueError("a throttle needs a ttl: how long the key stays taken after a run")


def unique_of(value: Unique | str | bool | None) -> Unique | None:
    """The :class:`Unique` an option value means: True the derived key, a
    string that key, False or None not unique. ValueError otherwise."""
    if value is None or value is False:
        return None
    if value is True:
        return Unique()
    if isinstance(value, str):
        return Unique(key=value)
    if isinstance(value, Unique):
        return value
    raise ValueError(f"unique must be a Unique, a key (str) or a bool, got {value!r}")


def derived_key(kind: str, payload: bytes) -> str:
    """The unique key of a job that gives none: its kind and a SHA-256 of its
    payload's canonical JSON (keys sorted), or of its bytes when it is not
    JSON."""
    try:
        canonical = json.dumps(
            json.loads(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except (ValueError, UnicodeDecodeError):
        canonical = payload
    return f"{kind}:{hashlib.sha256(canonical).hexdigest()[:32]}"


def resolve(unique: Unique, kind: str, payload: bytes) -> Unique:
    """``unique`` with its key filled in (derived when it has none)."""
    if unique.key is not None:
        return unique
    return attrs.evolve(unique, key=derived_key(kind, payload))


#: The concurrency key of a unique key's run slot starts with this. A
#: control character, which no limit key a user gives can hold (see
#: ``records._control``), so the slot never shares a user's limit.
RUN_SLOT_PREFIX = "\x1funique:"


def run_slot_key(key: str) -> str:
    """The concurrency key of unique key ``key``'s run slot: the prefix, then
    ``key`` with ``%`` and control characters %-escaped (a stored flow
    control separates its items with them)."""
    return RUN_SLOT_PREFIX + "".join(
        f"%{ord(c):02X}" if c < " " or c in "%\x7f" else c for c in key
    )


def unique_key_of_slot(slot_key: str) -> str | None:
    """The unique key whose run slot ``slot_key`` is (None: a user's limit
    key), for display."""
    if not slot_key.startswith(RUN_SLOT_PREFIX):
        return None
    escaped = slot_key[len(RUN_SLOT_PREFIX) :]
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m[1], 16)), escaped)


def with_run_slot(control: JobControl | None, unique: Unique | None) -> JobControl | None:
    """``control`` as a store keeps it for a job that is ``unique``: with a
    concurrency limit of 1 on its key's run slot (last among its limits), so
    two jobs of one key never run at once; as it is for a job that is not."""
    if unique is None:
        return control
    assert unique.key is not None, "a stored unique job's key is resolved"
    slot = (run_slot_key(unique.key), 1)
    if control is None:
        return JobControl(caps=(slot,))
    if slot in control.caps:
        return control
    return attrs.evolve(control, caps=(*control.caps, slot))
