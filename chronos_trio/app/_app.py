"""The App: one importable object holding the store, the tasks and the schedules.

Every entry point (embedded worker, CLI worker, inspector, producer) starts
from an App, so ``python -m chronos_trio worker module:app`` needs nothing else.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, cast

import trio

from ..records._control import ConcurrencyLimit, RateLimit, control_defaults
from ..records._errors import ResultNotKeptWarning
from ..records._jobs import EnqueueResult, NewJob
from ..records._options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT,
    JOB_DEFAULT_OPTIONS,
    EnqueueOptions,
    JobDefaults,
    check_bool,
    check_options,
    check_positive_int,
    check_queue,
    check_seconds,
    check_text,
    checked_names,
)
from ..records._producing import DEFAULT_MAX_PAYLOAD_BYTES, job_headers, new_job_id
from ..records._retry import RetryPolicy
from ..records._unique import Unique, unique_of
from ..runtime._config import WorkerConfig
from ..runtime._metrics import Metrics
from ..runtime._registry import DeadLetterHook, Lifespan, Middleware, Registry
from ..runtime._schedule import MisfirePolicy, Schedule
from ..runtime._tasks import DEFAULT_RESULT_TTL, TaskSpec
from ..store import Store, StoreRole, WorkerRole, WorkflowRole, open_store, require_roles
from ..store._offers import check_jobs
from ..store._schemes import redact
from ..store._transactional import transactional_store
from ..worker import Worker
from ._batch import Batch, batch_flow, member_id
from ._dynamic_schedules import DynamicSchedules
from ._handle import GroupEnd, JobHandle, Workflow
from ._handlers import inspect_handler
from ._schedules import build_schedule, check_unique
from ._task import ProducerHook, Task, TaskDecorator

if TYPE_CHECKING:
    from ..records._flow_build import Buildable, Chain, Dag, FlowStep, Group
    from ..records._flow_start import FlowStarts, WorkflowStart
    from ._inspector import Inspector

P = TypeVar("P")


class App:
    """Holds the store, the task registry, schedules and hooks.

    ``App()`` uses an in-memory store (one process, nothing to install);
    ``App("redis://127.0.0.1:6379/0")`` uses Redis. The store is opened on
    first use, so an App can be created at import time.

    ``lifespan(app)`` is an async context manager each worker process enters
    once, before its first lease, and exits after its last settle; what it
    yields (a DB pool, an HTTP client) is ``job.lifespan`` in handlers.

    ``metrics``: an object with the :class:`~chronos_trio.Metrics` methods
    (job outcomes with duration, lateness and pickup; leases lost; jobs
    recovered; actor restarts), fed by every worker of this app off the
    settle path (see ``runtime._metrics``); None costs nothing.
    """

    @checked_names("App", ["store"])
    def __init__(
        self,
        store: str | StoreRole | None = None,
        *,
        name: str = "chronos",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        lifespan: Lifespan | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """Raises, before anything is kept: ``TypeError`` for an unknown
        option name (naming it and the valid ones), a ``store`` that is
        neither a URL nor a store object, a ``lifespan`` that is not
        callable or a ``metrics`` object without the :class:`Metrics`
        methods; ``ValueError`` for an empty ``store`` URL or ``name``, or a
        ``max_payload_bytes`` that is not an int >= 1. The URL itself is
        read when the store is opened (on first use)."""
        _check_app_options(name, max_payload_bytes, lifespan, metrics)
        self.name = name
        self.max_payload_bytes = max_payload_bytes
        #: Called for every job this app builds (see :meth:`producer_hook`).
        self.producer_hooks: list[ProducerHook] = []
        #: each flow's start made once (records._flow_start): made at the
        #: first workflow started, so a worker that starts none never loads it
        self._flow_starts_made: FlowStarts | None = None
        self._store_url: str | None = None
        self._store: Store | None = None
        if store is not None:
            self.use_store(store)
        #: What workers of this app run: tasks, hooks, schedules.
        self.registry = Registry(name, lifespan=lifespan, metrics=metrics)

    @property
    def _flow_starts(self) -> FlowStarts:
        """The app's templates of its flows' starts, made at first use."""
        if self._flow_starts_made is None:
            from ..records._flow_start import FlowStarts

            self._flow_starts_made = FlowStarts(_allowing)
        return self._flow_starts_made

    # -- store -------------------------------------------------------------------
    @property
    def store_url(self) -> str:
        return self._store_url or "memory://"

    @property
    def store(self) -> Store:
        """The app's store, opened on first use. Typed as a full
        :class:`~chronos_trio.Store` for its callers' convenience; one with
        only some capabilities (see :func:`~chronos_trio.store.capabilities_of`)
        is checked for each before it is used (by the worker when it starts,
        by :meth:`enqueue_jobs` for the features jobs carry, by job handles
        and the Inspector)."""
        if self._store is None:
            self._store = open_store(self._store_url)
        return self._store

    def use_store(self, store: StoreRole | str) -> None:
        """Replace the store (e.g. the CLI's ``--url``) before anything runs:
        a URL, or a store object with at least the core. Raises TypeError
        for an object that is neither."""
        if isinstance(store, str):
            if not store:
                raise ValueError("store must be a store URL (e.g. redis://localhost/0), got ''")
            self._store_url, self._store = store, None
            return
        require_roles(store, WorkerRole, what="an App")
        self._store_url = None
        # Typed a full Store: see the ``store`` property.
        self._store = cast(Store, store)

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()

    # -- tasks -------------------------------------------------------------------
    @property
    def tasks(self) -> Mapping[str, Task[Any]]:
        """The registered tasks by kind."""
        return {kind: Task(self, spec) for kind, spec in self.registry.tasks.items()}

    @property
    def schedules(self) -> list[Schedule]:
        """The cron and interval schedules declared in code (a copy); the
        ones kept in the store are :attr:`dynamic_schedules`."""
        return list(self.registry.schedules)

    @property
    def dynamic_schedules(self) -> DynamicSchedules:
        """Schedules kept in the store and edited at run time (add, change,
        pause, resume, remove, list): see :class:`DynamicSchedules`."""
        return DynamicSchedules(self, self.max_payload_bytes)

    @property
    def dead_letter_hooks(self) -> list[DeadLetterHook]:
        """The registered dead-letter hooks (a copy)."""
        return list(self.registry.dead_letter_hooks)

    @checked_names("task")
    def task(
        self,
        kind: str,
        *,
        queue: str = DEFAULT_QUEUE,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        never_retry: Sequence[type[BaseException]] = (),
        result_ttl: float = DEFAULT_RESULT_TTL,
        unique: Unique | str | bool | None = None,
        priority: int = 0,
        expires: float | None = None,
        rate_limit: RateLimit | Sequence[RateLimit] | None = None,
        concurrency_limit: ConcurrencyLimit | Sequence[ConcurrencyLimit] | None = None,
        retain_succeeded: float | None = None,
        discard_dead: bool = False,
        isolate: bool = False,
    ) -> TaskDecorator:
        """Register a handler under ``kind``: an ``async def`` (runs on the
        event loop) or a plain ``def`` (runs in a worker thread, see
        ``sync_concurrency``) taking its payload, and optionally the
        :class:`~chronos_trio.JobContext` after or before it:
        ``handler(payload)``, ``handler(payload, job)`` or
        ``handler(job: JobContext, payload)``, told apart by the annotations
        at registration (see ``app._handlers``).

        The payload type comes from the payload parameter's annotation: an
        attrs class (JSON via cattrs), ``bytes`` (raw), or anything cattrs
        handles; the result type from the return annotation (``None``: no
        result is kept; none at all: nothing is kept either, and a
        ``ResultNotKeptWarning`` says so). ``retry`` is this task's backoff (default: the
        worker's); an exception of a ``never_retry`` type dead-letters the
        job at once; results are kept ``result_ttl`` seconds. ``unique``: its
        jobs' default (see :class:`~chronos_trio.Unique`; True derives the
        key from kind and payload, a str is the key); ``enqueue(unique=...)``
        overrides it per job. Flow control (see ``records._control``, each
        overridable per job at enqueue): ``priority`` (-10 .. 10, higher
        leases first within a queue), ``expires`` (seconds after enqueue by
        which a job must start, else it is dead-lettered as expired),
        ``rate_limit`` (:class:`~chronos_trio.RateLimit`, one or several)
        and ``concurrency_limit`` (:class:`~chronos_trio.ConcurrencyLimit`),
        enforced fleet-wide by the store when it leases.
        ``retain_succeeded``: seconds its successes stay inspectable,
        overriding the worker's option of that name (0: dropped at once;
        None: the worker's). ``discard_dead``: a job that fails for good
        (retries used up, ``SkipRetry``, a ``never_retry`` error, a result
        that does not encode) is deleted instead of kept in the dead-letter
        index; the dead-letter hooks still run, with the job as it ended. (A
        job the store dead-letters itself, as when its last lease expires or
        it expired before it started, is still kept dead: the store does not
        know tasks.) ``isolate``: run the handler (plain or async) in a child
        process from the worker's pool (``isolate_processes``): blocking
        or CPU-bound code off the worker, its ``timeout`` a soft limit
        (:class:`~chronos_trio.SoftTimeLimit` raised in the handler) and,
        ``hard_limit_grace`` later, a hard one (the child is killed); a
        crash of the child fails that attempt only (see docs/isolation.md).

        Raises ``TypeError`` for an unknown option name (naming it and the
        closest valid one) or a function that cannot be a handler (not
        callable, a generator, a signature that is not one of the shapes in
        docs/tasks.md), and ``ValueError`` for an option value of the wrong
        type or out of range, or a kind already registered (see
        docs/bad-input.md for every option).
        """
        check_options(max_retries=max_retries, timeout=timeout)
        check_queue(queue)
        check_text("task kind", kind)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {retry!r}")
        if isinstance(never_retry, type) or not isinstance(never_retry, Iterable):
            raise TypeError(
                f"never_retry takes a sequence of exception classes, got {never_retry!r} "
                "(one class: never_retry=(ValueError,))"
            )
        never = tuple(never_retry)
        for exc_type in never:
            if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                raise TypeError(f"never_retry takes exception classes, got {exc_type!r}")
        check_seconds("result_ttl", result_ttl)
        unique_default = unique_of(unique)
        if retain_succeeded is not None:
            check_seconds("retain_succeeded", retain_succeeded, zero=True)
        check_bool("discard_dead", discard_dead, error=TypeError)
        check_bool("isolate", isolate, error=TypeError)
        control = control_defaults(
            priority=priority,
            expires=expires,
            rate_limit=rate_limit,
            concurrency_limit=concurrency_limit,
        )

        def register(fn: Callable[..., Any]) -> Task[Any]:
            if kind in self.registry.tasks:
                raise ValueError(f"a task is already registered under kind {kind!r}")
            shape = inspect_handler(fn)
            if isolate and getattr(fn, "__module__", None) == "__main__":
                raise ValueError(
                    f"task {kind!r}: isolate=True needs a handler a child process can "
                    "import, and this one is defined in __main__; move the app and its "
                    "tasks to a module (myproject/jobs.py, run as myproject.jobs:app)"
                )
            if not shape.returns_annotated:
                warnings.warn(
                    f"task {kind!r}: handler {getattr(fn, '__qualname__', fn)!r} has no return "
                    "annotation, so nothing it returns is kept; annotate it `-> None` if it "
                    "returns nothing, or `-> T` to keep its result for `handle.result()`",
                    ResultNotKeptWarning,
                    stacklevel=2,
                )
            spec = TaskSpec(
                kind=kind,
                fn=shape.call,
                handler=fn,
                payload_type=shape.payload_type,
                queue=queue,
                max_retries=max_retries,
                timeout=timeout,
                is_async=shape.is_async,
                isolate=isolate,
                result_type=shape.result_type,
                result_ttl=result_ttl,
                retry=retry,
                never_retry=never,
                max_result_bytes=self.max_payload_bytes,
                unique=unique_default,
                control=control,
                retain_succeeded=retain_succeeded,
                discard_dead=discard_dead,
            )
            self.registry.tasks[kind] = spec
            return Task(self, spec)

        return cast(TaskDecorator, register)

    def middleware(self, factory: Middleware) -> Middleware:
        """Register ``factory(job) -> async context manager`` entered around
        every handler run, inside the run's cancel scope (timeouts and lost
        leases apply to it), in registration order (the first is outermost).
        What it raises counts as the handler's failure. With none registered
        a run costs nothing extra."""
        self.registry.middleware.append(factory)
        return factory

    def on_dead_letter(self, hook: DeadLetterHook) -> DeadLetterHook:
        """Register ``async def hook(job)``, called once a job is dead-lettered
        (its ``last_error`` says why); see :class:`~chronos_trio.Worker` for
        when hooks run. Errors in the hook are logged."""
        self.registry.dead_letter_hooks.append(hook)
        return hook

    # -- schedules -----------------------------------------------------------------
    @checked_names("schedule", JOB_DEFAULT_OPTIONS)
    def cron(
        self,
        spec: str,
        payload: Any,
        *,
        task: Task[Any] | str | None = None,
        tz: str = "UTC",
        schedule_id: str | None = None,
        misfire: MisfirePolicy = "skip",
        external: bool = False,
        **defaults: Unpack[JobDefaults],
    ) -> Schedule:
        """Enqueue ``task``'s job with ``payload`` at each time of the 5-field
        cron ``spec`` in timezone ``tz`` (fired once per trigger by the elected
        leader among all workers). ``task`` may be omitted when exactly one
        registered task takes ``type(payload)``; ``defaults`` (``queue``,
        ``max_retries``, ``timeout``) override the task's for its jobs.

        ``task`` given as a kind may be registered after the schedule; a
        worker refuses to start (``UnknownTask``, with the closest
        registered kind) while any schedule names a kind this app does not
        register, unless the schedule says ``external=True``: its task is
        registered by another program sharing the store (its payload then
        goes as JSON). Any other invalid argument raises here, not when the
        schedule fires: ``TypeError`` for an unknown option name,
        ``ValueError`` for a bad value (see docs/bad-input.md). See
        :class:`~chronos_trio.Schedule` for DST and misfire rules."""
        schedule = build_schedule(
            self.registry,
            self.max_payload_bytes,
            payload,
            task,
            cron=spec,
            tz=tz,
            schedule_id=schedule_id,
            misfire=misfire,
            external=external,
            **defaults,
        )
        return self._add_schedule(schedule)

    @checked_names("schedule", JOB_DEFAULT_OPTIONS)
    def every(
        self,
        interval: float | dt.timedelta,
        payload: Any,
        *,
        task: Task[Any] | str | None = None,
        schedule_id: str | None = None,
        misfire: MisfirePolicy = "skip",
        external: bool = False,
        **defaults: Unpack[JobDefaults],
    ) -> Schedule:
        """Like :meth:`cron`, every ``interval`` (seconds or a timedelta,
        >= 1 s), at multiples of the interval since the Unix epoch."""
        schedule = build_schedule(
            self.registry,
            self.max_payload_bytes,
            payload,
            task,
            interval=interval,
            schedule_id=schedule_id,
            misfire=misfire,
            external=external,
            **defaults,
        )
        return self._add_schedule(schedule)

    def _add_schedule(self, schedule: Schedule) -> Schedule:
        check_unique(self.registry.schedules, schedule)
        self.registry.schedules.append(schedule)
        return schedule

    # -- producing ---------------------------------------------------------------
    def producer_hook(self, hook: ProducerHook) -> ProducerHook:
        """Register ``hook(kind, headers)``, called for every job this app
        builds (enqueue, enqueue_many, once per workflow; schedules
        excepted) with the job's
        headers as a dict it may add to: a trace id, a tenant. The handler
        reads them as ``job.headers``. Usable as a decorator; hooks run in
        registration order, on the producer's side (never on a worker's
        settle path); what a hook raises fails that enqueue."""
        self.producer_hooks.append(hook)
        return hook

    async def enqueue_jobs(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: object = None,
        workflow: WorkflowStart | None = None,
    ) -> list[EnqueueResult]:
        """Send prepared jobs (``task.new_job(...)``) in one batch. Raises
        ``MissingCapability``, storing none of them, when a job uses a
        feature the store lacks (unique, limits, expiry, priority, a
        workflow step); ``StoreError`` when the store cannot be reached.

        ``connection`` (a synchronous one: psycopg, SQLAlchemy, Django):
        write the jobs in the transaction open on it, used in a worker
        thread meanwhile (see
        :class:`~chronos_trio.store._transactional.TransactionalEnqueue`);
        ``MissingCapability`` when the store cannot (a store that is not
        PostgreSQL), before anything is written.

        ``workflow`` (:meth:`enqueue_workflow`'s): the jobs are a
        workflow's first, saved with its record on a store with workflow
        records (``WorkflowRole.start_workflow``: the record first; one
        round trip on one Redis node; with ``connection``, in the caller's
        transaction, ``TransactionalEnqueue.start_workflow_in_transaction``)."""
        if connection is not None:
            return await self._enqueue_in_transaction(jobs, connection, workflow)
        if not jobs:
            return []
        store = self.store
        check_jobs(store, jobs)
        if workflow is not None and isinstance(store, WorkflowRole):
            return await store.start_workflow(
                workflow.workflow_id, workflow.tree, workflow.first_kind, workflow.keep, jobs
            )
        return await store.enqueue_many(jobs)

    async def _enqueue_in_transaction(
        self, jobs: Sequence[NewJob], connection: object, workflow: WorkflowStart | None = None
    ) -> list[EnqueueResult]:
        store = self.store
        where = redact(self._store_url) if self._store_url else ""
        target = transactional_store(store, where)
        check_jobs(store, jobs)
        if workflow is not None:
            return await target.start_workflow_in_transaction(
                connection,
                workflow.workflow_id,
                workflow.tree,
                workflow.first_kind,
                workflow.keep,
                jobs,
            )
        return await target.enqueue_in_transaction(connection, jobs)

    async def enqueue_workflow(
        self,
        workflow: FlowStep | Chain | Group | Dag | Buildable,
        *,
        workflow_id: str | None = None,
        on_failure: FlowStep | None = None,
        connection: object = None,
    ) -> Workflow:
        """Start a workflow (``chain``, ``group``, ``graph``, their nesting,
        of ``task.s(...)`` steps): its first jobs in one batch. What follows
        each job is enqueued when it succeeds (see docs/workflows.md); a
        failed step stops the flow behind it until it is re-run.

        ``workflow_id`` (default: a new one) names every job of the flow
        (``<workflow_id>.<path>``): starting the same ID again changes
        nothing while its jobs exist. Returns a :class:`Workflow`:
        ``await flow.result()`` is the last step's result (a graph with
        several sinks: their results, as a list). The producer
        hooks run once per workflow, with the kind of its first step; every
        job of the flow, first or later, carries the headers they made.
        Raises ValueError past the limits (see ``records._flow_build``), for
        bad headers or a graph that does not check (see ``Graph.freeze``),
        TypeError for a graph root that starts the flow without a payload,
        StoreError when the store cannot be reached, and what a
        hook raises. ``connection``: start it in your own transaction, as
        :meth:`Task.enqueue` (its later steps are enqueued by the workers);
        its record is written in that transaction too (PostgreSQL, SQLite),
        so it commits or rolls back with the first jobs.

        On a store with workflow records (``WorkflowRole``) its record is
        saved first, so :meth:`workflow` can cancel and show it (with the
        first jobs, ``WorkflowRole.start_workflow``: one round trip on one
        Redis node). Starting the same flow object again is cheaper: what
        its start makes is templated once (``records._flow_start``).
        ``on_failure``: a step (``task.s()``, its task taking a
        :class:`StepFailure`) enqueued once when a step of the flow fails for
        good, unless a chain's or group's ``on_failure`` nearer that step
        takes it; TypeError when its task cannot take a StepFailure.
        """
        # what builds and starts a workflow: loaded at the first one started
        from ..records._flow_build import as_node, final_step, final_steps, first_kind
        from ..records._flow_start import LazyPredecessors, WorkflowStart

        node = as_node(workflow)
        wid = workflow_id or new_job_id()
        hooks = self.producer_hooks
        headers = job_headers(first_kind(node), None, hooks) if hooks else ()
        made = self._flow_starts.start(node, wid, headers, on_failure)
        steps = made.steps
        # the record first (in the same round trip on Redis; in the caller's
        # transaction, given a connection: it commits or rolls back with the
        # jobs): a flow whose jobs exist always has one to cancel and view
        # (a save again is the same run's: unchanged)
        start = WorkflowStart(wid, made.tree, first_kind(node), made.keep)
        await self.enqueue_jobs(steps.jobs, connection=connection, workflow=start)
        last = final_step(node, wid)
        final = None if last is None else self._step_handle(*last)
        ends = final_steps(node, wid) if last is None else None  # a graph's sinks
        sinks = tuple(self._step_handle(*end) for end in ends or ())
        group_end = None
        if last is None and not sinks:
            found = self._end_of(node, wid)
            group_end = found if isinstance(found, GroupEnd) else None
        return Workflow(
            wid,
            final,
            LazyPredecessors(node, wid),
            sinks,
            host=self,
            ends=group_end,
            allowing=made.allowing,
        )

    def _step_handle(self, job_id: str, step: FlowStep) -> JobHandle[Any]:
        return JobHandle(job_id, False, 0.0, None, step.queue, step.kind, self)

    def workflow(self, workflow_id: str) -> Workflow:
        """A handle on the workflow ``workflow_id`` (started here or in any
        other process): :meth:`Workflow.abort` cancels it,
        :meth:`Workflow.status` shows its steps. No store call until one of
        them is awaited. Its ``final`` is None (``result()`` needs the
        handle ``enqueue_workflow`` returned). ValueError for an ID that
        is not a non-empty string."""
        check_text("workflow ID", workflow_id)
        return Workflow(workflow_id, None, host=self)

    def _end_of(self, node: FlowStep | Chain | Group | Dag, path: str) -> Any:
        """How a flow's node at ``path`` ends: its last step's handle, or its
        group's members' ends (None: a graph of several sinks, which a
        group's end does not follow)."""
        from ..records._flow_build import Chain, Group, final_step  # loaded by the start

        while isinstance(node, Chain):
            path, node = f"{path}.{len(node.links) - 1}", node.links[-1]
        if not isinstance(node, Group):
            last = final_step(node, path)
            return None if last is None else self._step_handle(*last)
        members = [self._end_of(m, f"{path}.{k}") for k, m in enumerate(node.members)]
        if any(m is None for m in members):
            return None
        return GroupEnd(path, tuple(members), node.allow_failures)

    async def enqueue_batch(
        self,
        steps: Sequence[FlowStep],
        *,
        batch_id: str | None = None,
        on_complete: FlowStep | None = None,
        connection: object = None,
    ) -> Batch:
        """Enqueue ``steps`` (``[task.s(payload), ...]``, each with a payload
        of its own) as one batch: all members in one store batch, run in
        parallel; once every one finished (succeeded, or failed for good),
        ``on_complete`` (``cb.s()``, its task taking a :class:`BatchSummary`:
        the counts and the failed members' IDs) is enqueued once. Returns a
        :class:`Batch`: ``status()`` gives live counts, ``wait()`` and
        ``result()`` wait for the end.

        A batch is a workflow (a group that allows failures, then the
        callback): ``batch_id`` (default: a new one) names its jobs
        (``<batch_id>.0.<k>``, the callback ``<batch_id>.1``); starting the
        same ID again changes nothing while its jobs exist (24 h). At most
        1,000 members (ValueError past it: split the work into batches);
        TypeError for a member that is not one step with a payload, or a
        callback that cannot take a BatchSummary; StoreError when the store
        cannot be reached. ``connection``: as :meth:`enqueue_workflow`."""
        flow = batch_flow(steps, on_complete)
        bid = batch_id or new_job_id()
        await self.enqueue_workflow(flow, workflow_id=bid, connection=connection)
        members: list[JobHandle[Any]] = [
            JobHandle(member_id(bid, k), False, 0.0, None, s.queue, s.kind, self)
            for k, s in enumerate(steps)
        ]
        return Batch(self, bid, members)

    def batch(self, batch_id: str) -> Batch:
        """A handle on the batch ``batch_id``, started here or elsewhere
        (its size is read from the store when first needed)."""
        return Batch(self, batch_id)

    async def enqueue(
        self,
        kind: str,
        payload: Any,
        *,
        connection: object = None,
        **options: Unpack[EnqueueOptions],
    ) -> JobHandle[Any]:
        """Enqueue by kind name (for producers that do not import the handler);
        returns its :class:`JobHandle`. Raises as :meth:`Task.enqueue` (and
        takes its ``connection``), and ``ValueError`` for a kind that is not
        a non-empty string."""
        check_text("task kind", kind)
        spec = self.registry.tasks.get(kind)
        if spec is None:
            spec = TaskSpec(
                kind=kind,
                fn=_no_handler,
                payload_type=Any,
                queue=DEFAULT_QUEUE,
                max_retries=DEFAULT_MAX_RETRIES,
                timeout=DEFAULT_TIMEOUT,
            )
        return await Task(self, spec).enqueue(payload, connection=connection, **options)

    def job(self, job_id: str, *, queue: str | None = None, kind: str = "") -> JobHandle[Any]:
        """A handle for the job ``job_id`` (enqueued anywhere, by any
        process): ``await app.job(job_id).result(timeout=10)``. ``queue``
        spares the store a search of every queue; ``kind`` names its task
        when the stored record cannot be read for it (rarely needed: the
        result is decoded by the registered task of the job's kind). Nothing
        is read until a method of the handle is awaited."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("job_id must be a non-empty string")
        return JobHandle(job_id, False, 0.0, None, queue, kind, self)

    def result_type_of(self, kind: str) -> tuple[bool, Any]:
        """Whether ``kind`` is registered here, and its task's result type
        (None: it keeps no result)."""
        spec = self.registry.tasks.get(kind)
        if spec is None or spec.fn is _no_handler:
            return False, None
        return True, spec.result_type if spec.result_ttl > 0 else None

    # -- workers -------------------------------------------------------------------
    def worker(self, **config: Any) -> Worker:
        """A worker for this app (run it with ``await nursery.start(worker.run)``);
        options are :class:`~chronos_trio.WorkerConfig`'s."""
        return Worker(self, WorkerConfig.build(**config))

    @asynccontextmanager
    async def open_worker(self, **config: Any) -> AsyncIterator[Worker]:
        """Run a worker for the body of the ``async with``; on exit (or
        cancellation) it shuts down gracefully. Options are WorkerConfig's.

        What :meth:`Worker.run` raises (``ActorFailed`` for an actor that
        crash-loops, whether while the worker starts or later) comes out of
        the ``async with``, inside the ExceptionGroup of its nursery. A
        worker given ``max_jobs`` or ``max_memory_mb`` may end its run by
        itself before the body does (``worker.recycled`` then says why;
        ``await worker.wait_stopped()`` waits for that): the body goes on."""
        worker = self.worker(**config)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            try:
                yield worker
            finally:
                worker.stop()

    # -- administration ------------------------------------------------------------
    def inspector(self) -> Inspector:
        """Queue counts, job listing and admin actions on this app's store."""
        from ._inspector import Inspector  # not on a worker's way to its first job

        return Inspector(self.store, app=self)


#: What a metrics object must have: the :class:`Metrics` protocol's methods
#: (read from it; ``typing.get_protocol_members`` is Python 3.13's).
_METRICS_METHODS = tuple(
    name for name, value in vars(Metrics).items() if callable(value) and not name.startswith("_")
)


def _check_app_options(
    name: object, max_payload_bytes: object, lifespan: object, metrics: object
) -> None:
    """The App's options, checked as the constructor's docstring says."""
    check_text("name", name)
    check_positive_int("max_payload_bytes", max_payload_bytes)
    if lifespan is not None and not callable(lifespan):
        raise TypeError(
            f"lifespan must be a callable taking the app and returning an async context "
            f"manager (or None), got {lifespan!r}"
        )
    if metrics is not None:
        missing = [m for m in _METRICS_METHODS if not callable(getattr(metrics, m, None))]
        if missing:
            raise TypeError(
                f"metrics must be an object with the Metrics methods (subclass "
                f"chronos_trio.MetricsBase), got {metrics!r}, which lacks {', '.join(missing)}"
            )


async def _no_handler(payload: Any, job: Any) -> None:  # pragma: no cover - never run
    raise RuntimeError("producer-side placeholder task")


__all__ = ["App"]


def _allowing(node: FlowStep | Chain | Group | Dag, path: str) -> list[str]:
    """The IDs of the groups of a flow that allow failures."""
    from ..records._flow_build import Chain, Dag, FlowStep, Group  # loaded by the start

    if isinstance(node, FlowStep):
        return []
    if isinstance(node, Dag):
        return [g for step in node.steps for g in _allowing(step.node, f"{path}.{step.name}")]
    parts = node.links if isinstance(node, Chain) else node.members
    found = [path] if isinstance(node, Group) and node.allow_failures else []
    for k, part in enumerate(parts):
        found += _allowing(part, f"{path}.{k}")
    return found
