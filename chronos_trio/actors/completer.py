"""completer: writes outcomes to the store in batches, then frees the slots.

Settlement is fenced by each lease's token, so a lease lost meanwhile is
reported and changes nothing. While the store is unreachable the batch is
kept and retried with backoff; nothing is dropped.
"""

from __future__ import annotations

import logging

import attrs
import trio

from ..records._jobs import Job, JobState
from ..runtime._backoff import Backoff
from ..runtime._inflight import Entry, Stage
from ..runtime._state import Runtime, log
from ..store import SettleKind, StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "completer")
    task_status.started()
    # A previous incarnation died holding these: settle them again (a second
    # settle of an applied outcome is fenced off harmlessly).
    orphans = rt.table.in_stage(Stage.SETTLING)
    if orphans:
        await _settle(rt, orphans, backoff)
    limit = rt.config.batch_size
    while True:
        message = await rt.finished_recv.receive()
        batch = _claim(rt, message.token)
        # One scheduling round lets executors that finished in the same tick
        # add their outcomes, so a burst costs one store call, not one each.
        await trio.lowlevel.checkpoint()
        while len(batch) < limit:
            try:
                message = rt.finished_recv.receive_nowait()
            except trio.WouldBlock:
                break
            batch += _claim(rt, message.token)
        if batch:
            await _settle(rt, batch, backoff)


def _claim(rt: Runtime, token: str) -> list[Entry]:
    entry = rt.table.get(token)
    if entry is None or entry.stage is not Stage.DONE:
        return []  # a duplicate notice after an executor restart
    entry.stage = Stage.SETTLING
    return [entry]


async def _settle(rt: Runtime, batch: list[Entry], backoff: Backoff) -> None:
    to_store = [e for e in batch if e.outcome is not None]
    while True:
        try:
            applied = await rt.store.settle([e.outcome for e in to_store if e.outcome])
            break
        except StoreError as exc:
            await backoff.failed(exc)
    backoff.reset()
    debug = log.isEnabledFor(logging.DEBUG)
    for entry, ok in zip(to_store, applied, strict=True):
        _account(rt, entry, ok, debug)
    rt.table.remove_many([entry.token for entry in batch])
    for entry, ok in zip(to_store, applied, strict=True):
        if ok and entry.outcome is not None and entry.outcome.kind is SettleKind.DEAD:
            await rt.dead_lettered(_dead_view(entry.leased.job, entry.outcome.error))


def _account(rt: Runtime, entry: Entry, ok: bool, debug: bool) -> None:
    job = entry.leased.job
    assert entry.outcome is not None
    kind = entry.outcome.kind
    if not ok:
        rt.counters.lost += 1
        log.warning(
            "outcome %s of job=%s kind=%s rejected: lease no longer held", kind, job.id, job.kind
        )
        return
    if kind is SettleKind.SUCCEEDED:
        rt.counters.succeeded += 1
        if debug:
            log.debug(
                "succeeded job=%s kind=%s queue=%s attempt=%d",
                job.id,
                job.kind,
                job.queue,
                job.attempts,
            )
    elif kind is SettleKind.RETRY:
        rt.counters.retried += 1
        log.info(
            "retry job=%s kind=%s queue=%s attempt=%d in=%.2fs error=%s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            entry.outcome.retry_delay,
            entry.outcome.error.splitlines()[0] if entry.outcome.error else "",
        )
    elif kind is SettleKind.DEAD:
        rt.counters.dead += 1
    else:
        rt.counters.released += 1


def _dead_view(job: Job, error: str) -> Job:
    """The job as the store now holds it, without another round trip."""
    return attrs.evolve(job, state=JobState.DEAD, last_error=error, lease_token="")
