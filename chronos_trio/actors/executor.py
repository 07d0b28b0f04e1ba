"""executor pool: runs handlers, ``concurrency`` at a time, and decides each
job's outcome.

Outcomes: return -> succeeded; exception -> retry with backoff, or dead when
the attempts are used up; ``SkipRetry`` -> dead at once; timeout -> cancelled
and counted as a failure; unknown kind or undecodable payload -> dead with a
clear error; lease lost -> cancelled and forgotten (another worker owns it).
"""

from __future__ import annotations

import traceback
from typing import Any

import trio

from .._codec import decode_payload
from .._context import JobContext
from .._errors import PayloadError, SkipRetry
from .._inflight import Entry, Stage
from .._job import Job, LeaseRef
from .._runtime import JobFinished, Runtime, log
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
    async with trio.open_nursery() as nursery:
        for _ in range(rt.config.concurrency):
            nursery.start_soon(_executor, rt)
        task_status.started()


async def _executor(rt: Runtime) -> None:
    async for message in rt.dispatch_recv:
        entry = rt.table.get(message.leased.token)
        if entry is None or entry.stage is not Stage.QUEUED:
            continue
        if entry.lost:
            outcome: Settlement | None = None
        elif rt.draining:
            outcome = Settlement(entry.leased.ref, SettleKind.RELEASE)
        else:
            entry.stage = Stage.RUNNING
            outcome = await _run_handler(rt, entry)
        _decide(entry, outcome)
        # Never blocks: the channel holds one slot per in-flight entry.
        rt.finished_send.send_nowait(JobFinished(entry.token))


def _decide(entry: Entry, outcome: Settlement | None) -> None:
    entry.outcome = outcome
    entry.stage = Stage.DONE
    entry.cancel_scope = None


async def _run_handler(rt: Runtime, entry: Entry) -> Settlement | None:
    job = entry.leased.job
    ref = entry.leased.ref
    task = rt.app.tasks.get(job.kind)
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
    with trio.CancelScope(deadline=deadline) as scope:
        entry.cancel_scope = scope
        try:
            await task.fn(payload, ctx)
        except SkipRetry as exc:
            return Settlement(ref, SettleKind.DEAD, error=_error_text(exc, "SkipRetry"))
        except Exception as exc:
            return _failure(rt, job, ref, _error_text(exc))
        else:
            return Settlement(ref, SettleKind.SUCCEEDED, retain_for=rt.config.retain_succeeded)
    # Only our own scope's cancellation lands here: lease lost or timeout.
    if entry.lost:
        log.warning("lease lost job=%s kind=%s: handler cancelled", job.id, job.kind)
        return None
    return _failure(rt, job, ref, f"TimeoutError: handler exceeded its {job.timeout:g}s timeout")


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
