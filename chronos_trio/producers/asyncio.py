"""The asyncio producer: enqueue jobs and wait for their results from asyncio
programs (FastAPI, aiohttp, Starlette), on the running loop's own sockets.

``AsyncioProducer`` is :class:`~chronos_trio.producers.sync.SyncProducer`
with awaitable methods: the same job validation and encoding
(``Task.new_job``), the same Lua scripts and routing, waiting pushed by
pub/sub; it never imports or runs Trio. On a plain Redis node
(``redis://``, ``unix://``) its commands go over non-blocking sockets of
the loop (``store.redis._asyncio_node``: one awaited enqueue is about one
loopback round trip, on the stdlib loop or uvloop); Cluster, Sentinel and
TLS go through ``redis.asyncio``, as does the pub/sub its waiters share.
Its connections belong to the event loop that first uses it: make one per
loop (a FastAPI lifespan is the place), and ``await producer.aclose()`` at
its end.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Unpack

import attrs

from ..records._jobs import EnqueueResult, JobOutcome, JobRef, NewJob
from ..records._notes import JobNotes, JobProgress
from ..records._options import EnqueueOptions
from ..records._producing import (
    WAIT_CHUNK,
    HandleFields,
    ResultTypeOf,
    check_duplicate,
    check_wait_timeout,
    not_found,
    result_of,
    timed_out,
)
from ..store.redis._asyncio import AsyncioDoneListener, AsyncioExecutor
from ..store.redis._enqueue import enqueue_plan
from ..store.redis._enqueue_one import enqueue_one_plan
from ..store.redis._notes import read_plan as notes_read_plan
from ..store.redis._watch import Watch, wait_plan, watch_plan
from ._common import (
    POLL_FIRST,
    POLL_MOST,
    AppLike,
    ProducerCore,
    ProducerStatistics,
    RedisPlacement,
    TaskLike,
    handle_args,
    queues_and_kinds,
    statistics_of,
)


@attrs.define(eq=True)  # not frozen, as JobHandle (a bulk enqueue makes many)
class AsyncioJobHandle(HandleFields, RedisPlacement):
    """One job, as an asyncio producer holds it (``chronos_trio.JobHandle``
    for asyncio: ``await handle.result(timeout=10)``)."""

    producer: AsyncioProducer = attrs.field(eq=False, repr=False)
    result_type_of: ResultTypeOf = attrs.field(eq=False, repr=False)

    async def status(self) -> JobOutcome:
        """Where the job stands now. Raises as ``SyncJobHandle.status``."""
        found = await self.producer._outcome(self.ref)
        if found is None:
            raise not_found(self.job_id, self.queue)
        return found

    async def result(self, timeout: float | None = None) -> Any:
        """Wait until the job has finished, at most ``timeout`` seconds (None:
        as long as it takes), and return its typed result; Redis wakes the
        waiter, nothing polls. Cancellable. Raises as
        ``SyncJobHandle.result`` (JobFailed, ResultTimeout, ResultExpired,
        JobNotFound, PayloadError, StoreError, ValueError)."""
        check_wait_timeout(timeout)
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            found = await self.producer._wait_outcome(self.ref, max(0.0, min(left, WAIT_CHUNK)))
            if found is None:
                raise not_found(self.job_id, self.queue)
            if found.finished:
                return result_of(found, self.job_id, self.kind, self.result_type_of)
            if time.monotonic() >= deadline:
                assert timeout is not None
                raise timed_out(self.job_id, timeout, found)

    async def progress(self) -> JobProgress | None:
        """The job's latest progress, or None: as ``SyncJobHandle.progress``."""
        return (await self.notes()).progress

    async def notes(self) -> JobNotes:
        """The job's progress and log lines: as ``SyncJobHandle.notes``."""
        found = await self.producer._notes(self.ref)
        if found is None:
            raise not_found(self.job_id, self.queue)
        return found


