"""Tasks: a handler registered under a kind, and how producers enqueue it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, NoReturn, Protocol, TypeVar, Unpack

import attrs

from ..records._codec import encode_payload
from ..records._errors import PayloadError
from ..records._jobs import EnqueueResult, NewJob, require_field_order
from ..records._options import EnqueueOptions, check_headers, check_options, to_epoch
from ..runtime._tasks import Handler, TaskSpec
from ._handle import HandleHost, JobHandle

P = TypeVar("P")

#: Job IDs a caller gives are at most this long.
MAX_JOB_ID_LENGTH = 200

#: ``hook(kind, headers)``: called for every job a producer builds, with its
#: headers as a dict the hook may add to (a trace id, a tenant).
ProducerHook = Callable[[str, dict[str, str]], None]


require_field_order(
    NewJob,
    ("id", "queue", "kind", "payload", "run_at", "delay", "max_retries", "timeout", "headers"),
    "Task.new_jobs",
)


def new_job_id() -> str:
    """A fresh job ID: 128 random bits as 32 hex digits (the length of a UUID's
    hex, several times cheaper to make than ``uuid.uuid4().hex``)."""
    return os.urandom(16).hex()


class JobSink(HandleHost, Protocol):
    """Where a task's jobs go, and their size limit (the App); handles read
    through it."""

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def producer_hooks(self) -> Sequence[ProducerHook]: ...

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]: ...


@attrs.frozen(eq=False)
class Task(Generic[P]):
    """A registered handler, as producers use it:
    ``await task.enqueue(payload, delay=30)``."""

    app: JobSink
    spec: TaskSpec

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def fn(self) -> Handler:
        return self.spec.fn

    @property
    def payload_type(self) -> Any:
        return self.spec.payload_type

    @property
    def queue(self) -> str:
        return self.spec.queue

    @property
    def max_retries(self) -> int:
        return self.spec.max_retries

    @property
    def timeout(self) -> float:
        return self.spec.timeout

    def new_job(self, payload: P, **options: Unpack[EnqueueOptions]) -> NewJob:
        """Build (and validate) the store record for one job without sending
        it. Raises ``ValueError`` for a bad option, ``PayloadError`` for a
        payload that does not encode or is too large."""
        spec = self.spec
        delay = options.get("delay")
        run_at = options.get("run_at")
        max_retries = options.get("max_retries")
        timeout = options.get("timeout")
        job_id = options.get("job_id")
        check_options(max_retries=max_retries, timeout=timeout, delay=delay)
        if delay is not None and run_at is not None:
            raise ValueError("give either delay or run_at, not both")
        data = encode_payload(payload, spec.payload_type)
        if len(data) > self.app.max_payload_bytes:
            self._too_large(data)
        if job_id is not None and (
            not isinstance(job_id, str) or not job_id or len(job_id) > MAX_JOB_ID_LENGTH
        ):
            raise ValueError(
                f"job_id must be a non-empty string of at most {MAX_JOB_ID_LENGTH} characters"
            )
        headers = options.get("headers")
        return NewJob(
            job_id or new_job_id(),
            options.get("queue") or spec.queue,
            spec.kind,
            data,
            None if run_at is None else to_epoch(run_at),
            delay or 0.0,
            spec.max_retries if max_retries is None else max_retries,
            spec.timeout if timeout is None else timeout,
            self._headers(headers) if headers or self.app.producer_hooks else (),
        )

    def _headers(self, given: Any) -> tuple[tuple[str, str], ...]:
        """The job's headers: ``given``, then what each producer hook adds.
        Raises ValueError for headers that are not text or too large (and
        whatever a hook raises)."""
        if given is not None and not isinstance(given, dict | Mapping):
            check_headers(given)  # raises, naming the type
        headers = dict(given or {})
        for hook in self.app.producer_hooks:
            hook(self.spec.kind, headers)
        return check_headers(headers)

    async def enqueue(self, payload: P, **options: Unpack[EnqueueOptions]) -> JobHandle[Any]:
        """Enqueue one job; returns once the store has it (for Redis: the
        master has it; with ``wait_replicas``, that many replicas too, see the
        README's "Redis Sentinel" on what a failover can lose otherwise).

        With ``job_id`` the call is idempotent: while a job with that ID
        exists, enqueueing it again changes nothing (``created`` is False).
        Raises what :meth:`new_job` raises, and ``StoreError`` when the store
        cannot be reached (then the job may or may not be stored: enqueue it
        again with the same ``job_id`` to be sure of one).

        Returns a :class:`JobHandle` (``await handle.result()``).
        """
        new = self.new_job(payload, **options)
        [result] = await self.app.enqueue_jobs([new])
        return JobHandle.of(self.app, result, new.queue, new.kind)

    async def enqueue_many(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> list[JobHandle[Any]]:
        """Enqueue many jobs of this task in one batch (one store round trip
        per partition). Every payload is checked before any job is sent.
        Returns a handle per job, in order."""
        results = await self.app.enqueue_jobs(self.new_jobs(payloads, delay=delay, queue=queue))
        host, kind, queue = self.app, self.spec.kind, queue or self.spec.queue
        return [
            JobHandle(
                r.job_id, r.created, r.run_at, r.queue_version, r.partition, queue, kind, host
            )
            for r in results
        ]

    def new_jobs(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> list[NewJob]:
        """``new_job`` for many payloads with the same options (the options are
        checked once, not per job: this is the bulk producer's hot loop)."""
        check_options(delay=delay)
        spec = self.spec
        payload_type, limit = spec.payload_type, self.app.max_payload_bytes
        queue, delay = queue or spec.queue, delay or 0.0
        kind, max_retries, timeout = spec.kind, spec.max_retries, spec.timeout
        hooked = bool(self.app.producer_hooks)
        jobs = []
        for payload in payloads:
            data = encode_payload(payload, payload_type)
            if len(data) > limit:
                self._too_large(data)
            headers = self._headers(None) if hooked else ()
            jobs.append(
                NewJob(new_job_id(), queue, kind, data, None, delay, max_retries, timeout, headers)
            )
        return jobs

    def _too_large(self, data: bytes) -> NoReturn:
        raise PayloadError(
            f"payload of {self.kind!r} is {len(data)} bytes, over the "
            f"{self.app.max_payload_bytes}-byte limit"
        )
