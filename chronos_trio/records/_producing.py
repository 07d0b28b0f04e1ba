"""What every producer shares, in Trio or not: building a job's store record
from a payload and options (validation and encoding), and reading a job's
outcome as its typed result or the error that says why there is none.

``Task.new_job`` / ``Task.new_jobs`` and ``JobHandle`` (``chronos_trio.app``)
and the producers outside Trio (``chronos_trio.producers``) all call these,
so a job is checked, encoded and decoded the same way wherever it is made.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, Unpack

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._codec import batch_encoder, cached_payload_encoder, decode_payload, payload_encoder
from ._control import ControlDefaults, job_control
from ._errors import (
    DuplicateJob,
    JobAborted,
    JobFailed,
    JobNotFound,
    PayloadError,
    ResultExpired,
    ResultTimeout,
)
from ._job_batch import JobBatch
from ._jobs import EnqueueResult, JobOutcome, JobRef, JobState, NewJob, require_field_order
from ._options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT,
    ENQUEUE_OPTIONS,
    EnqueueOptions,
    check_bool,
    check_headers,
    check_options,
    check_queue,
    to_epoch,
    unknown_options,
)
from ._placement import Placement
from ._unique import Unique, resolve, unique_of

#: Job IDs a caller gives are at most this long.
MAX_JOB_ID_LENGTH = 200
#: Payloads larger than this are refused at enqueue time (the store keeps them
#: in memory; big blobs belong in object storage, with a key in the payload).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: A single store wait lasts at most this long; a longer (or endless) wait
#: is several, so a waiter never holds one registration for days.
WAIT_CHUNK = 600.0

require_field_order(
    NewJob,
    (
        "id",
        "queue",
        "kind",
        "payload",
        "run_at",
        "delay",
        "max_retries",
        "timeout",
        "headers",
        "unique",
        "id_given",
        "then",
        "control",
        "keep_outcome",
    ),
    "records._producing.new_jobs",
)

#: ``hook(kind, headers)``: called for every job a producer builds, with its
#: headers as a dict the hook may add to (a trace id, a tenant).
ProducerHook = Callable[[str, dict[str, str]], None]


#: The enqueue options that make a job's flow control (``records._control``).
_CONTROL_OPTIONS = frozenset({"priority", "expires", "rate_limit", "concurrency_limit"})


def new_job_id() -> str:
    """A fresh job ID: 128 random bits as 32 hex digits (the length of a UUID's
    hex, several times cheaper to make than ``uuid.uuid4().hex``)."""
    return os.urandom(16).hex()


class TaskDefaults(Protocol):
    """What a task contributes to its jobs (a ``TaskSpec`` is one)."""

    @property
    def kind(self) -> str: ...
    @property
    def payload_type(self) -> Any: ...
    @property
    def queue(self) -> str: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def unique(self) -> Unique | None: ...
    @property
    def control(self) -> ControlDefaults | None: ...


@attrs.frozen
class KindDefaults:
    """The defaults of a kind this program does not register (a producer
    that enqueues by name): JSON-able or bytes payloads, the default queue,
    retries and timeout."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    kind: str
    payload_type: Any = Any
    queue: str = DEFAULT_QUEUE
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    unique: Unique | None = None
    control: ControlDefaults | None = None


def job_headers(
    kind: str, given: Any, hooks: Sequence[ProducerHook]
) -> tuple[tuple[str, str], ...]:
    """A job's headers: ``given``, then what each producer hook adds.
    Raises ValueError for headers that are not text or too large (and
    whatever a hook raises)."""
    if given is not None and not isinstance(given, dict | Mapping):
        check_headers(given)  # raises, naming the type
    headers = dict(given or {})
    for hook in hooks:
        hook(kind, headers)
    return check_headers(headers)


