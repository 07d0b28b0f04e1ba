"""The SQLite store's hot path: enqueue, claims, renew, settle, recovery,
wake-ups, results and workflow continuations (a part of SqliteStore).

Every write is one ``BEGIN IMMEDIATE`` transaction on the store's writer
connection (``Database.write``), every read one snapshot on a reader; the
statements are in ``_enqueue``, ``_claim`` (+ ``_limits``), ``_settle`` and
``_results``. The store's clock is read inside each transaction, once the
file's write lock is held. Wake-ups are ``_changes``: a commit of this
process wakes its waiters at once, another process's within
``wake_interval``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import trio

from ...records._jobs import EnqueueResult, JobOutcome, JobRef, JobState, LeaseRef, NewJob
from ...records._workflow import Arrival
from .._roles import (
    NOTHING_LEASED,
    NOTHING_SET_ASIDE,
    Continuation,
    FlowRole,
    GroupStatus,
    LeaseResult,
    QueueWeight,
    RecoverResult,
    RenewResult,
    ResultRole,
    Settlement,
    SettleResult,
    WorkerRole,
)
from . import _enqueue, _lease, _results, _settle
from ._base import SqlitePart
from ._claim import Claimer

#: A result waiter's registration outlives its wait by this much (s).
_WAITER_SLACK = 5.0

_FINISHED = (JobState.SUCCEEDED, JobState.DEAD, JobState.ABORTED)


class WorkerPart(SqlitePart, WorkerRole, ResultRole, FlowRole):
    _claimer: Claimer | None = None

    def _claims(self) -> Claimer:
        if self._claimer is None:
            self._claimer = Claimer()
        return self._claimer

    # -- producing -------------------------------------------------------------------
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            await trio.lowlevel.checkpoint()
            return []
        db = self._db
        return await db.write(lambda conn: _enqueue.enqueue(conn, jobs, db.now()), what="enqueue")

    # -- the hot path ----------------------------------------------------------------
    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> LeaseResult:
        """See :meth:`WorkerRole.lease`; a due scheduled or retry_wait job is
        leased as a ready one (this store runs no promoter)."""
        if count <= 0 or not any(q.weight > 0 for q in queues):
            await trio.lowlevel.checkpoint()
            return NOTHING_LEASED
        claimer = self._claims()
        db = self._db
        return await db.write(
            lambda conn: claimer.claim(
                conn, queues, count, worker_id, lease_duration, strict, db.now()
            ),
            what="lease",
            wake=False,
        )

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        if not leases:
            await trio.lowlevel.checkpoint()
            return RenewResult((), NOTHING_SET_ASIDE, frozenset())
        db = self._db
        return await db.write(
            lambda conn: _lease.renew(conn, leases, lease_duration, db.now()),
            what="renew",
            wake=False,
        )

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        if not settlements:
            await trio.lowlevel.checkpoint()
            return SettleResult((), NOTHING_SET_ASIDE, frozenset(), frozenset())
        db = self._db
        result, _filled = await db.write(
            lambda conn: _settle.settle(conn, settlements, db.now()), what="settle"
        )
        return result

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        if limit <= 0 or not queues:
            await trio.lowlevel.checkpoint()
            return RecoverResult((), (), NOTHING_SET_ASIDE, ())
        db = self._db
        result = await db.write(
            lambda conn: _lease.recover(conn, queues, limit, db.now()),
            what="recover",
            wake=False,
        )
        if result.requeued or result.dead or result.aborted or result.aside.dead:
            db.changes.signal()  # jobs came back (or finished for their waiters)
        return result

    # -- waiting ---------------------------------------------------------------------
    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        """Returns at once when a queue that is not paused has a due job
        (unless ``held``); otherwise at the first change of the file (a
        commit of this process at once, of another within
        ``wake_interval``), the next due time, ``idle_poll`` seconds or
        ``timeout``, whichever comes first. Raises ValueError for a negative
        ``timeout``, StoreError when the file cannot be read."""
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0, got {timeout!r}")
        names = list(dict.fromkeys(queues))
        db = self._db
        mark = await db.changes.mark()
        ready, next_due, now = await db.read(
            lambda conn: (*_results.probe(conn, names, db.now()), db.now()), what="wait_ready"
        )
        if ready and not held:
            return
        wait = min(timeout, db.options.idle_poll)
        if next_due is not None:
            wait = min(wait, max(0.0, next_due - now))
        await db.changes.wait(mark, wait)

    # -- results ---------------------------------------------------------------------
    async def outcome(self, ref: JobRef) -> JobOutcome | None:
        db = self._db
        return await db.read(lambda conn: _results.outcome(conn, ref, db.now()), what="outcome")

    async def wait_outcome(self, ref: JobRef, *, timeout: float) -> JobOutcome | None:
        """Registers once (for the whole wait: a finished job nothing keeps
        stays readable for its waiters), then reads the job's state at each
        change of the file (a commit of this process at once, another's
        within ``wake_interval``) and every ``idle_poll`` seconds. Looks
        are reads: a waiter never writes while it waits, so waiters never
        wake each other."""
        db = self._db
        me = secrets.token_hex(8)
        deadline = trio.current_time() + max(0.0, timeout)
        ttl = max(0.0, timeout) + _WAITER_SLACK
        mark = await db.changes.mark()
        state = await db.write(
            lambda conn: _results.register_waiter(conn, ref, me, ttl, db.now()),
            what="wait_outcome",
            wake=False,
        )
        try:
            while state is not None and state not in _FINISHED:
                left = deadline - trio.current_time()
                if left <= 0:
                    break
                await db.changes.wait(mark, min(left, db.options.idle_poll))
                mark = await db.changes.mark()
                state = await db.read(
                    lambda conn: _results.state_of(conn, ref), what="wait_outcome"
                )
        finally:
            with trio.CancelScope(shield=True):
                await db.write(
                    lambda conn: _results.unregister_waiter(conn, ref.job_id, me),
                    what="wait_outcome",
                    wake=False,
                )
        return await self.outcome(ref)

    # -- workflows -------------------------------------------------------------------
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        return await self._db.read(
            lambda conn: _results.continuations(conn, queues, limit), what="continuations"
        )

    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        if not done:
            await trio.lowlevel.checkpoint()
            return
        await self._db.write(
            lambda conn: _results.finish_continuations(conn, done), what="finish_continuations"
        )

    async def wait_continuations(self, timeout: float) -> None:
        """Returns at the next change of the file (a settle of this process
        at once, another's within ``wake_interval``) or after ``timeout``."""
        db = self._db
        mark = await db.changes.mark()
        await db.changes.wait(mark, timeout)

    async def group_arrive(
        self, arrivals: Sequence[Arrival], ttl: float
    ) -> list[list[bytes | None] | None]:
        if not arrivals:
            await trio.lowlevel.checkpoint()
            return []
        db = self._db
        return await db.write(
            lambda conn: _results.group_arrive(conn, arrivals, ttl, db.now()),
            what="group_arrive",
        )

    async def group_status(self, group_ids: Sequence[str]) -> list[GroupStatus]:
        if not group_ids:
            await trio.lowlevel.checkpoint()
            return []
        db = self._db
        return await db.read(
            lambda conn: _results.group_status(conn, group_ids, db.now()), what="group_status"
        )
