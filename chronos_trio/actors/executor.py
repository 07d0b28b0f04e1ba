"""executor pool: runs handlers, ``concurrency`` at a time, and decides each
job's outcome.

Outcomes: return -> succeeded; exception -> retry with backoff, or dead when
the attempts are used up; ``SkipRetry`` -> dead at once; timeout -> cancelled
and counted as a failure; undecodable payload -> dead with a clear error;
unknown kind -> back unrun for a worker that has its handler, dead once none
took it within ``unknown_kind_grace`` (see ``runtime._unknown_kinds``); lease
lost -> cancelled and forgotten (another worker owns it); abort asked (a
renewal said so) -> cancelled and settled ABORTED. Dead becomes discard
(deleted, not kept dead) for a task registered with ``discard_dead``; a
success is retained for its task's ``retain_succeeded``, else the worker's.

Cost per job matters here (it is most of a no-op job's CPU), so nothing is
built per job that can live per executor: each executor runs its handlers
inside one long-lived cancel scope, and one watchdog enforces every handler's
timeout, instead of a cancel scope and a registered deadline per job. A scope
is replaced only after something cancelled it (a timeout or a lost lease).
The scope's own deadline is the running job's lease deadline (the in-flight
table arms and moves it, see ``runtime._inflight``): so a lease that ends on
this worker's clock cancels its handler even while every renewal hangs,
and Trio processes it before any task of a round runs. Lease deadlines are
quantized, so that costs a float comparison per job (see
:meth:`Dispatch.next` for an idle executor's). And a batch does not wake
every idle executor: see :class:`Dispatch`.

A plain-function handler's timeout counts from when a thread takes its run
(``runtime._threads``), not while it waits for one.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, cast

import attrs
import trio

from .._code_cache import save_after_first_payload
from ..records._codec import decode_payload, encode_payload
from ..records._errors import PayloadError, RateLimited, Retry, SkipRetry
from ..records._jobs import Job, LeaseRef, abort_error
from ..records._log import log_event
from ..runtime._context import JobContext
from ..runtime._error_text import error_text as _error_text
from ..runtime._inflight import Entry, InFlight
from ..runtime._state import Runtime, log
from ..runtime._tasks import TaskSpec
from ..runtime._threads import ThreadRun
from ..store import SettleKind, Settlement
from ..store._record_rules import RULE_OF, fields_sound, value_problem


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    # A previous incarnation's executors died with these handlers running:
    # release them (run again soon, attempt given back).
    rt.table.release_running()
    watchdog = Watchdog()
    dispatch = Dispatch(rt.table)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        for _ in range(rt.config.concurrency):
            slot = Slot()
            watchdog.slots.append(slot)
            nursery.start_soon(_executor, rt, slot, watchdog, dispatch)
        task_status.started()


class Dispatch:
    """How idle executors take jobs from the in-flight table's run queue.

    If every idle executor waited on the queue, a batch of 64 would cost 64
    task switches even when each handler finishes without ever yielding. So
    one idle executor listens on the queue and the rest are parked. An
    executor that finishes a handler takes the next queued job itself, with no
    checkpoint. Helpers are woken only as needed: one to take over listening
    when nobody listens, and, while jobs are queued, two more for each woken
    executor that found work, so handlers that do yield fan out to every
    executor within a few scheduling rounds, and ones that never yield run
    back to back in one.

    Invariant: while an executor is parked, another one listens or has been
    woken and has yet to look at the queue, so a queued job always has
    someone on its way to it.
    """

    def __init__(self, table: InFlight) -> None:
        self._table = table
        self._parked = trio.lowlevel.ParkingLot()
        self._listening = False
        self._waking = 0

    async def next(self, scope: trio.CancelScope) -> Entry | None:
        """The next job to run, already RUNNING in ``scope``; None when
        ``scope`` was cancelled as this executor was woken (the caller goes
        on in a fresh scope: a job never starts in a cancelled one).

        An idle executor's scope keeps the lease deadline of its last job
        (clearing it for every idle spell and arming it again would cost two
        deadline registrations each time): when that passes while it waits,
        its wait is cancelled, or, if it was woken in that same round, it
        returns None here."""
        table = self._table
        woken = False
        while True:
            if woken and scope.cancel_called:
                return None
            entry = table.start_next_nowait(scope)
            if entry is not None:
                break
            if self._listening or self._waking:
                await self._parked.park()
                # Only an unpark gets here (a cancelled park raises), and
                # every unpark was counted in _waking.
                self._waking -= 1
                woken = True
                continue
            self._listening = True
            try:
                await table.wait_queued()
            finally:
                self._listening = False
            woken = True
        self._after_take(woken)
        return entry

    def _after_take(self, woken: bool) -> None:
        parked = len(self._parked)
        if not parked:
            return
        if woken and self._table.queued:
            wake = 2  # fan out while jobs are queued
        elif not self._listening and not self._waking:
            wake = 1  # someone must be on the queue
        else:
            return
        wake = min(wake, parked)
        self._waking += wake
        self._parked.unpark(count=wake)


class Slot:
    """One executor: the entry it runs (None when idle), that handler's
    timeout deadline on Trio's clock (``inf`` while a plain handler waits
    for a thread), and the scope its handlers run in."""

    __slots__ = ("deadline", "entry", "scope")

    def __init__(self) -> None:
        self.entry: Entry | None = None
        self.deadline = math.inf
        self.scope = trio.CancelScope()


class Watchdog:
    """Cancels a handler at its deadline. Sleeps until the earliest deadline
    of the running handlers; an executor wakes it only when it starts a
    handler due earlier than that (with equal timeouts, never)."""

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self._target = math.inf
        self._wake = trio.Event()

    def started(self, deadline: float) -> None:
        if deadline < self._target:
            self._wake.set()

    async def run(self) -> None:
        while True:
            now = trio.current_time()
            target = math.inf
            for slot in self.slots:
                if slot.entry is None or slot.scope.cancel_called:
                    continue
                if slot.deadline <= now:
                    slot.scope.cancel()
                elif slot.deadline < target:
                    target = slot.deadline
            self._target = target
            self._wake = trio.Event()
            with trio.move_on_at(target):
                await self._wake.wait()


async def _executor(rt: Runtime, slot: Slot, watchdog: Watchdog, dispatch: Dispatch) -> None:
    table = rt.table
    while True:
        slot.scope = trio.CancelScope()
        running: Entry | None = None  # survives the scope's cancellation
        with slot.scope:
            # A cancel that came too late for its handler (it returned first)
            # must not hit the next job: start that one in a fresh scope.
            while not slot.scope.cancel_called:
                running = await dispatch.next(slot.scope)
                if running is None:
                    break
                outcome = await _run_handler(rt, running, slot, watchdog)
                if rt.notes.active:  # the job's last progress and lines first
                    await _flush_notes(rt, running)
                if outcome.kind is SettleKind.DEAD:
                    outcome = _discarding(rt, running.leased.job, outcome)
                table.decide(running, outcome)
                running = None
        # Only this executor's scope being cancelled gets here: the running
        # handler timed out, lost its lease (refused, or past its deadline)
        # or was aborted (``running`` is set), or the cancel arrived after
        # the handler returned or while the executor was idle (it is None; a
        # job is never started in a cancelled scope).
        if running is not None:
            if rt.notes.active:
                await _flush_notes(rt, running)
            interrupted = _interrupted(rt, running)
            if interrupted is not None and interrupted.kind is SettleKind.DEAD:
                interrupted = _discarding(rt, running.leased.job, interrupted)
            table.decide(running, interrupted)


async def _flush_notes(rt: Runtime, entry: Entry) -> None:
    """Have the noter write what ``entry``'s job reported (if anything),
    before its outcome goes to the completer: at most ``notes_interval``,
    shielded (the handler is done; the executor's scope may be cancelled).
    A lost lease's notes are dropped instead (the store would refuse them)."""
    job_id = entry.leased.job.id
    if not rt.notes.holds(job_id):
        return
    if entry.lost:
        rt.notes.discard(job_id)
        return
    with trio.CancelScope(shield=True):
        await rt.notes.flush_for(job_id, rt.config.notes_interval)


async def _run_handler(rt: Runtime, entry: Entry, slot: Slot, watchdog: Watchdog) -> Settlement:
    job = entry.leased.job
    ref = entry.leased.ref
    damage = _damage(job)
    if damage is not None:
        return Settlement(ref, SettleKind.DEAD, error=damage)
    task = rt.registry.tasks.get(job.kind)
    # The job's id, kind and queue are in its record (and in the log line):
    # the error says only what went wrong.
    if task is None:
        # another worker may have its handler (a rolling deploy, a shared queue)
        return rt.unknown_kinds.unclaimed(entry.leased)
    try:
        payload: Any = decode_payload(job.payload, task.payload_type)
    except PayloadError as exc:
        return Settlement(ref, SettleKind.DEAD, error=str(exc))
    except Exception as exc:  # a decoder bug must not crash the executor
        return Settlement(ref, SettleKind.DEAD, error=f"payload does not decode: {exc!r}")
    save_after_first_payload()  # the code cache: what the first decode compiled
    deadline = trio.current_time() + job.timeout
    ctx = JobContext(
        job=job,
        worker_id=rt.config.worker_id,
        deadline=deadline,
        app=rt.app,
        lease=entry,
        lifespan=rt.lifespan,
        scope=slot.scope,
        in_thread=task.in_thread,
        notes=rt.notes,
    )
    slot.entry = entry
    slot.deadline = deadline
    watchdog.started(deadline)
    value: object
    try:
        if rt.registry.middleware:
            value = await _with_middleware(rt, task, entry, payload, ctx, slot, watchdog)
            if task.isolate:
                return cast(Settlement, value)
        elif task.on_loop:
            value = await task.fn(payload, ctx)  # type: ignore[misc]  # on_loop: awaitable
        elif task.isolate:  # (an async handler's path does not look)
            return await _isolated(rt, task, entry, ctx, slot, watchdog)
        else:
            value = await _in_thread(rt, task, payload, ctx, slot, watchdog)
    except SkipRetry as exc:
        return Settlement(ref, SettleKind.DEAD, error=_error_text(exc, "SkipRetry"))
    except Retry as exc:
        return _failure(rt, task, job, ref, _error_text(exc, "Retry"), exc.delay)
    except RateLimited as exc:
        # not a failure: again later, the attempt given back (see RateLimited)
        error = _error_text(exc, "RateLimited")
        return Settlement(ref, SettleKind.DEFER, error=error, retry_delay=exc.retry_after)
    except Exception as exc:
        if task.never_retry and isinstance(exc, task.never_retry):
            label = f"{type(exc).__name__} (never retried for this task)"
            return Settlement(ref, SettleKind.DEAD, error=_error_text(exc, label))
        return _failure(rt, task, job, ref, _error_text(exc))
    else:
        return _success(rt, task, ref, value)
    finally:
        # Cancelled or not, the slot no longer runs this job: the watchdog
        # may not cancel the next one on its account (the table forgets the
        # scope when the outcome is decided).
        slot.entry = None


async def _in_thread(
    rt: Runtime, task: TaskSpec, payload: Any, ctx: JobContext, slot: Slot, watchdog: Watchdog
) -> object:
    """A plain-function handler, in a worker thread (never on the event
    loop), at most ``sync_concurrency`` at once. Its timeout stops while it
    waits for a thread and runs again from when one takes it (the lease is
    renewed, and enforced, all along). When its run is called off (timeout,
    lost lease, abort, shutdown past its grace) the thread is abandoned: the
    outcome is decided at once, its slot goes to the next plain handler,
    and the thread's result, when it comes, is dropped (see
    ``runtime._threads`` for the account kept of such threads)."""
    left = slot.deadline - trio.current_time()
    slot.deadline = math.inf  # the watchdog passes it by while it waits
    run: ThreadRun | None = None
    try:
        run = await rt.threads.wait_slot(ctx.job)
        slot.deadline = ctx.deadline = trio.current_time() + left
        watchdog.started(slot.deadline)
        # ``run`` is "CapacityLimiter-like" (trio documents the protocol; its
        # annotation names only the final class): Trio tells it when the
        # thread really ends, so an abandoned one is accounted for.
        limiter = cast(trio.CapacityLimiter, run)
        return await trio.to_thread.run_sync(
            task.fn, payload, ctx, limiter=limiter, abandon_on_cancel=True
        )
    except trio.Cancelled:
        ctx.call_off()  # the abandoned thread may still be watching
        if run is not None:  # (a cancelled wait holds no slot)
            rt.threads.call_off(run)
        raise


async def _isolated(
    rt: Runtime, task: TaskSpec, entry: Entry, ctx: JobContext, slot: Slot, watchdog: Watchdog
) -> Settlement:
    """An isolated handler's run in a child process of the worker's pool
    (``runtime._isolation``), and its outcome. Its job waits for an idle
    child without its timeout running (its lease renewed, and enforced,
    all along); then the child has ``timeout`` (its soft limit, enforced
    in the child) plus ``hard_limit_grace`` before this executor's scope
    is cancelled (the watchdog) and the child killed. A child that dies in
    the run fails the attempt with how it ended. Whenever the run does not
    end with an answer (hard limit, lost lease, abort, shutdown past its
    grace) the child is killed and replaced, never reused."""
    # imported with the pool's module: only an app with isolated tasks has one
    from ..runtime._isolation import ChildDied
    from ..runtime._isolation_wire import run_request

    pool = rt.isolation
    assert pool is not None  # the worker opens it for an app with isolated tasks
    job, ref = entry.leased.job, entry.leased.ref
    slot.deadline = math.inf  # the watchdog passes it by while it waits
    child = await pool.take()
    try:
        now = trio.current_time()
        ctx.deadline = now + job.timeout
        slot.deadline = ctx.deadline + rt.config.hard_limit_grace
        watchdog.started(slot.deadline)
        reply = await pool.run(child, run_request(job, rt.config.worker_id), ctx.take_note)
    except ChildDied as exc:
        pool.replace(child)
        log_event(log, logging.WARNING, str(exc), job=job.id, kind=job.kind, pid=child.pid)
        return _failure(rt, task, job, ref, f"ChildDied: {exc}")
    except BaseException:
        pool.replace(child)
        if slot.deadline <= trio.current_time():
            why = "isolated handler past its hard limit: child process killed"
            log_event(log, logging.WARNING, why, job=job.id, kind=job.kind, pid=child.pid)
        raise
    pool.give_back(child)
    if reply.ok:
        return _isolated_success(rt, task, ref, reply.result)
    if reply.how in ("skip", "never_retry", "dead"):
        return Settlement(ref, SettleKind.DEAD, error=reply.error)
    if reply.how == "rate_limited":
        delay = reply.delay or 0.0  # (the child always sends RateLimited's)
        return Settlement(ref, SettleKind.DEFER, error=reply.error, retry_delay=delay)
    return _failure(rt, task, job, ref, reply.error, reply.delay)


def _isolated_success(rt: Runtime, task: TaskSpec, ref: LeaseRef, data: bytes | None) -> Settlement:
    """An isolated handler returned: its result as the child encoded it
    (and checked against the size limit), kept as :func:`_success` keeps
    one made here."""
    retain = rt.config.retain_succeeded if task.retain_succeeded is None else task.retain_succeeded
    if data is None:
        return Settlement(ref, SettleKind.SUCCEEDED, retain_for=retain)
    return Settlement(
        ref, SettleKind.SUCCEEDED, retain_for=retain, result=data, result_ttl=task.result_ttl
    )


async def _with_middleware(
    rt: Runtime,
    task: TaskSpec,
    entry: Entry,
    payload: Any,
    ctx: JobContext,
    slot: Slot,
    watchdog: Watchdog,
) -> object:
    """The handler inside every registered middleware, the first one
    outermost, all within the run's cancel scope (timeouts apply). For an
    isolated task: the Settlement of its run in a child (middleware runs
    here, around that run)."""
    async with contextlib.AsyncExitStack() as stack:
        for middleware in rt.registry.middleware:
            await stack.enter_async_context(middleware(ctx))
        if task.on_loop:
            return await task.fn(payload, ctx)  # type: ignore[misc]
        if task.isolate:
            return await _isolated(rt, task, entry, ctx, slot, watchdog)
        return await _in_thread(rt, task, payload, ctx, slot, watchdog)


def _success(rt: Runtime, task: TaskSpec, ref: LeaseRef, value: object) -> Settlement:
    """A handler returned ``value``: succeeded, with its result encoded by the
    task's return annotation (none kept without one). A result that does not
    encode, or is over the size limit, fails the job for good (dead): its
    side effects are done, so running it again would repeat them."""
    retain = rt.config.retain_succeeded if task.retain_succeeded is None else task.retain_succeeded
    if task.result_type is None or task.result_ttl <= 0:
        return Settlement(ref, SettleKind.SUCCEEDED, retain_for=retain)
    try:
        data = encode_payload(value, task.result_type, what="result")
    except PayloadError as exc:
        return Settlement(ref, SettleKind.DEAD, error=f"result does not encode: {exc}")
    except Exception as exc:  # an unstructure hook's bug: the job fails, not the executor
        return Settlement(ref, SettleKind.DEAD, error=f"result does not encode: {exc!r}")
    if len(data) > task.max_result_bytes:
        return Settlement(
            ref,
            SettleKind.DEAD,
            error=(
                f"result is {len(data)} bytes encoded, over the {task.max_result_bytes}-byte limit"
            ),
        )
    return Settlement(
        ref, SettleKind.SUCCEEDED, retain_for=retain, result=data, result_ttl=task.result_ttl
    )


def _discarding(rt: Runtime, job: Job, dead: Settlement) -> Settlement:
    """``dead`` as a DISCARD when the job's task discards its dead jobs
    (``discard_dead``): deleted, not kept dead. A job of no registered task
    (or of a damaged kind) stays DEAD."""
    task = rt.registry.tasks.get(job.kind) if type(job.kind) is str else None
    if task is not None and task.discard_dead:
        return attrs.evolve(dead, kind=SettleKind.DISCARD)
    return dead


#: The fields the executor reads of a leased job, judged as every path
#: judges them (``store._record_rules``) before it runs one.
_READS = ("kind", "payload", "attempts", "max_retries", "timeout")
_READS_SOUND = fields_sound(_READS)


def _damage(job: Job) -> str | None:
    """Why a leased job cannot be run as its record says, or None. The
    stores dead-letter damaged records before handing them out (they judge
    every field by the same rules); this keeps one that slipped through (a
    store bug, a newer writer) from crashing the executor into its restart
    limit: it goes dead instead, once. A timeout may be infinite (no
    timeout); a number too large for a float is not a number."""
    if _READS_SOUND(job):
        return None
    for name in _READS:
        why = value_problem(RULE_OF[name], getattr(job, name))
        if why is not None:
            return f"damaged record: {why}"
    return None  # (unreachable: a field the compiled check refused has a problem)


def _interrupted(rt: Runtime, entry: Entry) -> Settlement | None:
    """The outcome of a handler cancelled by its own scope."""
    job = entry.leased.job
    if entry.lost:
        log_event(log, logging.WARNING, "lease lost: handler cancelled", job=job.id, kind=job.kind)
        return None
    if entry.deadline <= trio.current_time():
        # The scope's deadline (the lease's) passed: no renewal got through
        # in time, and none extends it now (InFlight.renewed).
        if rt.table.mark_lost(entry):
            rt.report_lost(entry, "lease ended before a renewal got through: handler cancelled")
        return None
    if entry.abort_requested:
        log_event(log, logging.INFO, "abort: handler cancelled", job=job.id, kind=job.kind)
        return Settlement(entry.leased.ref, SettleKind.ABORTED, error=abort_error())
    task = rt.registry.tasks.get(job.kind)
    error = f"TimeoutError: handler exceeded its {job.timeout:g}s timeout"
    if task is not None and task.isolate:
        error += (
            f" and its {rt.config.hard_limit_grace:g}s hard_limit_grace: its child process "
            "was killed"
        )
    return _failure(rt, task, job, entry.leased.ref, error)


def _failure(
    rt: Runtime,
    task: TaskSpec | None,
    job: Job,
    ref: LeaseRef,
    error: str,
    delay: float | None = None,
) -> Settlement:
    """A failed attempt: retry after ``delay`` (None: the task's backoff,
    else the worker's), or dead once the attempts are used up."""
    if job.attempts > job.max_retries:
        return Settlement(
            ref,
            SettleKind.DEAD,
            error=f"retries exhausted after {job.attempts} attempt(s): {error}",
        )
    if delay is None:
        policy = task.retry if task is not None and task.retry is not None else rt.config.retry
        delay = policy.delay(job.attempts)
    return Settlement(ref, SettleKind.RETRY, error=error, retry_delay=delay)
