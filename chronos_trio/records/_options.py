"""A job's options as producers give them, their defaults and their checks."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

# The checkers live in ._checks (which ._control imports too, and this
# module's annotations name ._control): imported from here like the rest.
from ._checks import check_bool as check_bool
from ._checks import check_positive_int as check_positive_int
from ._checks import check_seconds as check_seconds
from ._checks import check_text as check_text
from ._checks import is_int as is_int
from ._checks import is_number as is_number

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._control import ConcurrencyLimit, RateLimit
    from ._unique import Unique

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 30.0
#: A job's headers, encoded as JSON, are at most this long.
MAX_HEADERS_BYTES = 8192

F = TypeVar("F", bound=Callable[..., Any])


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
    #: Store the job already marked as waited on: once it ends, its outcome
    #: stays readable 60 s even when nothing else keeps it (a task that
    #: returns None, no retention), so ``result()`` called after it ended
    #: still reads it (without the option: ``JobNotFound``). For a caller
    #: that will wait on the job it enqueues (default False).
    keep_outcome: bool


#: The names ``enqueue`` takes (every key of :class:`EnqueueOptions`).
ENQUEUE_OPTIONS: frozenset[str] = frozenset(EnqueueOptions.__optional_keys__)
#: The names a schedule takes for its jobs (every key of :class:`JobDefaults`).
JOB_DEFAULT_OPTIONS: frozenset[str] = frozenset(JobDefaults.__optional_keys__)


def unknown_options(
    given: Iterable[str],
    valid: Iterable[str],
    what: str,
    *,
    unlisted: Iterable[str] = (),
    also: str = "",
) -> TypeError:
    """The error for option names not among ``valid`` (nor ``unlisted``): it
    names each, with the closest valid name when one is close (a
    misspelling), and every valid name. ``what`` says whose options they
    are ("enqueue", "worker"). ``unlisted`` names are valid too, and may be
    the close match, but are not listed (too many: redis-py's); ``also``
    describes them after the list."""
    import difflib  # only on this error path

    known = sorted(valid)
    candidates = sorted({*known, *unlisted})
    unknown = sorted(set(given) - set(candidates))
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        parts.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return TypeError(
        f"unknown {what} option{'s' if len(unknown) > 1 else ''} {', '.join(parts)}; "
        f"valid: {', '.join(known)}{also}"
    )


def checked_names(what: str, *extra: Iterable[str]) -> Callable[[F], F]:
    """Decorate a function taking keyword options so that an unknown name
    raises :func:`unknown_options`'s ``TypeError`` (a close match, and the
    valid names), not Python's bare "unexpected keyword argument". The
    valid names, read once here, are the function's keyword-only parameters
    and ``extra`` (what its ``**options`` take); its other parameters may
    be passed by name too. Costs one set test per call with keywords: for
    registration-time calls, not a per-job path."""

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters.values()
        listed = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY).union(*extra)
        allowed = listed.union(
            p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"
        )

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs and not allowed.issuperset(kwargs):
                raise unknown_options(set(kwargs) - allowed, listed, what)
            return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


#: The longest queue name (characters): it is shown in every table, typed
#: on command lines and carried in keys and URLs.
MAX_QUEUE_LENGTH = 200
#: Unicode categories no queue name may hold: control, format (bidi
#: overrides, zero-width), surrogate, and line and paragraph separators:
#: a name holding one cannot be shown or typed as it is.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: Names already found good (a few per app), so the check costs one set
#: lookup per enqueue, not a walk over the name; bounded.
_GOOD_QUEUES: set[str] = set()
_GOOD_QUEUES_MAX = 4096


def check_queue(queue: object) -> str:
    """``queue`` if it is a name that can be shown and typed safely, else
    ``ValueError`` saying what is wrong and what to do: a non-empty string
    of at most :data:`MAX_QUEUE_LENGTH` characters, with no whitespace at
    its ends, no space but U+0020, and no control, format (bidi, zero-width)
    or separator character. Any other character (braces, colons, slashes,
    ``%``, non-Latin letters) is fine: every store escapes or quotes it in
    its keys, and the dashboard in its URLs."""
    if isinstance(queue, str) and queue in _GOOD_QUEUES:  # the hot path: a name seen before
        return queue
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"queue must be a non-empty string, got {queue!r}")
    if len(queue) > MAX_QUEUE_LENGTH:
        raise ValueError(
            f"queue name is {len(queue)} characters long, over the {MAX_QUEUE_LENGTH}-character "
            f"limit: give a shorter name (got {queue[:40]!r}...)"
        )
    if queue != queue.strip():
        raise ValueError(
            f"queue name {queue!r} has whitespace at an end: remove it ({queue.strip()!r})"
        )
    for at, char in enumerate(queue):
        category = unicodedata.category(char)
        if category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " "):
            raise ValueError(
                f"queue name {queue!r} holds {unicodedata.name(char, 'a control character')} "
                f"(U+{ord(char):04X}) at position {at}, which cannot be shown or typed safely: "
                "use letters, digits, spaces and punctuation"
            )
    if len(_GOOD_QUEUES) < _GOOD_QUEUES_MAX:
        _GOOD_QUEUES.add(queue)
    return queue


def check_options(
    *, max_retries: int | None = None, timeout: float | None = None, delay: float | None = None
) -> None:
    """Raise ``ValueError`` naming the first option of the wrong type or
    out of range, and its value (None: not given)."""
    if max_retries is not None and (not is_int(max_retries) or max_retries < 0):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if timeout is not None:
        check_seconds("timeout", timeout)
    if delay is not None:
        check_seconds("delay", delay, zero=True)


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
    if not (is_number(run_at) and math.isfinite(run_at)):
        raise ValueError(
            f"run_at must be an aware datetime or finite epoch seconds, got {run_at!r}"
        )
    return float(run_at)