def new_job(
    spec: TaskDefaults,
    max_payload_bytes: int,
    hooks: Sequence[ProducerHook],
    payload: Any,
    **options: Unpack[EnqueueOptions],
) -> NewJob:
    """Build (and validate) the store record for one job of ``spec``'s task,
    its headers passed through ``hooks``. Raises ``TypeError`` for an
    option name ``enqueue`` does not take (naming it, with the closest
    valid one), ``ValueError`` for an option value of the wrong type or out
    of range (naming the option and the value) or bad headers (``TypeError``
    for limits that are not limits), ``PayloadError`` for a payload that
    does not encode or is larger than ``max_payload_bytes``, and what a hook
    raises."""
    if options:
        # One set test: the per-call cost of refusing a misspelled name.
        if not ENQUEUE_OPTIONS.issuperset(options):
            raise unknown_options(options, ENQUEUE_OPTIONS, "enqueue")
        return _new_job_with(spec, max_payload_bytes, hooks, payload, options)
    data = cached_payload_encoder(spec.payload_type)(payload)
    if len(data) > max_payload_bytes:
        _too_large(spec.kind, data, max_payload_bytes)
    unique, control = spec.unique, spec.control
    return NewJob(
        new_job_id(), spec.queue, spec.kind, data, None, 0.0, spec.max_retries, spec.timeout,
        job_headers(spec.kind, None, hooks) if hooks else (),
        None if unique is None else resolve(unique, spec.kind, data), False, None,
        None if control is None else job_control(control, spec.kind, payload, options),
    )  # fmt: skip


def _new_job_with(
    spec: TaskDefaults,
    max_payload_bytes: int,
    hooks: Sequence[ProducerHook],
    payload: Any,
    options: EnqueueOptions,
) -> NewJob:
    """:func:`new_job` with options (their names checked): every option is
    checked before the payload is encoded."""
    delay = options.get("delay")
    run_at = options.get("run_at")
    max_retries = options.get("max_retries")
    timeout = options.get("timeout")
    job_id = options.get("job_id")
    queue = options.get("queue")
    check_options(max_retries=max_retries, timeout=timeout, delay=delay)
    if queue is not None:
        check_queue(queue)
    if delay is not None and run_at is not None:
        raise ValueError("give either delay or run_at, not both")
    if job_id is not None and (
        not isinstance(job_id, str) or not job_id or len(job_id) > MAX_JOB_ID_LENGTH
    ):
        raise ValueError(
            f"job_id must be a non-empty string of at most {MAX_JOB_ID_LENGTH} characters, "
            f"got {job_id!r:.300}"
        )
    at = None if run_at is None else to_epoch(run_at)
    unique = unique_of(options["unique"]) if "unique" in options else spec.unique
    data = cached_payload_encoder(spec.payload_type)(payload)
    if len(data) > max_payload_bytes:
        _too_large(spec.kind, data, max_payload_bytes)
    headers = options.get("headers")
    keep_outcome = options.get("keep_outcome", False)
    if keep_outcome is not False:
        check_bool("keep_outcome", keep_outcome)
    return NewJob(
        job_id or new_job_id(),
        queue or spec.queue,
        spec.kind,
        data,
        at,
        delay or 0.0,
        spec.max_retries if max_retries is None else max_retries,
        spec.timeout if timeout is None else timeout,
        job_headers(spec.kind, headers, hooks) if headers or hooks else (),
        None if unique is None else resolve(unique, spec.kind, data),
        job_id is not None,
        None,
        job_control(spec.control, spec.kind, payload, options)
        if spec.control is not None or _CONTROL_OPTIONS.intersection(options)
        else None,
        keep_outcome,
    )


def new_jobs(
    spec: TaskDefaults,
    max_payload_bytes: int,
    hooks: Sequence[ProducerHook],
    payloads: Iterable[Any],
    *,
    delay: float | None = None,
    queue: str | None = None,
) -> list[NewJob]:
    """:func:`new_job` for many payloads with the same options (the options
    are checked once, not per job: this is the bulk producer's hot loop).
    Every payload is checked before any record is returned."""
    jobs = new_job_batch(spec, max_payload_bytes, hooks, payloads, delay=delay, queue=queue)
    return jobs.jobs() if isinstance(jobs, JobBatch) else jobs


