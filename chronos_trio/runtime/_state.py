"""State one worker's actors share: the store, the in-flight table, the
event bus, counters and leadership. Owned by the worker, so it outlives any
actor that crashes and restarts; each piece has one writer, named below."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio
from trio_util import AsyncValue

from ..records._jobs import Job
from ..store import Leadership, Store
from ._config import WorkerConfig
from ._events import EventBus, JobDead
from ._inflight import InFlight
from ._registry import Registry, WorkerHost

log = logging.getLogger("chronos_trio.worker")


@attrs.define
class Counters:
    """What this worker did, counted by the actor that did it."""

    leased: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lost: int = 0
    recovered: int = 0
    promoted: int = 0
    trimmed: int = 0
    triggered: int = 0


@attrs.define(eq=False)
class Runtime:
    app: WorkerHost
    store: Store
    config: WorkerConfig
    #: Every lease held, and its stage (the table is the only writer of stages).
    table: InFlight
    #: Events for the notifier (published by completer, heartbeater,
    #: recoverer and the supervisor; delivered by the notifier).
    events: EventBus
    counters: Counters = attrs.field(factory=Counters)
    #: The leadership this worker holds (None: a follower). Set only by the
    #: leader-elector (and cleared by the scheduler when the store rejects its
    #: epoch); singleton duties run only while it is not None.
    leadership: AsyncValue[Leadership | None] = attrs.field(factory=lambda: AsyncValue(None))
    #: Threads plain-function handlers may use at once (sync_concurrency).
    sync_limiter: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(1))
    #: What the app's lifespan yielded (set by the worker before any actor runs).
    lifespan: Any = None

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
            sync_limiter=trio.CapacityLimiter(config.sync_concurrency),
        )

    def report_dead(self, job: Job, *, recovered: bool, duration: float | None = None) -> None:
        """Log a job the store just dead-lettered and publish it (the
        notifier runs the dead-letter hooks). Never awaits."""
        log.warning(
            "dead job=%s kind=%s queue=%s attempts=%s error=%s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            (job.last_error.splitlines() or [""])[0],
        )
        if self.events.wants(JobDead):
            self.events.publish(JobDead(job, job.last_error, recovered, duration))


__all__ = ["Counters", "Runtime"]
