"""executor pool: runs handlers, ``concurrency`` at a time, and decides each
job's outcome.

Outcomes: return -> succeeded; exception -> retry with backoff, or dead when
the attempts are used up; ``SkipRetry`` -> dead at once; timeout -> cancelled
and counted as a failure; unknown kind or undecodable payload -> dead with a
clear error; lease lost -> cancelled and forgotten (another worker owns it).

Cost per job matters here (it is most of a no-op job's CPU), so nothing is
built per job that can live per executor: each executor runs its handlers
inside one long-lived cancel scope, and one watchdog enforces every handler's
timeout, instead of a cancel scope and a registered deadline per job. A scope
is replaced only after something cancelled it (a timeout or a lost lease).
And a batch does not wake every idle executor: see :class:`Dispatch`.
"""

from __future__ import annotations

import math
import traceback
from typing import Any

import trio

from ..records._codec import decode_payload
from ..records._errors import PayloadError, SkipRetry
from ..records._jobs import Job, LeaseRef
from ..runtime._context import JobContext
from ..runtime._inflight import Entry, Stage
from ..runtime._state import JobDispatched, JobFinished, Runtime, log
from ..store import SettleKind, Settlement

#: Longest error text kept on a job (message plus the end of the traceback).
MAX_ERROR_CHARS = 4000


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    # A previous incarnation's executors died with these jobs: a handler that
    # was running is released (run again soon), a decided outcome is resent.
    for entry in rt.table.in_stage(Stage.RUNNING):
        _decide(entry, Settlement(entry.leased.ref, SettleKind.RELEASE))
    for entry in rt.table.in_stage(Stage.DONE):
        await rt.finished_send.send(JobFinished(entry.token))
    watchdog = Watchdog()
    dispatch = Dispatch(rt.dispatch_recv)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        for _ in range(rt.config.concurrency):
            slot = Slot()
            watchdog.slots.append(slot)
            nursery.start_soon(_executor, rt, slot, watchdog, dispatch)
        task_status.started()


class Dispatch:
    """How idle executors take jobs from the leased-job channel.

    If every idle executor waited on the channel, a batch of 64 would cost 64
    task switches even when each handler finishes without ever yielding. So
    one idle executor listens on the channel and the rest are parked. An
    executor that finishes a handler takes the next queued job itself, with no
    checkpoint. Helpers are woken only as needed: one to take over listening
    when nobody listens, and, while jobs are queued, two more for each woken
    executor that found work, so handlers that do yield fan out to every
    executor within a few scheduling rounds, and ones that never yield run
    back to back in one.

    Invariant: while an executor is parked, another one listens or has been
    woken and has yet to look at the channel, so a queued job always has
    someone on its way to it.
    """

    def __init__(self, recv: trio.MemoryReceiveChannel[JobDispatched]) -> None:
        self._recv = recv
        self._parked = trio.lowlevel.ParkingLot()
        self._listening = False
        self._waking = 0

    async def next(self) -> JobDispatched:
        woken = False
        while True:
            try:
                message = self._recv.receive_nowait()
                break
            except trio.WouldBlock:
                pass
            if self._listening or self._waking:
                await self._parked.park()
                # Only an unpark gets here (a cancelled park raises), and
                # every unpark was counted in _waking.
                self._waking -= 1
                woken = True
                continue
            self._listening = True
            try:
                message = await self._recv.receive()
            finally:
                self._listening = False
            woken = True
            break
        self._after_take(woken)
        return message

    def _after_take(self, woken: bool) -> None:
        parked = len(self._parked)
        if not parked:
            return
        if woken and self._recv.statistics().current_buffer_used:
            wake = 2  # fan out while jobs are queued
        elif not self._listening and not self._waking:
            wake = 1  # someone must be on the channel
        else:
            return
        wake = min(wake, parked)
        self._waking += wake
        self._parked.unpark(count=wake)


