"""The PostgreSQL store's hot path: enqueue, claims, renew, settle,
recovery, wake-ups, results and workflow continuations (a part of
PostgresStore).

Every operation is one transaction (``Database.run``); the statements are
in ``_enqueue`` (a server-side function), ``_claim`` (+ ``_limits``),
``_settle`` and ``_results``; wake-ups in ``_wake`` (NOTIFY) and
``_listen`` (one LISTEN connection per store, unless ``poll_only``).

Idle waits cost one probe query per wait (and per ``idle_poll`` seconds,
the fallback poll: 5 s under notifications, ``poll_interval`` in poll-only
mode); a notification or the next due time ends one sooner.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import psycopg
import trio

from ...records._jobs import EnqueueResult, JobOutcome, JobRef, JobState, LeaseRef, NewJob
from ...records._workflow import Arrival
from .. import _flag
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
    SettleKind,
    Settlement,
    SettleResult,
    StoreError,
    WorkerRole,
)
from . import _results, _settle
from ._base import PostgresPart
from ._claim import Claimer
from ._enqueue import enqueue_params, enqueue_query, enqueue_results
from ._listen import RETRY_AFTER, Listener, Waiter
from ._wake import DONE, OUTBOX, READY

log = logging.getLogger("chronos_trio.store.postgres")

#: A result waiter's registration outlives its wait by this much (s).
_WAITER_SLACK = 5.0


class WorkerPart(PostgresPart, WorkerRole, ResultRole, FlowRole):
    _claimer: Claimer | None = None
    _listener_: Listener | None = None
    _outbox_flag: _flag.Flag | None = None
    _outbox_pending = False

    # -- shared state, made on first use ---------------------------------------------
    def _claims(self) -> Claimer:
        if self._claimer is None:
            self._claimer = Claimer()
        return self._claimer

    def _listener(self) -> Listener | None:
        """The LISTEN connection's keeper (None in poll-only mode)."""
        if self._db.options.poll_only:
            return None
        if self._listener_ is None:
            self._listener_ = Listener(self._db)
        return self._listener_

    def _outbox(self) -> _flag.Flag:
        if self._outbox_flag is None:
            self._outbox_flag = _flag.Flag()
        return self._outbox_flag

    async def _close_waiting(self) -> None:
        """Close the LISTEN connection (the store's ``aclose``)."""
        listener, self._listener_ = self._listener_, None
        if listener is not None:
            await listener.aclose()

    # -- producing -------------------------------------------------------------------
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        if not jobs:
            await trio.lowlevel.checkpoint()
            return []
        query = enqueue_query(self._db.schema, jobs)
        params = enqueue_params(jobs)

        def work(conn: psycopg.Connection[Any]) -> list[EnqueueResult]:
            return enqueue_results(conn.execute(query, params).fetchall(), jobs)

        # one statement, atomic by itself: no BEGIN and COMMIT round trips
        return await self._db.run(work, what="enqueue", transaction=False)

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
        claimer = self._claims()
        if count <= 0 or not any(q.weight > 0 for q in queues):
            await trio.lowlevel.checkpoint()
            return NOTHING_LEASED

        def work(conn: psycopg.Connection[Any]) -> LeaseResult:
            return claimer.claim(conn, queues, count, worker_id, lease_duration, strict)

        return await self._db.run(work, what="lease", undo=self._give_back)

    def _give_back(self, result: LeaseResult) -> None:
        """In the claim's thread, its caller cancelled before it got the
        claim (a worker stopping): release the jobs leased to nobody, fenced
        by their tokens, so they are ready at once rather than after their
        leases expire. A failure here leaves that expiry to bring them back."""
        if not result.jobs:
            return
        releases = [Settlement(leased.ref, SettleKind.RELEASE) for leased in result.jobs]
        try:
            self._db.run_blocking(
                lambda conn: _settle.settle(conn, releases), "release of an abandoned claim"
            )
        except StoreError as exc:
            log.warning(
                "jobs claimed for a cancelled lease come back when their leases expire: %s", exc
            )

    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        if not leases:
            await trio.lowlevel.checkpoint()
            return RenewResult((), NOTHING_SET_ASIDE, frozenset())
        return await self._db.run(
            lambda conn: _settle.renew(conn, leases, lease_duration), what="renew"
        )

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        if not settlements:
            await trio.lowlevel.checkpoint()
            return SettleResult((), NOTHING_SET_ASIDE, frozenset(), frozenset())
        result, filled = await self._db.run(
            lambda conn: _settle.settle(conn, settlements), what="settle"
        )
        if filled:
            self._outbox_filled()
        return result

    async def recover_expired(self, queues: Sequence[str], limit: int) -> RecoverResult:
        if limit <= 0 or not queues:
            await trio.lowlevel.checkpoint()
            return RecoverResult((), (), NOTHING_SET_ASIDE, ())
        return await self._db.run(lambda conn: _settle.recover(conn, queues, limit), what="recover")

    # -- waiting ---------------------------------------------------------------------
    async def wait_ready(
        self, queues: Sequence[str], timeout: float, *, held: bool = False
    ) -> None:
        """Returns at once when a queue that is not paused has a due job
        (unless ``held``); otherwise at the first wake-up of one of
        ``queues``, the next due time, ``idle_poll`` seconds (the fallback
        poll) or ``timeout``, whichever comes first. Raises ValueError for a
        negative ``timeout``, StoreError when the store cannot be reached."""
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0, got {timeout!r}")
        names = list(dict.fromkeys(queues))
        listener = self._listener()
        waiter = listener.register(READY + q for q in names) if listener else None
        try:
            listening = listener is not None and await listener.connect()
            now, ready, next_due = await self._db.run(
                lambda conn: _results.probe(conn, names), what="wait_ready"
            )
            if ready and not held:
                return
            wait = min(timeout, self._db.options.idle_poll)
            if next_due is not None:
                wait = min(wait, max(0.0, next_due - now))
            if listener is not None and not listening:
                # the LISTEN connection is down: look again when it may be
                # back, not a whole fallback poll later
                wait = min(wait, RETRY_AFTER)
            await self._nap(listener if listening else None, waiter, wait)
        finally:
            if listener is not None and waiter is not None:
                listener.unregister(waiter)

    @staticmethod
    async def _nap(listener: Listener | None, waiter: Waiter | None, seconds: float) -> None:
        """Wait for ``waiter``'s wake-up (listening) or just ``seconds``."""
        if listener is not None and waiter is not None:
            await listener.wait(waiter, seconds)
        else:
            await trio.sleep(seconds)

    # -- results ---------------------------------------------------------------------
    async def outcome(self, ref: JobRef) -> JobOutcome | None:
        return await self._db.run(lambda conn: _results.outcome(conn, ref), what="outcome")

    async def wait_outcome(self, ref: JobRef, *, timeout: float) -> JobOutcome | None:
        """Registers (under a share lock of the job's row), reads the state,
        then waits for the finish's notification; looks again every
        ``idle_poll`` seconds meanwhile (a finish no notification announced,
        e.g. a lost LISTEN connection)."""
        listener = self._listener()
        waiter = listener.register([DONE + ref.job_id]) if listener else None
        me = secrets.token_hex(8)
        deadline = trio.current_time() + max(0.0, timeout)
        registered = False
        try:
            listening = listener is not None and await listener.connect()
            while True:
                ttl = max(0.0, deadline - trio.current_time()) + _WAITER_SLACK
                state = await self._db.run(
                    functools.partial(_results.register_waiter, ref=ref, waiter=me, ttl=ttl),
                    what="wait_outcome",
                )
                registered = True
                if state is None or state in (
                    JobState.SUCCEEDED,
                    JobState.DEAD,
                    JobState.ABORTED,
                ):
                    break
                left = deadline - trio.current_time()
                if left <= 0:
                    break
                await self._nap(
                    listener if listening else None,
                    waiter,
                    min(left, self._db.options.idle_poll),
                )
                if waiter is not None:
                    waiter.woke = False
        finally:
            if listener is not None and waiter is not None:
                listener.unregister(waiter)
        if registered:
            with trio.CancelScope(shield=True):
                await self._db.run(
                    lambda conn: _results.unregister_waiter(conn, ref.job_id, me),
                    what="wait_outcome",
                )
        return await self.outcome(ref)

    # -- workflows -------------------------------------------------------------------
    async def continuations(self, queues: Sequence[str], limit: int) -> list[Continuation]:
        return await self._db.run(
            lambda conn: _results.continuations(conn, queues, limit), what="continuations"
        )

    async def finish_continuations(self, done: Sequence[Continuation]) -> None:
        if not done:
            await trio.lowlevel.checkpoint()
            return
        await self._db.run(
            lambda conn: _results.finish_continuations(conn, done), what="finish_continuations"
        )

    async def wait_continuations(self, timeout: float) -> None:
        """Returns when a settle of this process filled the outbox (or one of
        another process, when its notification comes), or after ``timeout``."""
        flag = self._outbox()
        listener = self._listener()
        if listener is None or not await listener.connect():
            await flag.take(timeout)
            return
        if not self._outbox_pending:
            waiter = listener.register([OUTBOX])
            try:
                await listener.wait(waiter, timeout)
            finally:
                listener.unregister(waiter)
        self._outbox_pending = False
        await flag.take(0)  # lowered: a settle after this is for the next wait

    def _outbox_filled(self) -> None:
        """A settle of this process filled the outbox: wake the continuer."""
        self._outbox_pending = True
        self._outbox().set()
        listener = self._listener_
        if listener is not None:
            listener.dispatch(OUTBOX)

    async def group_arrive(
        self, arrivals: Sequence[Arrival], ttl: float
    ) -> list[list[bytes | None] | None]:
        if not arrivals:
            await trio.lowlevel.checkpoint()
            return []
        return await self._db.run(
            lambda conn: _results.group_arrive(conn, arrivals, ttl), what="group_arrive"
        )

    async def group_status(self, group_ids: Sequence[str]) -> list[GroupStatus]:
        if not group_ids:
            await trio.lowlevel.checkpoint()
            return []
        return await self._db.run(
            lambda conn: _results.group_status(conn, group_ids), what="group_status"
        )
