"""A job's options as producers give them, their defaults and their checks."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._control import ConcurrencyLimit, RateLimit
    from ._unique import Unique

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 30.0
#: A job's headers, encoded as JSON, are at most this long.
MAX_HEADERS_BYTES = 8192


class JobDefaults(TypedDict, total=False):
    """Options that override a task's defaults, for one job or a schedule."""

    #: Queue to put the job in (default: the task's, else ``"default"``).
    queue: str
    #: Retries after the first attempt before the job is dead (default 3).
    max_retries: int
    #: Seconds a run may take before it is cancelled and counted as failed (30).
    timeout: float


class EnqueueOptions(JobDefaults, total=False):
    """Every option ``enqueue`` takes, in one place; each signature that takes
    them says ``**options: Unpack[EnqueueOptions]``."""

    #: Due this many seconds from the store's now (not with ``run_at``).
    delay: float
    #: Due at this time: a timezone-aware datetime or epoch seconds.
    run_at: dt.datetime | float
    #: Idempotency key: while a job with this ID exists, enqueue changes nothing.
    job_id: str
    #: Metadata for the handler (``job.headers``): text names to text values.
    headers: Mapping[str, str]
    #: At most one pending job per key (see ``Unique``): True derives the key
    #: from the kind and payload, a str is the key, False overrides the
    #: task's default.
    unique: Unique | str | bool
    #: Within its queue, ready jobs lease highest priority first (-10 .. 10;
    #: default: the task's, else 0).
    priority: int
    #: Not started by then, the job is dead-lettered (reason ``expired``)
    #: instead of run: seconds from the store's now, or an aware datetime.
    expires: float | dt.datetime | None
    #: Rate limits that govern when it may start (replace the task's).
    rate_limit: RateLimit | Sequence[RateLimit] | None
    #: Concurrency limits it counts against while leased (replace the task's).
    concurrency_limit: ConcurrencyLimit | Sequence[ConcurrencyLimit] | None


def check_options(
    *, max_retries: int | None = None, timeout: float | None = None, delay: float | None = None
) -> None:
    """Raise ``ValueError`` naming the first option out of range (None: not given)."""
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if delay is not None and not (delay >= 0 and math.isfinite(delay)):
        raise ValueError(f"delay must be finite and >= 0 seconds, got {delay!r}")


def check_headers(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Headers as stored: (name, value) pairs in name order. Raises
    ``ValueError`` when a name or value is not text, a name is empty, or they
    encode to more than :data:`MAX_HEADERS_BYTES`."""
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    pairs = []
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ValueError(f"headers must map non-empty str to str, got {name!r}: {value!r}")
        pairs.append((name, value))
    pairs.sort()
    size = len(encode_headers(tuple(pairs)))
    if size > MAX_HEADERS_BYTES:
        raise ValueError(
            f"headers are {size} bytes encoded, over the {MAX_HEADERS_BYTES}-byte limit"
        )
    return tuple(pairs)


def encode_headers(headers: tuple[tuple[str, str], ...]) -> bytes:
    """Headers as the stores keep them: a JSON object (b'' for none)."""
    if not headers:
        return b""
    return json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False).encode()


def decode_headers(data: bytes | str | None) -> tuple[tuple[str, str], ...]:
    """Stored headers back as pairs; ``ValueError`` when they are not a JSON
    object of text to text."""
    if not data:
        return ()
    value = json.loads(data)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError("headers are not a JSON object of text to text")
    return tuple(sorted(value.items()))


def to_epoch(run_at: dt.datetime | float) -> float:
    """``run_at`` as epoch seconds; a datetime must be timezone-aware and a
    number finite (``ValueError`` otherwise)."""
    if isinstance(run_at, dt.datetime):
        if run_at.tzinfo is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return run_at.timestamp()
    value = float(run_at)
    if not math.isfinite(value):
        raise ValueError(f"run_at must be a finite epoch time, got {run_at!r}")
    return value
