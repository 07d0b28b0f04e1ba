"""Bulk actions: one admin action (requeue, run now, delete, abort) on many
jobs, chosen by ID or as "every job matching a search", in batches.

Each job's action is the store's own atomic admin operation
(``AdminRole.run_now``, ``delete_job``, ``abort``), which refuses a job
whose state it does not apply to: a job that changed state since it was
found is **skipped and counted**, never forced. A job the action does not
apply to when it is found (a leased job to delete, a ready one to requeue)
is skipped and counted too.

"Every job matching" runs as a sequence of bounded steps
(:func:`act_on_matching`, each at most ``batch`` jobs and one search
call's scan bound), each returning a :class:`BulkProgress` whose
``cursor`` the next step takes: the dashboard runs one step per request
behind a progress page that continues itself, the command line loops. So a
large set never holds one request, or the store, for long, and an
operator who closes the page stops it between two steps.

How steps go on: the search is limited to the action's *source states*
(requeue: dead; run now: scheduled, retry_wait, dead; delete: every state
but leased; abort: the waiting states, then leased). An action moves a
job out of them (requeued, run, deleted, aborted), so a step that moved
any job searches again from the same cursor (the ones it moved are gone
from what matches; a store whose cursor is an index rank, Redis, would
skip jobs if it went on from the next rank), and a step that moved none
goes on from the page's cursor. Either way every step makes progress (a
step that moved jobs searches again what it searched; at worst every
other step moves nothing and goes on). A job skipped by a step that also
moved others is found, and counted skipped, again by the next step.
Aborting a leased job only flags it (it stays leased until its worker
settles it): the leased phase always goes on from the page's cursor.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from ..records._jobs import Job, JobState
from ..store import AbortResult, Store
from ..store._search import (
    SCAN_LIMIT,
    JobQuery,
    bad_cursor,
    decode_cursor,
    encode_cursor,
)

#: Jobs one bulk step acts on at most, by default.
BULK_BATCH = 200


class BulkAction(enum.StrEnum):
    """What a bulk action does to each job."""

    REQUEUE = "requeue"  # dead -> ready, attempts reset (as requeue-dead)
    RUN_NOW = "run_now"  # scheduled, retry_wait or dead -> ready now
    DELETE = "delete"  # any state but leased -> gone
    ABORT = "abort"  # waiting -> aborted; leased -> flagged, aborted by its worker

    @classmethod
    def parse(cls, text: str) -> BulkAction:
        """Parse an action name (``run-now`` too); ``ValueError`` listing the valid ones."""
        try:
            return cls(text.strip().lower().replace("-", "_"))
        except ValueError:
            names = ", ".join(a.value.replace("_", "-") for a in cls)
            raise ValueError(f"unknown bulk action {text!r}; expected one of: {names}") from None

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


_WAITING = (JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT)

#: Per action, its phases: (source states, whether the action moves a job out of them).
PHASES: dict[BulkAction, tuple[tuple[tuple[JobState, ...], bool], ...]] = {
    BulkAction.REQUEUE: (((JobState.DEAD,), True),),
    BulkAction.RUN_NOW: (((JobState.SCHEDULED, JobState.RETRY_WAIT, JobState.DEAD), True),),
    BulkAction.DELETE: ((tuple(s for s in JobState if s is not JobState.LEASED), True),),
    BulkAction.ABORT: ((_WAITING, True), ((JobState.LEASED,), False)),
}


def source_states(action: BulkAction) -> frozenset[JobState]:
    """The states ``action`` applies to."""
    return frozenset(s for states, _ in PHASES[action] for s in states)


@attrs.frozen
class BulkResult:
    """What a bulk action did: ``done`` jobs acted on, ``skipped`` (not in a
    state the action applies to, or changed state meanwhile), ``missing``
    (gone). For an abort, ``flagged`` of the done were leased: their workers
    abort them at their next renewal."""

    done: int = 0
    skipped: int = 0
    missing: int = 0
    flagged: int = 0

    def __add__(self, other: BulkResult) -> BulkResult:
        return BulkResult(
            self.done + other.done,
            self.skipped + other.skipped,
            self.missing + other.missing,
            self.flagged + other.flagged,
        )

    @property
    def seen(self) -> int:
        return self.done + self.skipped + self.missing


@attrs.frozen
class BulkProgress:
    """One step of :func:`act_on_matching`: what it did (``result``), how
    many records its search read (``scanned``), and the ``cursor`` the next
    step takes (None: finished)."""

    result: BulkResult
    scanned: int
    cursor: str | None

    @property
    def finished(self) -> bool:
        return self.cursor is None


async def act_on_job(store: Store, action: BulkAction, job: Job, reason: str = "") -> BulkResult:
    """``action`` on ``job`` (as found: its state decides whether it
    applies) with the store's atomic operation."""
    if job.state not in source_states(action) or (job.damage and action is not BulkAction.DELETE):
        return BulkResult(skipped=1)
    if action is BulkAction.ABORT:
        outcome = await store.abort(job.id, queue=job.queue, reason=reason)
        if outcome is AbortResult.NOT_FOUND:
            return BulkResult(missing=1)
        if outcome is AbortResult.FINISHED:
            return BulkResult(skipped=1)
        return BulkResult(done=1, flagged=int(outcome is AbortResult.FLAGGED))
    if action is BulkAction.DELETE:
        ok = await store.delete_job(job.id, queue=job.queue)
    else:  # requeue and run now: the job's state was checked against the action's
        ok = await store.run_now(job.id, queue=job.queue)
    return BulkResult(done=1) if ok else BulkResult(skipped=1)