def new_job_batch(
    spec: TaskDefaults,
    max_payload_bytes: int,
    hooks: Sequence[ProducerHook],
    payloads: Iterable[Any],
    *,
    delay: float | None = None,
    queue: str | None = None,
) -> JobBatch | list[NewJob]:
    """:func:`new_jobs`' jobs, as a :class:`JobBatch` (columns, no record
    built) when they are plain (the task has no unique key or flow
    control); else as :func:`new_jobs`' list. The same checks, the same errors in the same
    order (a payload's encoding, then its size, then the hooks, job by
    job), the same jobs."""
    check_options(delay=delay)
    if queue is not None:
        check_queue(queue)
    limit = max_payload_bytes
    queue, delay = queue or spec.queue, delay or 0.0
    kind, max_retries, timeout = spec.kind, spec.max_retries, spec.timeout
    unique = spec.unique
    defaults = spec.control
    values = payloads if isinstance(payloads, list | tuple) else list(payloads)
    # one system call for every ID of the batch (each is new_job_id's 128 bits)
    hex_ids = os.urandom(16 * len(values)).hex()
    # all at once when it can vouch for the same bytes; else one by one
    # (each payload's own error, in order: encoding, size, hooks)
    datas = batch_encoder(spec.payload_type)(values)
    if unique is None and defaults is None:
        headers: list[tuple[tuple[str, str], ...]] | None = None
        if datas is None or hooks or (datas and max(map(len, datas)) > limit):
            datas, headers = _plain_columns(kind, limit, hooks, spec.payload_type, values, datas)
        return JobBatch(
            [hex_ids[k : k + 32] for k in range(0, len(hex_ids), 32)],
            datas,
            headers,
            queue=queue,
            kind=kind,
            delay=delay,
            max_retries=max_retries,
            timeout=timeout,
        )
    encode = None if datas is not None else payload_encoder(spec.payload_type)
    jobs = []
    for n, payload in enumerate(values):
        data = datas[n] if encode is None else encode(payload)  # type: ignore[index]
        if len(data) > limit:
            _too_large(kind, data, limit)
        given = job_headers(kind, None, hooks) if hooks else ()
        job = NewJob(
            hex_ids[32 * n : 32 * n + 32], queue, kind, data, None, delay, max_retries, timeout,
            given, None if unique is None else resolve(unique, kind, data), False, None,
            None if defaults is None else job_control(defaults, kind, payload, {}),
        )  # fmt: skip
        jobs.append(job)
    return jobs


def _plain_columns(
    kind: str,
    limit: int,
    hooks: Sequence[ProducerHook],
    payload_type: Any,
    values: Sequence[Any],
    datas: list[bytes] | None,
) -> tuple[list[bytes], list[tuple[tuple[str, str], ...]] | None]:
    """Plain jobs' payloads (``datas`` when encoded already, else encoded
    here) and headers (None without hooks), job by job: its encoding, its
    size, its hooks (the order :func:`new_jobs` refuses them in)."""
    encode = None if datas is not None else payload_encoder(payload_type)
    out: list[bytes] = []
    headers: list[tuple[tuple[str, str], ...]] | None = [] if hooks else None
    for n, payload in enumerate(values):
        data = datas[n] if encode is None else encode(payload)  # type: ignore[index]
        if len(data) > limit:
            _too_large(kind, data, limit)
        if headers is not None:
            headers.append(job_headers(kind, None, hooks))
        out.append(data)
    return out, headers


def check_duplicate(new: NewJob, result: EnqueueResult) -> None:
    """Raise ``DuplicateJob`` when ``new`` is a unique job that asks for it
    and its key was held by another pending job (``result`` says which)."""
    unique = new.unique
    if (
        unique is not None
        and unique.raise_duplicate
        and unique.mode != "debounce"
        and not result.created
        and result.job_id != new.id
    ):
        raise DuplicateJob(result.job_id, unique.key or "")


def _too_large(kind: str, data: bytes, limit: int) -> NoReturn:
    raise PayloadError(f"payload of {kind!r} is {len(data)} bytes, over the {limit}-byte limit")