class AsyncioProducer:
    """Enqueue jobs and follow them on Redis or Redis Cluster, from asyncio.

    Takes what ``SyncProducer`` takes (``url``, ``app``, ``namespace``, ...)
    and raises what it raises: ``ValueError`` for the memory store (it lives
    in one process and cannot be shared), ``TypeError`` or ``ValueError``
    for a bad option (checked here, before anything connects, as
    ``SyncProducer``'s), StoreError when Redis cannot be reached or does not
    answer within ``socket_timeout`` (a timed-out enqueue may have been
    stored: enqueue it again with its ``job_id`` to know). Nothing connects
    until first use. Every task of the loop may use it at once: on a plain
    ``redis://`` or ``unix://`` node each round trip takes a connection of
    its own (a few kept idle), while Cluster, Sentinel and TLS go through
    redis.asyncio's own connection pool; all waiting tasks share one
    pub/sub connection. Cancelling a task mid enqueue closes the connection
    it was using, never reused half-read (the enqueue may have been stored,
    as after a timeout).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        app: AppLike | None = None,
        namespace: str | None = None,
        topology_ttl: float = 1.0,
        max_payload_bytes: int | None = None,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        **redis_kwargs: Any,
    ) -> None:
        self._p = ProducerCore(
            url,
            app,
            what="AsyncioProducer",
            flavor="asyncio",
            namespace=namespace,
            topology_ttl=topology_ttl,
            max_payload_bytes=max_payload_bytes,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            redis_kwargs=redis_kwargs,
        )
        if self._p.sql is not None:
            return  # PostgreSQL or SQLite: the store's own connections, per call
        settings = self._p.settings
        factory = self._p.client_factory("asyncio")
        self._exec = AsyncioExecutor(factory, self._p.core, settings.description)
        self._done = AsyncioDoneListener(
            self._exec.client, self._p.core.keys.done_channel, settings.description
        )

    @property
    def namespace(self) -> str:
        return self._p.settings.namespace

    # -- producing -------------------------------------------------------------------
    async def enqueue(
        self,
        task: TaskLike | str,
        payload: Any,
        *,
        connection: object = None,
        **options: Unpack[EnqueueOptions],
    ) -> AsyncioJobHandle:
        """Enqueue one job of ``task`` (a Task, or a kind name); returns once
        Redis has it. Options and errors as ``SyncProducer.enqueue``;
        ``connection`` may also be an asyncio one (psycopg
        ``AsyncConnection``, SQLAlchemy ``AsyncConnection`` or
        ``AsyncSession``), awaited on the loop; a synchronous one (a
        ``sqlite3.Connection`` on SQLite) is used in a thread."""
        job, decoder = self._p.new_job(task, payload, options)
        if connection is not None or self._p.sql is not None:
            [result] = await self._enqueue_sql([job], connection)
        else:
            [result] = await self._exec.run(enqueue_one_plan(self._p.core, job))
        check_duplicate(job, result)
        return AsyncioJobHandle(*handle_args(result, job), self, decoder)

    async def enqueue_many(
        self,
        task: TaskLike | str,
        payloads: Iterable[Any],
        *,
        delay: float | None = None,
        queue: str | None = None,
        connection: object = None,
    ) -> list[AsyncioJobHandle]:
        """Enqueue many jobs of ``task`` in one batch (every payload checked
        first); a handle per job, in order. Raises as :meth:`enqueue`."""
        jobs, decoder = self._p.new_jobs(task, payloads, delay, queue)
        if not jobs:
            return []
        if connection is not None or self._p.sql is not None:
            results = await self._enqueue_sql(jobs, connection)
        else:
            results = await self._exec.run(enqueue_plan(self._p.core, jobs))
        return [
            AsyncioJobHandle(r.job_id, r.created, r.run_at, r.placement, q, k, self, decoder)
            for r, (q, k) in zip(results, queues_and_kinds(jobs), strict=True)
        ]

    def job(self, job_id: str, *, queue: str | None = None, kind: str = "") -> AsyncioJobHandle:
        """A handle for the job ``job_id`` (enqueued anywhere). Reads nothing yet."""
        self._p.check_job_id(job_id)
        return AsyncioJobHandle(job_id, False, 0.0, None, queue, kind, self, self._p.result_type_of)

    async def _enqueue_sql(self, jobs: Sequence[NewJob], connection: object) -> list[EnqueueResult]:
        """On a SQL store: in the caller's transaction on ``connection``, else
        on a connection of the producer's own, committed at once."""
        store = self._p.in_transaction()
        if connection is None:
            return await store.enqueue_committed_asyncio(jobs)
        return await store.enqueue_in_transaction_asyncio(connection, jobs)

    # -- reading outcomes ------------------------------------------------------------
    async def _notes(self, ref: JobRef) -> JobNotes | None:
        if self._p.sql is not None:
            return await asyncio.to_thread(self._p.sql.notes_blocking, ref)
        return await self._exec.run(notes_read_plan(self._p.core, ref))

    async def _outcome(self, ref: JobRef) -> JobOutcome | None:
        if self._p.sql is not None:
            return await asyncio.to_thread(self._p.sql.outcome_blocking, ref)
        found, _ = await self._exec.run(watch_plan(self._p.core, ref, ""))
        return found

    async def _wait_outcome(self, ref: JobRef, timeout: float) -> JobOutcome | None:
        """As ``SyncProducer._wait_outcome``: subscribe first, then register
        and watch, then block; at the deadline, read the job as it is."""
        if not timeout > 0:
            return await self._outcome(ref)
        if self._p.sql is not None:
            return await self._poll_outcome(ref, timeout)
        deadline = time.monotonic() + timeout
        if await self._done.ready(timeout):
            plan = wait_plan(self._done.table, self._p.core.keys, ref, self._done.channel)
            try:
                step = next(plan)
                while True:
                    reply: Any = None
                    if type(step) is Watch:
                        reply = await self._exec.run(
                            watch_plan(self._p.core, step.ref, step.channel)
                        )
                    else:
                        left = deadline - time.monotonic()
                        try:
                            await asyncio.wait_for(step.event.wait(), max(0.0, left))
                        except TimeoutError:
                            break  # the deadline: read it once more, as it is
                    step = plan.send(reply)
            except StopIteration as done:
                found: JobOutcome | None = done.value
                return found
            finally:
                plan.close()
        return await self._outcome(ref)

    async def _poll_outcome(self, ref: JobRef, timeout: float) -> JobOutcome | None:
        """On a SQL store: look until the job finished or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        pause = POLL_FIRST
        while True:
            found = await self._outcome(ref)
            left = deadline - time.monotonic()
            if found is None or found.finished or left <= 0:
                return found
            await asyncio.sleep(min(pause, left))
            pause = min(POLL_MOST, pause * 2)

    # -- lifecycle -------------------------------------------------------------------
    def statistics(self) -> ProducerStatistics:
        self._p.redis_only("statistics")
        return statistics_of(self._exec.stats, self._done)

    async def aclose(self) -> None:
        """Stop the waiters' subscription and close the connections; tasks
        still waiting are woken and get a StoreError. The producer cannot be
        used afterwards."""
        if self._p.sql is not None:
            await asyncio.to_thread(self._p.close_sql)
            return
        await self._done.aclose()
        await self._exec.aclose()

    async def __aenter__(self) -> AsyncioProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


__all__ = ["AsyncioJobHandle", "AsyncioProducer"]
