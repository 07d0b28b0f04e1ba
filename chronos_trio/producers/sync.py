"""The synchronous producer: enqueue jobs and wait for their results from
code that does not run Trio (Django and Flask views, scripts, threads).

``SyncProducer`` holds one redis-py client (its settings, and the pool of
Cluster, Sentinel and TLS connections) and one subscription for waiters,
shared by every thread that uses it; it never imports or runs Trio. On a
plain Redis node (``redis://``, ``unix://``) its commands go over blocking
sockets of its own (``store.redis._blocking_node``: one enqueue is about
one loopback round trip), which send AUTH, CLIENT SETNAME and SELECT as
redis-py's connections do. Jobs are validated and encoded exactly as
``Task.new_job`` does, and stored by the same Lua scripts, routed by the
same topology, as the Trio store's (``chronos_trio.store.redis``).
"""

from __future__ import annotations

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
from ..store.redis._blocking import BlockingDoneListener, BlockingExecutor
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
class SyncJobHandle(HandleFields, RedisPlacement):
    """One job, as a synchronous producer holds it (the fields and methods
    of ``chronos_trio.JobHandle``, blocking instead of async)."""

    producer: SyncProducer = attrs.field(eq=False, repr=False)
    result_type_of: ResultTypeOf = attrs.field(eq=False, repr=False)

    def status(self) -> JobOutcome:
        """Where the job stands now (state, attempts, last error, result bytes).

        Raises JobNotFound when no such job exists (never enqueued in that
        queue, or finished and no longer kept), StoreError when Redis cannot
        be reached."""
        found = self.producer._outcome(self.ref)
        if found is None:
            raise not_found(self.job_id, self.queue)
        return found

    def result(self, timeout: float | None = None) -> Any:
        """Block until the job has finished, at most ``timeout`` seconds
        (None: as long as it takes), and return its result decoded by its
        task's return annotation (None for a task that keeps no result).
        Redis wakes the waiter when the job finishes: nothing polls.

        Raises JobFailed (with ``last_error`` and ``attempts``) when the job
        is dead; ResultTimeout when it has not finished in time (it goes on:
        call again); ResultExpired when it succeeded but its result is no
        longer kept; JobNotFound when no such job exists (a job of a task
        that keeps no result, finished before the wait began, unless it was
        enqueued with ``keep_outcome=True``); PayloadError when
        the stored result does not decode as the task's result type;
        StoreError when Redis cannot be reached; ValueError for a negative or
        NaN timeout."""
        check_wait_timeout(timeout)
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            found = self.producer._wait_outcome(self.ref, max(0.0, min(left, WAIT_CHUNK)))
            if found is None:
                raise not_found(self.job_id, self.queue)
            if found.finished:
                return result_of(found, self.job_id, self.kind, self.result_type_of)
            if time.monotonic() >= deadline:
                assert timeout is not None
                raise timed_out(self.job_id, timeout, found)

    def progress(self) -> JobProgress | None:
        """The job's latest progress (``job.progress`` in its handler), or
        None while none was reported: as ``chronos_trio.JobHandle.progress``.
        Raises JobNotFound when no such job exists, StoreError when the store
        cannot be reached, MissingCapability (a TypeError) on a store that
        keeps no notes."""
        return (self.notes()).progress

    def notes(self) -> JobNotes:
        """The job's progress and log lines (every attempt's): as
        ``chronos_trio.JobHandle.notes``. Raises as :meth:`progress`."""
        found = self.producer._notes(self.ref)
        if found is None:
            raise not_found(self.job_id, self.queue)
        return found


