"""State one worker's actors share: the store, the in-flight table, the
event bus, counters and leadership. Owned by the worker, so it outlives any
actor that crashes and restarts; each piece has one writer, named below."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
from trio_util import AsyncValue

from ..records._attrs_methods import fields_eq, fields_repr
from ..records._jobs import Job, LeasedJob
from ..records._log import log_event, log_job_event
from ..store import Capability, Leadership, SetAside, Store, capabilities_of
from ._aggregates import AggregateTally
from ._config import WorkerConfig
from ._events import EventBus, JobDead, LeaseLost
from ._inflight import Entry, InFlight, Stage, lease_deadline
from ._metrics import RoundTripTally
from ._notes import NotesBuffer
from ._recycle import Recycle
from ._registry import Registry, WorkerHost
from ._threads import HandlerThreads
from ._unknown_kinds import UnknownKinds

if TYPE_CHECKING:
    # Child processes: imported only for an app with isolated tasks.
    from ._isolation import ChildPool

log = logging.getLogger("chronos_trio.worker")

#: Newer-format job ids remembered so each is warned about once.
_NEWER_SEEN_MAX = 10_000


@attrs.define
class Counters:
    """What this worker did, counted by the actor that did it (``dead`` only
    by :meth:`Runtime.report_dead`). The worker's statistics copy every
    field by name (``WorkerStatistics``)."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    leased: int = 0
    succeeded: int = 0
    retried: int = 0
    #: Every job the store dead-lettered for this worker: by its outcome, an
    #: expiry at lease, a damaged record, unclaimed past its grace, or the
    #: recovery of an expired lease (also in ``recovered``).
    dead: int = 0
    #: Of ``dead``: jobs deleted instead of kept (``discard_dead`` tasks).
    discarded: int = 0
    released: int = 0
    lost: int = 0
    recovered: int = 0
    promoted: int = 0
    trimmed: int = 0
    triggered: int = 0
    #: Damaged records the store dead-lettered when this worker met them
    #: (also counted in ``dead``).
    damaged: int = 0
    #: Index entries without a record the store quarantined for this worker.
    quarantined: int = 0
    #: Records of a newer format this worker left alone (once per job).
    newer_skipped: int = 0
    #: Jobs an abort stopped, as the store applied it (by this worker's
    #: settle or its recovery of an expired lease).
    aborted: int = 0
    #: Jobs of a kind this worker has no handler for that the store sent back
    #: for a worker that has one (their attempt given back); those it
    #: dead-lettered instead, past ``unknown_kind_grace``, count in ``dead``.
    unclaimed: int = 0


