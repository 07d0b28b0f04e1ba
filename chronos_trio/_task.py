"""Tasks: a handler registered under a kind, with its payload type and defaults."""

from __future__ import annotations

import datetime as dt
import inspect
import math
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, get_type_hints

import attrs

from ._codec import encode_payload
from ._context import JobContext
from ._errors import PayloadError
from ._job import EnqueueResult, NewJob, require_field_order

if TYPE_CHECKING:
    from ._app import App

P = TypeVar("P")
Handler = Callable[[P, JobContext], Awaitable[object]]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 30.0


def payload_type_of(fn: Callable[..., Any]) -> Any:
    """The annotated type of a handler's first parameter (Any if missing)."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise TypeError(
            f"handler {fn.__qualname__} must take (payload, job_context), "
            f"it takes {len(params)} parameter(s)"
        )
    try:
        hints = get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to raw JSON
        hints = {}
    return hints.get(params[0].name, Any)


require_field_order(
    NewJob,
    ("id", "queue", "kind", "payload", "run_at", "delay", "max_retries", "timeout"),
    "Task.new_jobs",
)


def new_job_id() -> str:
    """A fresh job ID: 128 random bits as 32 hex digits (the length of a UUID's
    hex, several times cheaper to make than ``uuid.uuid4().hex``)."""
    return os.urandom(16).hex()


def check_options(
    *, max_retries: int | None = None, timeout: float | None = None, delay: float | None = None
) -> None:
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if delay is not None and not (delay >= 0 and math.isfinite(delay)):
        raise ValueError(f"delay must be finite and >= 0 seconds, got {delay!r}")


def to_epoch(run_at: dt.datetime | float) -> float:
    if isinstance(run_at, dt.datetime):
        if run_at.tzinfo is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return run_at.timestamp()
    value = float(run_at)
    if not math.isfinite(value):
        raise ValueError(f"run_at must be a finite epoch time, got {run_at!r}")
    return value


@attrs.define(eq=False)
class Task(Generic[P]):
    """A registered handler. Call ``await task.enqueue(payload, delay=30)``."""

    app: App
    kind: str
    fn: Handler[P]
    payload_type: Any
    queue: str = DEFAULT_QUEUE
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT

    def new_job(
        self,
        payload: P,
        *,
        delay: float | None = None,
        run_at: dt.datetime | float | None = None,
        job_id: str | None = None,
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
    ) -> NewJob:
        """Build (and validate) the store record for one job without sending it."""
        check_options(max_retries=max_retries, timeout=timeout, delay=delay)
        if delay is not None and run_at is not None:
            raise ValueError("give either delay or run_at, not both")
        data = encode_payload(payload, self.payload_type)
        if len(data) > self.app.max_payload_bytes:
            self._too_large(data)
        if job_id is not None and (not job_id or len(job_id) > 200):
            raise ValueError("job_id must be a non-empty string of at most 200 characters")
        return NewJob(
            id=job_id or new_job_id(),
            queue=queue or self.queue,
            kind=self.kind,
            payload=data,
            run_at=None if run_at is None else to_epoch(run_at),
            delay=delay or 0.0,
            max_retries=self.max_retries if max_retries is None else max_retries,
            timeout=self.timeout if timeout is None else timeout,
        )

    async def enqueue(
        self,
        payload: P,
        *,
        delay: float | None = None,
        run_at: dt.datetime | float | None = None,
        job_id: str | None = None,
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
    ) -> EnqueueResult:
        """Enqueue one job; returns once the store has it (durably, for Redis).

        With ``job_id`` the call is idempotent: while a job with that ID
        exists, enqueueing it again changes nothing (``created`` is False).
        """
        job = self.new_job(
            payload,
            delay=delay,
            run_at=run_at,
            job_id=job_id,
            queue=queue,
            max_retries=max_retries,
            timeout=timeout,
        )
        [result] = await self.app.enqueue_jobs([job])
        return result

    async def enqueue_many(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> list[EnqueueResult]:
        """Enqueue many jobs of this task in one batch (one store round trip
        per partition). Every payload is checked before any job is sent."""
        return await self.app.enqueue_jobs(self.new_jobs(payloads, delay=delay, queue=queue))

    def new_jobs(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> list[NewJob]:
        """``new_job`` for many payloads with the same options (the options are
        checked once, not per job: this is the bulk producer's hot loop)."""
        check_options(delay=delay)
        payload_type, limit = self.payload_type, self.app.max_payload_bytes
        queue, delay = queue or self.queue, delay or 0.0
        kind, max_retries, timeout = self.kind, self.max_retries, self.timeout
        jobs = []
        for payload in payloads:
            data = encode_payload(payload, payload_type)
            if len(data) > limit:
                self._too_large(data)
            jobs.append(NewJob(new_job_id(), queue, kind, data, None, delay, max_retries, timeout))
        return jobs

    def _too_large(self, data: bytes) -> NoReturn:
        raise PayloadError(
            f"payload of {self.kind!r} is {len(data)} bytes, over the "
            f"{self.app.max_payload_bytes}-byte limit"
        )
