"""Eager mode: ``with chronos_trio.testing.eager(app):`` every enqueue of
``app`` runs its job at once, in the caller, before it returns (Celery's
``task_always_eager``). See docs/testing.md for the semantics.

While eager, the app uses a private :class:`~chronos_trio.store.memory.MemoryStore`
(``mode.store``): each job is stored there, leased, run and settled by the
store's own transitions, one job after another, so handles, ``status()``,
``result()``, unique keys, idempotent job IDs and the inspector behave as
on a real store. The app's own store is neither read nor written, and is
given back on exit.

Nothing of this touches the production path: the App's ``enqueue_jobs``
(the one path of ``Task.enqueue``, ``enqueue_many``, ``App.enqueue`` and
workflows) is shadowed on this app object for the ``with`` block only; an
app that is not eager runs exactly the code it runs without this module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from ..actors.continuer import next_jobs
from ..app import App
from ..records._checks import check_bool
from ..records._codec import decode_payload
from ..records._errors import PayloadError, SkipRetry
from ..records._flow_start import WorkflowStart
from ..records._jobs import EnqueueResult, Job, JobState, LeasedJob, NewJob
from ..records._workflow import WORKFLOW_KEEP
from ..store import QueueWeight, SettleKind, Settlement
from ..store.memory import MemoryStore
from .app_store import using_store
from .eager_producers import (
    EagerAsyncioProducer,
    EagerSyncProducer,
    sync_producer,
    unknown_task,
)
from .fake_context import FakeJobContext, job_context
from .inline import call_handler, encode_result

#: The lease an eager run holds: longer than any test, so a handler that
#: sleeps in virtual time never loses it.
_LEASE_SECONDS = 1e9
#: How long an eager success is kept when its task does not say (the store
#: is the test's own).
_RETAIN_SECONDS = 3600.0
WORKER_ID = "eager"
log = logging.getLogger(__name__)


@attrs.frozen
class EagerRun:
    """One attempt run eagerly: the job, its ``attempt`` (1: the first
    run), how it ended (SUCCEEDED, RETRY: it runs again at once, DEAD, or
    DISCARD: dead and deleted, for a task with ``discard_dead``),
    the error text, and the fake context its handler got (``calls`` shows
    its ``progress``/``log`` calls)."""

    job_id: str
    kind: str
    attempt: int
    outcome: SettleKind
    error: str
    context: FakeJobContext = attrs.field(repr=False)


@attrs.define(eq=False)
class EagerMode:
    """What :func:`eager` yields: the ``store`` the app uses meanwhile and
    ``runs``, every attempt run so far, in order."""

    app: App
    store: MemoryStore
    propagate: bool
    lifespan: Any = None
    redis: Any = None
    runs: list[EagerRun] = attrs.field(factory=list)

    def sync_producer(self) -> EagerSyncProducer:
        """A stand-in for a SyncProducer of this app: its calls enqueue
        eagerly (see ``testing.eager_producers``)."""
        return sync_producer(self.app)

    def asyncio_producer(self) -> EagerAsyncioProducer:
        """A stand-in for an AsyncioProducer of this app, as
        :meth:`sync_producer`."""
        return EagerAsyncioProducer(sync_producer(self.app))

    async def enqueue_jobs(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: object = None,
        workflow: WorkflowStart | None = None,
    ) -> list[EnqueueResult]:
        """The App's ``enqueue_jobs`` while eager: store each job (due at
        once) and run it, with its retries, before the next. ``connection``
        is not used (the job runs as if that transaction committed);
        ``workflow``: the record of the workflow these jobs start is saved
        first, as the App saves it.
        Raises ``UnknownTask`` for a kind this app does not register,
        before any job is stored; with ``propagate``, what a job's last attempt
        raised once it is dead (the jobs after it in the batch are then not
        stored)."""
        tasks = self.app.registry.tasks
        for new in jobs:
            if new.kind not in tasks:
                raise unknown_task(new.kind)
        if workflow is not None:
            await self.store.save_workflow(
                workflow.workflow_id, workflow.tree, workflow.first_kind, WORKFLOW_KEEP
            )
        results = []
        for new in jobs:
            now = attrs.evolve(new, run_at=None, delay=0.0, control=None)
            [result] = await self.store.enqueue_many([now])
            results.append(result)
            if result.created:
                await self._drain(new.queue)
        return results

    async def _drain(self, queue: str) -> None:
        """Run ``queue``'s jobs until none is ready (a retry is due at once)."""
        store = self.store
        while True:
            await store.promote_due([queue], 1000)
            leased = await store.lease(
                [QueueWeight(queue)], 1, worker_id=WORKER_ID, lease_duration=_LEASE_SECONDS
            )
            if not leased.jobs:
                return
            await self._run(leased.jobs[0])

    async def _run(self, leased: LeasedJob) -> None:
        """One attempt: run, settle as a worker would; raise what killed it
        (``propagate``)."""
        job = leased.job
        spec = self.app.registry.tasks[job.kind]
        ctx = job_context(job, app=self.app, lifespan=self.lifespan, redis=self.redis)
        failure: Exception | None = None
        try:
            payload = decode_payload(job.payload, spec.payload_type)
            value = await call_handler(spec, payload, ctx, self.app.registry.middleware)
            data = encode_result(spec, value)
        except Exception as exc:
            failure = exc
            kind = SettleKind.DEAD if _final(exc, spec.never_retry) else SettleKind.RETRY
            error = f"{type(exc).__name__}: {exc}"
            if kind is SettleKind.RETRY and job.attempts > job.max_retries:
                kind = SettleKind.DEAD
                error = f"retries exhausted after {job.attempts} attempt(s): {error}"
            if kind is SettleKind.DEAD and spec.discard_dead:
                kind = SettleKind.DISCARD  # deleted, not kept dead, as a worker does
            settlement = Settlement(leased.ref, kind, error=error)
        else:
            retain = _RETAIN_SECONDS if spec.retain_succeeded is None else spec.retain_succeeded
            settlement = Settlement(
                leased.ref,
                SettleKind.SUCCEEDED,
                retain_for=retain,
                result=data,
                result_ttl=spec.result_ttl if data is not None else 0.0,
            )
        self.runs.append(
            EagerRun(job.id, job.kind, job.attempts, settlement.kind, settlement.error, ctx)
        )
        await self.store.settle([settlement])
        if settlement.kind is SettleKind.SUCCEEDED:
            await self._continue(job.queue)
        elif settlement.kind is not SettleKind.RETRY:  # dead, or discarded
            await self._dead_letter_hooks(job, settlement.error)
            if failure is not None and self.propagate:
                raise failure

    async def _continue(self, queue: str) -> None:
        """Run what follows a workflow job that succeeded in ``queue`` (its
        outbox entry, put there by the success settle): the next steps are
        enqueued eagerly, so they run now (as the continuer of a worker
        would enqueue them; see ``actors.continuer``)."""
        store = self.store
        while batch := await store.continuations([queue], 256):
            jobs = await next_jobs(store, batch)
            await store.finish_continuations(batch)  # before the next steps run
            await self.enqueue_jobs(jobs)

    async def _dead_letter_hooks(self, job: Job, error: str) -> None:
        """The App's dead-letter hooks, with the job as it ended (as the
        store keeps it; a discarded one as it was leased, dead with
        ``error``), in order; what one raises is logged, as a worker logs it."""
        hooks = self.app.registry.dead_letter_hooks
        if not hooks:
            return
        dead = await self.store.get_job(job.id, queue=job.queue)
        if dead is None:  # discarded (``discard_dead``)
            dead = attrs.evolve(job, state=JobState.DEAD, last_error=error)
        for hook in hooks:
            try:
                await hook(dead)
            except Exception:
                log.exception("eager mode: dead-letter hook %r failed", hook)


