"""Job handles: what ``enqueue`` returns and ``app.job(job_id)`` makes, to
read a job's status and wait for its typed result."""

from __future__ import annotations

import math
from typing import Any, Generic, Protocol, TypeVar

import attrs
import trio

from ..records._codec import decode_payload
from ..records._errors import JobFailed, JobNotFound, PayloadError, ResultExpired, ResultTimeout
from ..records._jobs import EnqueueResult, JobOutcome, JobRef, JobState
from ..store._roles import ResultRole, require_roles

R = TypeVar("R")

#: A single store wait lasts at most this long; a longer (or endless) wait
#: is several, so a waiter never holds one registration for days.
_WAIT_CHUNK = 600.0


class HandleHost(Protocol):
    """What a handle reads through (the App): its store, and the result type
    of a kind (None: the kind stores no result, or is not registered here)."""

    @property
    def store(self) -> Any: ...

    def result_type_of(self, kind: str) -> tuple[bool, Any]: ...


# Not frozen: a frozen attrs class sets each field through object.__setattr__,
# four times the cost of this one's __init__, and a bulk enqueue makes a
# handle per job. Treat it as read-only.
@attrs.define(eq=True)
class JobHandle(Generic[R]):
    """One job, as its producer holds it: the fields of the
    :class:`~chronos_trio.EnqueueResult` it came from (``job_id``,
    ``created``, ``run_at``, ``queue_version``, ``partition``), its ``queue``
    and ``kind``, and :meth:`status` / :meth:`result` to follow it.

    A handle is a plain value: make one for any job ID with
    ``app.job(job_id)`` in another process (it then finds the job's queue
    and partition itself). Its methods need a store offering
    :class:`~chronos_trio.store.ResultRole` (MemoryStore and RedisStore do)."""

    job_id: str
    created: bool
    run_at: float
    queue_version: int | None
    partition: int | None
    queue: str | None
    kind: str
    host: HandleHost = attrs.field(eq=False, repr=False)

    @classmethod
    def of(cls, host: HandleHost, result: EnqueueResult, queue: str, kind: str) -> JobHandle[Any]:
        return cls(
            result.job_id,
            result.created,
            result.run_at,
            result.queue_version,
            result.partition,
            queue,
            kind,
            host,
        )

    @property
    def ref(self) -> JobRef:
        return JobRef(self.job_id, self.queue, self.queue_version, self.partition)

    def _store(self) -> ResultRole:
        store = self.host.store
        require_roles(store, ResultRole, what="following a job")
        return store  # type: ignore[no-any-return]

    async def status(self) -> JobOutcome:
        """Where the job stands now (state, attempts, last error, result bytes).

        Raises JobNotFound when no such job exists (never enqueued in that
        queue, or finished and no longer kept), StoreError when the store
        cannot be reached."""
        found = await self._store().outcome(self.ref)
        if found is None:
            raise self._not_found()
        return found

    async def result(self, timeout: float | None = None) -> R:
        """The job's result once it succeeded, decoded by its task's return
        annotation (None for a task that keeps no result). Waits at most
        ``timeout`` seconds (None: as long as it takes); the store wakes the
        waiter when the job finishes, nothing polls.

        Raises JobFailed (with ``last_error`` and ``attempts``) when the job
        is dead; ResultTimeout when it has not finished in time (it goes on:
        call again); ResultExpired when it succeeded but its result is no
        longer kept; JobNotFound when no such job exists (never enqueued, or
        finished and trimmed); PayloadError when the stored result does not
        decode as the task's result type; StoreError when the store cannot be
        reached; ValueError for a negative or NaN timeout."""
        if timeout is not None and (math.isnan(timeout) or timeout < 0):
            raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
        store = self._store()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        while True:
            left = deadline - trio.current_time()
            found = await store.wait_outcome(self.ref, timeout=max(0.0, min(left, _WAIT_CHUNK)))
            if found is None:
                raise self._not_found()
            if found.finished:
                return self._decode(found)
            if trio.current_time() >= deadline:
                raise ResultTimeout(
                    f"job {self.job_id} did not finish within {timeout:g}s "
                    f"(it is {found.state}, attempt {found.attempts})",
                    self.job_id,
                )

    def _decode(self, found: JobOutcome) -> R:
        if found.state is JobState.DEAD:
            raise JobFailed(self.job_id, found.last_error, found.attempts)
        if found.result_expired:
            raise ResultExpired(
                f"job {self.job_id} succeeded, but its result has expired "
                "(kept for its task's result_ttl)",
                self.job_id,
            )
        known, result_type = self.host.result_type_of(found.kind or self.kind)
        if found.result is None:
            if not known or result_type is None:
                return None  # type: ignore[return-value]  # the task keeps no result
            raise ResultExpired(
                f"job {self.job_id} succeeded, but no result is kept for it "
                "(its task's result_ttl is 0, or it ran under another return type)",
                self.job_id,
            )
        if not known:
            # a kind this program does not register: JSON if it is, else bytes
            try:
                return decode_payload(found.result, Any)  # type: ignore[no-any-return]
            except PayloadError:
                return found.result  # type: ignore[return-value]
        try:
            return decode_payload(found.result, result_type)  # type: ignore[no-any-return]
        except PayloadError as exc:
            raise PayloadError(f"result of job {self.job_id}: {exc}") from exc

    def _not_found(self) -> JobNotFound:
        where = f" in queue {self.queue!r}" if self.queue is not None else ""
        return JobNotFound(
            f"no job {self.job_id}{where}: never enqueued, or finished and no longer kept "
            "(its result expired, or nothing was kept)",
            self.job_id,
        )