# -- handles and outcomes ------------------------------------------------------------
# Not frozen, as its subclasses: a frozen attrs class sets each field through
# object.__setattr__, four times the cost of this one's __init__, and a bulk
# enqueue makes a handle per job. Treat them as read-only.
@attrs.define  # equality: fields_eq below (eq=True would make attrs generate its own)
class HandleFields:
    """The fields of every job handle (``JobHandle`` and the producers'):
    those of the :class:`~chronos_trio.EnqueueResult` it came from, and the
    job's queue (None: not known, looked up) and kind."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    job_id: str
    created: bool
    run_at: float
    #: Where the store keeps the job (opaque, see ``records._placement``);
    #: None: not known (a handle made from a job ID), the store finds it.
    placement: Placement | None
    queue: str | None
    kind: str

    @property
    def ref(self) -> JobRef:
        return JobRef(self.job_id, self.queue, self.placement)


def handle_fields(
    result: EnqueueResult, queue: str | None, kind: str
) -> tuple[str, bool, float, Placement | None, str | None, str]:
    """The :class:`HandleFields` of an enqueued job, in order."""
    return (result.job_id, result.created, result.run_at, result.placement, queue, kind)


#: ``result_type_of(kind)``: whether the kind is registered, and its task's
#: result type (None: it keeps no result). The App's ``result_type_of``.
ResultTypeOf = Callable[[str], tuple[bool, Any]]


def unknown_kind(kind: str) -> tuple[bool, Any]:
    """:data:`ResultTypeOf` of a producer that registers no task."""
    return False, None


def check_wait_timeout(timeout: float | None) -> None:
    """``ValueError`` for a wait timeout that is negative or NaN."""
    if timeout is not None and (math.isnan(timeout) or timeout < 0):
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")


def result_of(found: JobOutcome, job_id: str, kind: str, result_type_of: ResultTypeOf) -> Any:
    """The result of the finished job ``found``, decoded by its task's return
    annotation (``kind`` names the task when the record does not).

    Raises JobFailed when it is dead, JobAborted when it was aborted,
    ResultExpired when its result is no longer kept (or none is kept for a
    task that returns one), PayloadError when the stored result does not
    decode as its result type. A kind that
    is not registered reads JSON when the result is JSON, else bytes."""
    if found.state is JobState.DEAD:
        raise JobFailed(job_id, found.last_error, found.attempts)
    if found.state is JobState.ABORTED:
        raise JobAborted(job_id, found.last_error, found.attempts)
    if found.result_expired:
        raise ResultExpired(
            f"job {job_id} succeeded, but its result has expired (kept for its task's result_ttl)",
            job_id,
        )
    known, result_type = result_type_of(found.kind or kind)
    if found.result is None:
        if not known or result_type is None:
            return None  # the task keeps no result
        raise ResultExpired(
            f"job {job_id} succeeded, but no result is kept for it "
            "(its task's result_ttl is 0, or it ran under another return type)",
            job_id,
        )
    if not known:
        # a kind this program does not register: JSON if it is, else bytes
        try:
            return decode_payload(found.result, Any)
        except PayloadError:
            return found.result
    try:
        return decode_payload(found.result, result_type)
    except PayloadError as exc:
        raise PayloadError(f"result of job {job_id}: {exc}") from exc


def not_found(job_id: str, queue: str | None) -> JobNotFound:
    """The error for a job the store does not have."""
    where = f" in queue {queue!r}" if queue is not None else ""
    return JobNotFound(
        f"no job {job_id}{where}: never enqueued, or finished and no longer kept "
        "(its result expired, or nothing was kept)",
        job_id,
    )


def timed_out(job_id: str, timeout: float, found: JobOutcome) -> ResultTimeout:
    """The error for a job that did not finish within ``timeout`` seconds."""
    return ResultTimeout(
        f"job {job_id} did not finish within {timeout:g}s "
        f"(it is {found.state}, attempt {found.attempts})",
        job_id,
    )
