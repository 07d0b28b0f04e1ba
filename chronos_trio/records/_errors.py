"""Every error chronos_trio raises on purpose, in one tree under ChronosError.

``except ChronosError`` catches all of them; the subclasses say what failed::

    ChronosError
    ├── StoreError              the store could not be reached or refused an operation
    │   └── TopologyError       a topology change was refused
    ├── PayloadError            a payload could not be encoded or decoded, or is too large
    ├── SkipRetry               raised by a handler: dead-letter this job at once
    ├── Retry                   raised by a handler: run it again after a delay
    ├── RateLimited             raised by a handler: again after a delay, attempt not counted
    ├── JobCancelled            raised by job.check_cancelled() once a run is called off
    ├── SoftTimeLimit           raised in an isolated handler at its timeout (its soft limit)
    ├── IsolationError          isolated handlers' child processes cannot start
    ├── UnknownTask             no task is registered under a kind
    ├── ActorFailed             an actor exceeded its restart intensity
    ├── JobError                a job's outcome, as a producer waiting on it sees it
    │   ├── JobFailed           the job is dead (its last error and attempts)
    │   ├── JobAborted          the job was aborted before it finished
    │   ├── JobNotFound         no such job (never enqueued, or trimmed)
    │   └── ResultExpired       the job succeeded but its result is gone
    └── InspectorError          an admin request could not be carried out
        ├── UnknownQueue
        ├── UnknownJob
        └── ActionRefused

One warning: ``ResultNotKeptWarning`` (a ``UserWarning``), when a task is
registered whose handler has no return annotation.

Errors that are also a builtin category derive from it too (``PayloadError``
is a ``ValueError``, ``UnknownJob`` a ``LookupError``), so existing ``except``
clauses keep working.
"""

from __future__ import annotations


class ChronosError(Exception):
    """Base class of chronos_trio's own errors."""


class StoreError(ChronosError):
    """The store could not be reached or refused an operation."""


class TopologyError(StoreError):
    """A topology change was refused (e.g. completing a non-empty version)."""


class SkipRetry(ChronosError):
    """Raise from a handler to dead-letter the job at once, without retries.

    ``raise SkipRetry("card declined")`` or ``raise SkipRetry(exc) from exc``.
    """