async def act_on_ids(
    store: Store, action: BulkAction, refs: Sequence[tuple[str, str]], reason: str = ""
) -> BulkResult:
    """``action`` on each job of ``refs`` ((queue, job id) pairs), each
    read first (its state decides whether the action applies)."""
    total = BulkResult()
    for queue, job_id in dict.fromkeys(refs):
        job = await store.get_job(job_id, queue=queue)
        total += (
            BulkResult(missing=1) if job is None else await act_on_job(store, action, job, reason)
        )
    return total


def _phase_query(query: JobQuery, states: tuple[JobState, ...]) -> JobQuery | None:
    """``query`` limited to ``states``; None when they share none."""
    wanted = tuple(s for s in states if query.in_states(s))
    return attrs.evolve(query, states=wanted) if wanted else None


def _position(cursor: str | None) -> tuple[int, str | None]:
    if cursor is None:
        return 0, None
    p = decode_cursor(cursor)
    if not (
        isinstance(p, list)
        and len(p) == 2
        and isinstance(p[0], int)
        and not isinstance(p[0], bool)
        and p[0] >= 0
        and (p[1] is None or isinstance(p[1], str))
    ):
        raise bad_cursor(cursor)
    return p[0], p[1]


async def count_matching(
    store: Store, action: BulkAction, query: JobQuery, *, max_scanned: int = 200_000
) -> tuple[int, bool]:
    """How many jobs matching ``query`` ``action`` applies to now, and
    whether that is exact: counting reads at most ``max_scanned`` records
    (False: it stopped there, the count is a lower bound). What a
    confirmation states; jobs move meanwhile, so the action's own counts
    are what happened."""
    count = scanned = 0
    for states, _ in PHASES[action]:
        narrowed = _phase_query(query, states)
        cursor = None
        while narrowed is not None:
            if scanned >= max_scanned:
                return count, False
            page = await store.search_jobs(
                narrowed,
                cursor=cursor,
                limit=1000,
                scan_limit=min(SCAN_LIMIT, max_scanned - scanned),
            )
            count += len(page.jobs)
            scanned += page.scanned
            if page.cursor is None:
                break
            cursor = page.cursor
    return count, True


async def act_on_matching(
    store: Store,
    action: BulkAction,
    query: JobQuery,
    *,
    cursor: str | None = None,
    batch: int = BULK_BATCH,
    scan_limit: int = SCAN_LIMIT,
    reason: str = "",
) -> BulkProgress:
    """One step of ``action`` on every job matching ``query``: at most
    ``batch`` jobs, one search call (see the module docstring). Pass the
    returned ``cursor`` back until it is None. ``ValueError`` for a bad
    cursor or bounds."""
    phase, inner = _position(cursor)
    phases = PHASES[action]
    if phase >= len(phases):
        raise bad_cursor(cursor or "")
    while phase < len(phases):
        states, moves_out = phases[phase]
        narrowed = _phase_query(query, states)
        if narrowed is None:
            phase, inner = phase + 1, None
            continue
        page = await store.search_jobs(narrowed, cursor=inner, limit=batch, scan_limit=scan_limit)
        result = BulkResult()
        for job in page.jobs:
            result += await act_on_job(store, action, job, reason)
        following: tuple[int, str | None] | None
        if page.cursor is None:
            following = (phase + 1, None) if phase + 1 < len(phases) else None
        elif moves_out and result.done:
            following = (phase, inner)  # the moved ones left what matches: look again
        else:
            following = (phase, page.cursor)
        return BulkProgress(
            result, page.scanned, None if following is None else encode_cursor(list(following))
        )
    return BulkProgress(BulkResult(), 0, None)


__all__ = [
    "BULK_BATCH",
    "BulkAction",
    "BulkProgress",
    "BulkResult",
    "act_on_ids",
    "act_on_job",
    "act_on_matching",
    "count_matching",
    "source_states",
]
