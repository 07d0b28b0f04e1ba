"""Tasks: a handler registered under a kind, and how producers enqueue it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, Unpack, overload

import attrs

from ..records import _producing, _workflow
from ..records._attrs_methods import fields_repr
from ..records._codec import encode_payload
from ..records._jobs import EnqueueResult, NewJob
from ..records._options import EnqueueOptions, check_options, check_queue, checked_names
from ..records._producing import ProducerHook as ProducerHook
from ..runtime._context import JobContext
from ..runtime._tasks import TaskSpec
from ._handle import HandleHost, JobHandle

if TYPE_CHECKING:
    from ..records._flow_build import FlowStep

P = TypeVar("P")
T = TypeVar("T")


class JobSink(HandleHost, Protocol):
    """Where a task's jobs go, and their size limit (the App); handles read
    through it."""

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def producer_hooks(self) -> Sequence[ProducerHook]: ...

    async def enqueue_jobs(
        self, jobs: Sequence[NewJob], *, connection: object = None
    ) -> list[EnqueueResult]: ...


@attrs.frozen(eq=False)
class Task(Generic[P]):
    """A registered handler, as producers use it:
    ``await task.enqueue(payload, delay=30)``."""

    __repr__ = fields_repr

    app: JobSink
    spec: TaskSpec

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def fn(self) -> Callable[..., Any]:
        """The handler as registered."""
        return self.spec.handler

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

    @checked_names("workflow step")
    def s(
        self,
        payload: Any = _workflow.FROM_PREVIOUS,
        *,
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        delay: float = 0.0,
    ) -> FlowStep:
        """A step of a workflow (``chain``, ``group``, ``graph``): this task with
        ``payload``, or, without one, its predecessor's result (checked
        against this task's payload type when the workflow is built).
        ``delay``: seconds after its predecessor finished. Raises
        ``TypeError`` for an unknown option name, ``ValueError`` for an
        option value of the wrong type or out of range, ``PayloadError``
        for a payload that does not encode."""
        from ..records._flow_build import FlowStep  # a workflow's builder: on first use

        check_options(max_retries=max_retries, timeout=timeout, delay=delay)
        if queue is not None:
            check_queue(queue)
        spec = self.spec
        data = None
        if payload is not _workflow.FROM_PREVIOUS:
            data = encode_payload(payload, spec.payload_type)
        return FlowStep(
            kind=spec.kind,
            queue=queue or spec.queue,
            payload=data,
            max_retries=spec.max_retries if max_retries is None else max_retries,
            timeout=spec.timeout if timeout is None else timeout,
            delay=delay,
            payload_type=spec.payload_type,
            result_type=spec.result_type,
        )

    def new_job(self, payload: P, **options: Unpack[EnqueueOptions]) -> NewJob:
        """Build (and validate) the store record for one job without sending
        it. Raises ``TypeError`` for an option name ``enqueue`` does not
        take (naming it and the closest valid one), ``ValueError`` for an
        option value of the wrong type or out of range (naming both),
        ``PayloadError`` for a payload that does not encode or is too large
        (see docs/bad-input.md for every option)."""
        app = self.app
        return _producing.new_job(
            self.spec, app.max_payload_bytes, app.producer_hooks, payload, **options
        )

    async def enqueue(
        self, payload: P, *, connection: object = None, **options: Unpack[EnqueueOptions]
    ) -> JobHandle[Any]:
        """Enqueue one job; returns once the store has it (for Redis: the
        master has it; with ``wait_replicas``, that many replicas too, see the
        docs/guarantees.md on what a failover can lose otherwise).

        With ``job_id`` the call is idempotent: while a job with that ID
        exists, enqueueing it again changes nothing (``created`` is False).
        A unique job (``unique=``, or the task's) whose key is taken returns
        the pending job's handle (``created`` False), or raises
        ``DuplicateJob`` when its ``Unique`` says ``raise_duplicate``.
        With ``keep_outcome=True`` the job is stored already marked as
        waited on, in the same atomic step: its outcome stays readable 60 s
        after it ends even when nothing else keeps it, so ``result()``
        called after a fast worker finished it still reads it (a task that
        keeps no result: None, not ``JobNotFound``); a duplicate is left
        untouched. Raises what :meth:`new_job` raises, and ``StoreError`` when the store
        cannot be reached (then the job may or may not be stored: enqueue it
        again with the same ``job_id`` to be sure of one).

        ``connection``: your own database connection (on a PostgreSQL
        store: a psycopg connection, a SQLAlchemy connection or session,
        Django's connection; see docs/postgres.md). The job is written in
        *its* transaction: workers see it once that commits, and it is gone
        if it rolls back. Raises ``MissingCapability`` when the store cannot
        do that, ``TypeError`` for a connection of an unknown kind,
        ``ValueError`` for a closed one; nothing is stored then.

        Returns a :class:`JobHandle` (``await handle.result()``).
        """
        new = self.new_job(payload, **options)
        [result] = await self.app.enqueue_jobs([new], connection=connection)
        _producing.check_duplicate(new, result)
        return JobHandle.of(self.app, result, new.queue, new.kind)

    async def enqueue_many(
        self,
        payloads: Iterable[P],
        *,
        delay: float | None = None,
        queue: str | None = None,
        connection: object = None,
    ) -> list[JobHandle[Any]]:
        """Enqueue many jobs of this task in one batch (one store round trip
        per partition). Every payload is checked before any job is sent.
        Returns a handle per job, in order. ``connection``: as :meth:`enqueue`
        (the whole batch in your transaction)."""
        jobs = self._new_job_batch(payloads, delay=delay, queue=queue)
        results = await self.app.enqueue_jobs(jobs, connection=connection)
        host, kind, queue = self.app, self.spec.kind, queue or self.spec.queue
        return [
            JobHandle(r.job_id, r.created, r.run_at, r.placement, queue, kind, host)
            for r in results
        ]

    def new_jobs(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> list[NewJob]:
        """``new_job`` for many payloads with the same options (the options are
        checked once, not per job: this is the bulk producer's hot loop)."""
        app = self.app
        return _producing.new_jobs(
            self.spec, app.max_payload_bytes, app.producer_hooks, payloads, delay=delay, queue=queue
        )

    def _new_job_batch(
        self, payloads: Iterable[P], *, delay: float | None = None, queue: str | None = None
    ) -> Sequence[NewJob]:
        """:meth:`new_jobs`' jobs, plain ones as a ``JobBatch`` (columns: no
        record built unless a store reads one; see ``records._job_batch``).
        The producers outside Trio call it too, when they have it."""
        app = self.app
        return _producing.new_job_batch(
            self.spec, app.max_payload_bytes, app.producer_hooks, payloads, delay=delay, queue=queue
        )


class TaskDecorator(Protocol):
    """What ``App.task(kind, ...)`` returns: applied to a handler, it
    registers it and returns its :class:`Task`, typed by the handler's
    payload parameter for a type checker (``Task[SendEmail]`` for
    ``async def send(args: SendEmail, job: JobContext)``), in each of the
    handler shapes docs/tasks.md lists. A payload annotated ``Any`` after a
    ``JobContext`` parameter reads as ``Task[JobContext]``: annotate the
    payload, or put it first."""

    @overload
    def __call__(self, fn: Callable[[T, JobContext], Any], /) -> Task[T]: ...
    @overload
    def __call__(self, fn: Callable[[JobContext, T], Any], /) -> Task[T]: ...
    @overload
    def __call__(self, fn: Callable[[T], Any], /) -> Task[T]: ...
    @overload
    def __call__(self, fn: Callable[..., Any], /) -> Task[Any]: ...