class SyncProducer:
    """Enqueue jobs and follow them on Redis or Redis Cluster, from threads.

    ``url`` is the store URL the workers use (``redis://``, ``rediss://``,
    ``unix://``, ``redis+cluster://``, ``redis+sentinel://``, with the same
    query options; None: the app's ``store_url``). ``app`` (optional) is
    the App whose tasks are registered: enqueueing by kind name then uses
    the task's payload type, queue and defaults, and results decode by its
    return annotation; without it, kinds take JSON-able or bytes payloads
    and results read as JSON (else bytes). ``namespace`` overrides the
    URL's. Nothing connects until first use.

    One producer serves every thread of a process (a Flask or Django app's
    worker threads): the client pools its connections, and all waiting
    threads share one pub/sub connection. ``close()`` (or ``with``) ends it.

    Raises ``ValueError`` for the memory store (it lives in one process and
    cannot be shared) or a URL that is not Redis's; every failure to reach
    Redis later is a StoreError. Every option is checked here, before
    anything connects (see ``check_producer_options``): ``TypeError`` for a
    name that is neither the producer's nor one of redis-py's client
    options (naming it and the closest valid one), for ``decode_responses``
    or ``protocol`` (the store sets them), for a redis-py option the
    URL's client does not take (a Cluster's on a ``redis://`` URL), for
    redis-py options on a PostgreSQL or SQLite store, or an ``app`` that
    is not an App;
    ``ValueError`` for an empty ``url`` or ``namespace``, a
    ``max_payload_bytes`` not an int >= 1, a ``topology_ttl`` not a finite
    number >= 0 or a timeout not a finite number > 0.
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
            what="SyncProducer",
            flavor="blocking",
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
        self._exec = BlockingExecutor(
            self._p.client_factory("blocking"), self._p.core, settings.description
        )
        self._done = BlockingDoneListener(
            self._exec.client, self._p.core.keys.done_channel, settings.description
        )

    @property
    def namespace(self) -> str:
        return self._p.settings.namespace

    # -- producing -------------------------------------------------------------------
    def enqueue(
        self,
        task: TaskLike | str,
        payload: Any,
        *,
        connection: object = None,
        **options: Unpack[EnqueueOptions],
    ) -> SyncJobHandle:
        """Enqueue one job of ``task`` (a Task, or a kind name); returns once
        Redis has it (with ``wait_replicas`` in the URL, that many replicas
        too). Options are ``Task.enqueue``'s (``delay``, ``run_at``,
        ``job_id``, ``queue``, ``max_retries``, ``timeout``); with ``job_id``
        it is idempotent (``created`` is False for an existing job).

        Raises ``ValueError`` for a bad option, PayloadError for a payload
        that does not encode or is too large, StoreError when Redis cannot be
        reached (the job may or may not be stored: enqueue it again with the
        same ``job_id`` to be sure of one).

        ``connection`` (PostgreSQL and SQLite stores only): your own
        connection (psycopg, SQLAlchemy connection or session, Django's; a
        ``sqlite3.Connection`` to the store's file); the job is written in
        its transaction, so it exists iff that commits (see docs/postgres.md
        and ``chronos_trio.store.sqlite._transactional``).
        MissingCapability on a Redis store, TypeError for a connection of
        an unknown kind, ValueError for a closed one; nothing is stored then.
        A producer on PostgreSQL or SQLite given no connection commits each
        call on a connection of its own."""
        job, decoder = self._p.new_job(task, payload, options)
        if connection is not None or self._p.sql is not None:
            [result] = self._enqueue_sql([job], connection)
        else:
            [result] = self._exec.run(enqueue_one_plan(self._p.core, job))
        check_duplicate(job, result)
        return SyncJobHandle(*handle_args(result, job), self, decoder)

    def enqueue_many(
        self,
        task: TaskLike | str,
        payloads: Iterable[Any],
        *,
        delay: float | None = None,
        queue: str | None = None,
        connection: object = None,
    ) -> list[SyncJobHandle]:
        """Enqueue many jobs of ``task`` in one batch (one round trip, one
        script per partition); every payload is checked before any job is
        sent. Returns a handle per job, in order. Raises as :meth:`enqueue`."""
        jobs, decoder = self._p.new_jobs(task, payloads, delay, queue)
        if not jobs:
            return []
        if connection is not None or self._p.sql is not None:
            results = self._enqueue_sql(jobs, connection)
        else:
            results = self._exec.run(enqueue_plan(self._p.core, jobs))
        return [
            SyncJobHandle(r.job_id, r.created, r.run_at, r.placement, q, k, self, decoder)
            for r, (q, k) in zip(results, queues_and_kinds(jobs), strict=True)
        ]

    def job(self, job_id: str, *, queue: str | None = None, kind: str = "") -> SyncJobHandle:
        """A handle for the job ``job_id`` (enqueued anywhere, by any
        process). ``queue`` spares a search of every queue; ``kind`` names
        its task when the stored record does not. Reads nothing yet."""
        self._p.check_job_id(job_id)
        return SyncJobHandle(job_id, False, 0.0, None, queue, kind, self, self._p.result_type_of)

    def _enqueue_sql(self, jobs: Sequence[NewJob], connection: object) -> list[EnqueueResult]:
        """On a SQL store: in the caller's transaction on ``connection``, else
        on a connection of the producer's own, committed at once."""
        store = self._p.in_transaction()
        if connection is None:
            return store.enqueue_committed_blocking(jobs)
        return store.enqueue_in_transaction_blocking(connection, jobs)

    # -- reading outcomes ------------------------------------------------------------
    def _notes(self, ref: JobRef) -> JobNotes | None:
        if self._p.sql is not None:
            return self._p.sql.notes_blocking(ref)
        return self._exec.run(notes_read_plan(self._p.core, ref))

    def _outcome(self, ref: JobRef) -> JobOutcome | None:
        if self._p.sql is not None:
            return self._p.sql.outcome_blocking(ref)
        found, _ = self._exec.run(watch_plan(self._p.core, ref, ""))
        return found

    def _wait_outcome(self, ref: JobRef, timeout: float) -> JobOutcome | None:
        """The job's outcome once it finished or ``timeout`` seconds passed
        (then as it is; None: no such job). Subscribe first, then register
        and watch, then block (see ``store.redis._watch``)."""
        if self._p.sql is not None:
            return self._poll_outcome(ref, timeout)
        if not timeout > 0:
            return self._outcome(ref)
        deadline = time.monotonic() + timeout
        if self._done.ready(timeout):
            plan = wait_plan(self._done.table, self._p.core.keys, ref, self._done.channel)
            try:
                step = next(plan)
                while True:
                    reply: Any = None
                    if type(step) is Watch:
                        reply = self._exec.run(watch_plan(self._p.core, step.ref, step.channel))
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0 or not step.event.wait(left):
                            break  # the deadline: read it once more, as it is
                    step = plan.send(reply)
            except StopIteration as done:
                found: JobOutcome | None = done.value
                return found
            finally:
                plan.close()
        return self._outcome(ref)

    def _poll_outcome(self, ref: JobRef, timeout: float) -> JobOutcome | None:
        """On a SQL store: look until the job finished or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        pause = POLL_FIRST
        while True:
            found = self._outcome(ref)
            left = deadline - time.monotonic()
            if found is None or found.finished or left <= 0:
                return found
            time.sleep(min(pause, left))
            pause = min(POLL_MOST, pause * 2)

    # -- lifecycle -------------------------------------------------------------------
    def statistics(self) -> ProducerStatistics:
        self._p.redis_only("statistics")
        return statistics_of(self._exec.stats, self._done)

    def close(self) -> None:
        """Stop the waiters' subscription and close the connections; threads
        still waiting are woken and get a StoreError. The producer cannot be
        used afterwards."""
        if self._p.sql is not None:
            self._p.close_sql()
            return
        self._done.stop()
        self._exec.close()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["SyncJobHandle", "SyncProducer"]