class Slot:
    """One executor: the entry it runs (None when idle), that handler's
    deadline on Trio's clock, and the scope its handlers run in."""

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
    while True:
        slot.scope = trio.CancelScope()
        running: Entry | None = None  # survives the scope's cancellation
        with slot.scope:
            # A cancel that came too late for its handler (it returned first)
            # must not hit the next job: start that one in a fresh scope.
            while not slot.scope.cancel_called:
                message = await dispatch.next()
                entry = rt.table.get(message.leased.token)
                if entry is None or entry.stage is not Stage.QUEUED:
                    continue
                if entry.lost:
                    outcome: Settlement | None = None
                elif rt.draining:
                    outcome = Settlement(entry.leased.ref, SettleKind.RELEASE)
                else:
                    entry.stage = Stage.RUNNING
                    running = entry
                    outcome = await _run_handler(rt, entry, slot, watchdog)
                    running = None
                _finish(rt, entry, outcome)
        # Only this executor's scope being cancelled gets here: the running
        # handler timed out or lost its lease (``running`` is set), or the
        # cancel arrived after the handler returned (it is None; a job is
        # never taken from the channel in a cancelled scope).
        if running is not None and running.stage is Stage.RUNNING:
            _finish(rt, running, _interrupted(rt, running))


def _finish(rt: Runtime, entry: Entry, outcome: Settlement | None) -> None:
    _decide(entry, outcome)
    # Never blocks: the channel holds one slot per in-flight entry.
    rt.finished_send.send_nowait(JobFinished(entry.token))


def _decide(entry: Entry, outcome: Settlement | None) -> None:
    entry.outcome = outcome
    entry.stage = Stage.DONE
    entry.cancel_scope = None


async def _run_handler(rt: Runtime, entry: Entry, slot: Slot, watchdog: Watchdog) -> Settlement:
    job = entry.leased.job
    ref = entry.leased.ref
    task = rt.registry.tasks.get(job.kind)
    if task is None:
        return Settlement(
            ref,
            SettleKind.DEAD,
            error=(
                f"job {job.id} (queue {job.queue!r}): no handler registered for kind {job.kind!r}"
            ),
        )
    try:
        payload: Any = decode_payload(job.payload, task.payload_type)
    except PayloadError as exc:
        return Settlement(ref, SettleKind.DEAD, error=f"job {job.id} (kind {job.kind!r}): {exc}")
    deadline = trio.current_time() + job.timeout
    ctx = JobContext(job=job, worker_id=rt.config.worker_id, deadline=deadline, app=rt.app)
    entry.context = ctx
    entry.cancel_scope = slot.scope
    slot.entry = entry
    slot.deadline = deadline
    watchdog.started(deadline)
    try:
        await task.fn(payload, ctx)
    except SkipRetry as exc:
        return Settlement(ref, SettleKind.DEAD, error=_error_text(exc, "SkipRetry"))
    except Exception as exc:
        return _failure(rt, job, ref, _error_text(exc))
    else:
        return Settlement(ref, SettleKind.SUCCEEDED, retain_for=rt.config.retain_succeeded)
    finally:
        # Cancelled or not, the slot no longer runs this job: neither the
        # watchdog nor a lost lease may cancel the next one on its account.
        slot.entry = None
        entry.cancel_scope = None


def _interrupted(rt: Runtime, entry: Entry) -> Settlement | None:
    """The outcome of a handler cancelled by its own scope."""
    job = entry.leased.job
    if entry.lost:
        log.warning("lease lost job=%s kind=%s: handler cancelled", job.id, job.kind)
        return None
    return _failure(
        rt,
        job,
        entry.leased.ref,
        f"TimeoutError: handler exceeded its {job.timeout:g}s timeout",
    )


def _failure(rt: Runtime, job: Job, ref: LeaseRef, error: str) -> Settlement:
    if job.attempts > job.max_retries:
        return Settlement(
            ref,
            SettleKind.DEAD,
            error=f"retries exhausted after {job.attempts} attempt(s): {error}",
        )
    delay = rt.config.retry.delay(job.attempts)
    return Settlement(ref, SettleKind.RETRY, error=error, retry_delay=delay)


def _error_text(exc: BaseException, label: str | None = None) -> str:
    head = f"{label or type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(exc))
    text = head if not tb else f"{head}\n{tb}"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-(MAX_ERROR_CHARS * 3) // 4 :]
    return text