def _final(exc: Exception, never_retry: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` dead-letters its job at once, as in a worker:
    ``SkipRetry``, a payload that does not decode or a result that does not
    encode, or one of the task's ``never_retry`` types."""
    return isinstance(exc, SkipRetry | PayloadError) or isinstance(exc, never_retry)


@contextmanager
def eager(
    app: App, *, propagate: bool = True, lifespan: Any = None, redis: Any = None
) -> Iterator[EagerMode]:
    """Run every job ``app`` enqueues at once, in the caller, inside the
    ``with`` (see the module doc and docs/testing.md):

    * ``delay``/``run_at`` are ignored: the job runs now; so are priority,
      expiry and rate and concurrency limits. Unique keys and ``job_id``
      apply (a duplicate is not run again).
    * A failed attempt is retried at once, up to the job's ``max_retries``
      (no backoff; ``Retry``'s delay is ignored; ``RateLimited`` counts as
      a failed attempt). ``SkipRetry``, a ``never_retry`` error, a payload
      that does not decode and a result that does not encode end it at once.
    * A workflow runs step by step: what follows a step that succeeded
      runs at once after it (inside the first enqueue), a group's
      continuation once its last member succeeded.
    * Results are kept: ``await handle.result()`` returns the decoded
      result. A dead job raises its last exception out of ``enqueue`` when
      ``propagate`` (the default); otherwise ``enqueue`` returns and
      ``handle.result()`` raises ``JobFailed``.
    * The App's middleware runs around each handler, and its dead-letter
      hooks after a job ends dead (before ``enqueue`` raises); metrics do
      not run. Handlers get a :class:`FakeJobContext` with
      ``lifespan`` and ``redis``.
    * ``mode.sync_producer()`` and ``mode.asyncio_producer()`` stand in
      for the producers outside Trio (see ``testing.eager_producers``).

    Raises TypeError for an ``app`` that is not an App or a ``propagate``
    that is not a bool, RuntimeError when ``app`` is already eager."""
    if not isinstance(app, App):
        raise TypeError(f"eager takes an App, got {app!r}")
    check_bool("propagate", propagate, error=TypeError)
    if "enqueue_jobs" in vars(app):
        raise RuntimeError(f"app {app.name!r} is already eager (or its enqueue_jobs is patched)")
    mode = EagerMode(app, MemoryStore(), propagate, lifespan, redis)
    with using_store(app, mode.store):
        app.enqueue_jobs = mode.enqueue_jobs  # type: ignore[method-assign]
        try:
            yield mode
        finally:
            del app.enqueue_jobs