@attrs.define(eq=False)
class Runtime:
    __repr__ = fields_repr

    app: WorkerHost
    store: Store
    config: WorkerConfig
    #: Every lease held, and its stage (the table is the only writer of stages).
    table: InFlight
    #: Events for the notifier (published by completer, heartbeater,
    #: recoverer and the supervisor; delivered by the notifier).
    events: EventBus
    #: What becomes of jobs whose kind has no handler here (used by the executors).
    unknown_kinds: UnknownKinds
    counters: Counters = attrs.field(factory=Counters)
    #: The leadership this worker holds (None: a follower). Set only by the
    #: leader-elector (and cleared by the scheduler when the store rejects its
    #: epoch); singleton duties run only while it is not None.
    leadership: AsyncValue[Leadership | None] = attrs.field(factory=lambda: AsyncValue(None))
    #: The threads plain-function handlers run in (sync_concurrency), and
    #: the abandoned ones still running. Used only by the executors.
    threads: HandlerThreads = attrs.field(factory=lambda: HandlerThreads(1, 1))
    #: Whether this worker asked to be recycled, and why (the leaser reports
    #: its last lease, the recycler asks, the worker waits for it).
    recycle: Recycle = attrs.field(factory=Recycle)
    #: The child processes isolated handlers run in (None: the app has no
    #: isolated task). Set by the worker before any actor runs, used only
    #: by the executors.
    isolation: ChildPool | None = None
    #: Running jobs' notes not yet written: added by handlers (through
    #: their JobContext), taken by the noter, flushed for a finishing job by
    #: its executor. Replaced by :meth:`create`.
    notes: NotesBuffer = attrs.field(factory=lambda: NotesBuffer(offered=False))
    #: What the app's lifespan yielded (set by the worker before any actor runs).
    lifespan: Any = None
    #: When this worker registered in the store's worker registry (store
    #: clock; None until then). Set only by the registrar, once: a restarted
    #: registrar keeps the worker's start time.
    registered_at: float | None = None
    #: The store's round trips counted for the metrics object (None: it
    #: takes none). Filled by the store's observer, taken only by ``gauges``.
    round_trips: RoundTripTally | None = None
    #: Outcomes and run times not yet added to the store's per-minute
    #: aggregates (None: the store keeps none). Counted by the completer
    #: and :meth:`report_dead`, taken by the ``aggregator``.
    aggregates: AggregateTally | None = None
    #: Newer-format records already warned about (the store reports them on
    #: every call while they wait): bounded, oldest forgotten first.
    _newer_seen: dict[str, None] = attrs.field(factory=dict)

    @property
    def registry(self) -> Registry:
        return self.app.registry

    @classmethod
    def create(cls, app: WorkerHost, store: Store, config: WorkerConfig) -> Runtime:
        return cls(
            app=app,
            store=store,
            config=config,
            table=InFlight(config.max_in_flight, config.queue_buffer),
            events=EventBus(config.event_buffer),
            unknown_kinds=UnknownKinds(config),
            threads=HandlerThreads(config.sync_concurrency, config.max_abandoned_threads),
            notes=NotesBuffer(offered=Capability.NOTES in capabilities_of(store)),
            aggregates=AggregateTally()
            if Capability.AGGREGATES in capabilities_of(store)
            else None,
        )

    def admit(self, batch: Sequence[LeasedJob], asked_at: float) -> list[Entry]:
        """Take the in-flight slots of ``batch``, leases asked for at
        ``asked_at`` (Trio's clock; their deadline counts from then), count
        and log them: the leaser's leases, and the successors a settle
        handed the completer leased. Raises as :meth:`InFlight.admit`."""
        cfg = self.config
        entries = self.table.admit(batch, lease_deadline(asked_at, cfg.lease_duration), asked_at)
        self.counters.leased += len(batch)
        if log.isEnabledFor(logging.DEBUG):
            for leased in batch:
                log_event(
                    log,
                    logging.DEBUG,
                    "leased",
                    job=leased.job.id,
                    kind=leased.job.kind,
                    queue=leased.job.queue,
                    attempt=leased.job.attempts,
                )
        return entries

    async def dispatch(self, entries: list[Entry]) -> None:
        """Queue ``entries`` for the executors in order, waiting for room
        when the run queue is full. No yield per job while there is room: a
        whole batch reaches the executors in one scheduling round. An entry
        no longer LEASED by then is skipped: queued by the other actor that
        dispatches (the leaser's restart queues every LEASED entry, the
        completer's handed-over ones among them), or released (shutdown)."""
        table = self.table
        for entry in entries:
            while entry.stage is Stage.LEASED and not table.dispatch_nowait(entry):
                await table.wait_queue_room()

    def report_aside(self, aside: SetAside, *, recovered: bool = False) -> SetAside:
        """Log, count and publish what a store call set aside (the ``aside``
        of its result: damaged records dead-lettered, index entries
        quarantined, newer-format records left alone). Never awaits;
        returns ``aside``."""
        if not aside:
            return aside
        for job in aside.dead:
            self.counters.damaged += 1
            self.report_dead(job, recovered=recovered)
        for entry in aside.quarantined:
            self.counters.quarantined += 1
            log_event(
                log,
                logging.WARNING,
                "quarantined",
                job=entry.job_id,
                queue=entry.queue,
                reason=entry.reason,
            )
        for entry in aside.newer:
            if entry.job_id in self._newer_seen:
                continue
            if len(self._newer_seen) >= _NEWER_SEEN_MAX:
                del self._newer_seen[next(iter(self._newer_seen))]
            self._newer_seen[entry.job_id] = None
            self.counters.newer_skipped += 1
            log_event(
                log,
                logging.WARNING,
                "newer record format: left for a newer worker",
                job=entry.job_id,
                queue=entry.queue,
                reason=entry.reason,
            )
        return aside

    def report_lost(self, entry: Entry, why: str) -> None:
        """Log, count and publish a lease this worker just gave up (the
        caller marked ``entry`` lost in the table). Never awaits."""
        job = entry.leased.job
        log_job_event(
            log,
            logging.WARNING,
            "lease lost",
            job,
            why=why,
        )
        self.counters.lost += 1
        self.events.publish(LeaseLost(job))

    def report_dead(
        self,
        job: Job,
        *,
        recovered: bool,
        duration: float | None = None,
        started_at: float | None = None,
        leased_at: float | None = None,
    ) -> None:
        """Count, log and publish a job the store just dead-lettered (the
        notifier runs the dead-letter hooks): the one place ``counters.dead``
        grows. Never awaits."""
        self.counters.dead += 1
        if self.aggregates is not None:
            self.aggregates.failed_run(job.queue, job.kind, duration)
        log_event(
            log,
            logging.WARNING,
            "dead",
            job=job.id,
            kind=job.kind,
            queue=job.queue,
            attempts=job.attempts,
            error=(job.last_error.splitlines() or [""])[0],
        )
        if self.events.wants(JobDead):
            self.events.publish(
                JobDead(job, job.last_error, recovered, duration, started_at, leased_at)
            )


__all__ = ["Counters", "Runtime"]