class Retry(ChronosError):
    """Raise from a handler to run the job again ``delay`` seconds from now
    (None: after the task's usual backoff). It counts an attempt like any
    failure: once ``max_retries`` are used up the job is dead.

    ``raise Retry(delay=30)`` or ``raise Retry(30, "upstream busy")``.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None and not (delay >= 0 and delay != float("inf")):
            raise ValueError(f"Retry delay must be a finite number >= 0, got {delay!r}")
        super().__init__(reason or (f"retry in {delay:g}s" if delay is not None else "retry"))
        self.delay = delay
        self.reason = reason


class RateLimited(ChronosError):
    """Raise from a handler when an upstream says "too many requests" (an
    HTTP 429): the job runs again ``retry_after`` seconds from now, and the
    attempt is not counted (it never uses up ``max_retries``). When the job
    has rate limits, each is held back until then too, so the jobs sharing
    it wait as well instead of hammering the upstream.

    ``raise RateLimited(30)`` or ``raise RateLimited(retry_after, "api 429")``.
    """

    def __init__(self, retry_after: float, reason: str = "") -> None:
        if not (retry_after >= 0 and retry_after != float("inf")):
            raise ValueError(
                f"RateLimited retry_after must be a finite number >= 0, got {retry_after!r}"
            )
        super().__init__(reason or f"rate limited: retry in {retry_after:g}s")
        self.retry_after = float(retry_after)
        self.reason = reason


class JobCancelled(ChronosError):
    """Raised by ``job.check_cancelled()`` in a handler whose run was called
    off (timeout, lost lease, shutdown): a plain-function handler running in
    a thread calls it to stop cooperatively (its thread is otherwise
    abandoned, see docs/tasks.md)."""


class SoftTimeLimit(ChronosError):
    """Raised inside an isolated handler (``@app.task(isolate=True)``) when
    its ``timeout`` passes: its soft limit. A plain-function handler gets it
    wherever it is (a signal in the child process's main thread), and may
    catch it to clean up or return early; the worker kills the child
    ``hard_limit_grace`` seconds later if it has not returned by then (the
    attempt then fails as a timeout). Uncaught, the attempt fails with it
    (retried per the task's policy). See docs/isolation.md."""


class IsolationError(ChronosError):
    """The child processes isolated handlers run in cannot be started: the
    app is not importable by its ``module:attribute`` (defined in
    ``__main__``, not a module global), a child failed to import it, or
    did not find a task there. Raised when the worker starts; nothing was
    started then."""


class PayloadError(ChronosError, ValueError):
    """A payload could not be encoded (at enqueue) or decoded (at run time),
    or is too large."""


class UnknownTask(ChronosError, LookupError):
    """No task is registered under that kind."""


class ActorFailed(ChronosError):
    """An actor exceeded its restart intensity; the worker stops."""

    def __init__(self, actor: str, restarts: int, period: float) -> None:
        super().__init__(f"actor {actor!r} crashed {restarts} times within {period:g}s; giving up")
        self.actor = actor
        self.restarts = restarts
        self.period = period


class JobError(ChronosError):
    """What ``handle.result()`` raises when there is no result to give."""

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobFailed(JobError):
    """The job is dead: ``last_error`` says why, after ``attempts`` attempts."""

    def __init__(self, job_id: str, last_error: str, attempts: int) -> None:
        first = (last_error.splitlines() or ["no error recorded"])[0]
        super().__init__(f"job {job_id} failed after {attempts} attempt(s): {first}", job_id)
        self.last_error = last_error
        self.attempts = attempts


class JobAborted(JobError):
    """The job was aborted (``handle.abort()``, ``Inspector.abort``, the
    ``abort`` command) before it finished: it will not run again.
    ``last_error`` is what the store recorded ("aborted", with the reason
    given, if any), after ``attempts`` attempts."""

    def __init__(self, job_id: str, last_error: str, attempts: int) -> None:
        first = (last_error.splitlines() or ["aborted"])[0]
        super().__init__(f"job {job_id} was aborted after {attempts} attempt(s): {first}", job_id)
        self.last_error = last_error
        self.attempts = attempts


class DuplicateJob(JobError):
    """A unique job's key is taken: ``job_id`` is the pending job that holds
    it (raised only when the job's ``Unique`` asks for it)."""

    def __init__(self, job_id: str, key: str) -> None:
        super().__init__(f"a job with unique key {key!r} is pending: {job_id}", job_id)
        self.key = key


class JobNotFound(JobError, LookupError):
    """No job with that ID: never enqueued (in that queue), or trimmed."""


class ScheduleNotStored(ChronosError, ValueError):
    """No stored (run-time) schedule with that id: change, pause, resume and
    remove act only on schedules ``app.dynamic_schedules.add`` stored."""


class ScheduleAlreadyStored(ChronosError, ValueError):
    """``app.dynamic_schedules.add`` of an id already stored: change it, or
    remove it first. Nothing was stored."""


class ResultExpired(JobError):
    """The job succeeded, but its result was kept for ``result_ttl`` seconds
    and that time is over (or its task stores no result)."""


class ResultTimeout(JobError, TimeoutError):
    """The job did not finish within the time its caller waited (it goes on:
    wait again)."""


class InspectorError(ChronosError):
    """An admin request could not be carried out."""


class UnknownQueue(InspectorError, LookupError):
    """No such queue in the store (nor among the app's tasks)."""


class UnknownJob(InspectorError, LookupError):
    """No job with that ID (in that queue)."""


class ActionRefused(InspectorError):
    """The job's current state does not allow the action (e.g. deleting a
    leased job, running a ready job now)."""


class ResultNotKeptWarning(UserWarning):
    """A task was registered whose handler has no return annotation: what it
    returns is not kept (annotate ``-> None`` to say it returns nothing, or
    ``-> T`` to keep its result)."""


def sole_exception(exc: BaseException) -> BaseException:
    """The one exception inside (nested) one-member exception groups, or
    ``exc`` itself when it is not such a group (a nursery wraps a lone
    failure in a group; callers that expect one error want the error)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def first_exception(exc: BaseException) -> BaseException:
    """The first leaf of (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
