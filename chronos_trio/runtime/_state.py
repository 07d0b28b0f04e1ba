"""State one worker's actors share: the store, the in-flight table, the
channels between actors, counters and hooks. Owned by the worker, so it
outlives any actor that crashes and restarts."""

from __future__ import annotations

import logging

import attrs
import trio
from trio_util import AsyncValue

from ..records._jobs import Job, LeasedJob
from ..store import Leadership, Store
from ._config import WorkerConfig
from ._inflight import InFlight
from ._registry import Registry, WorkerHost

log = logging.getLogger("chronos_trio.worker")


@attrs.frozen
class JobDispatched:
    """leaser -> executors: run this leased job."""

    leased: LeasedJob


@attrs.frozen
class JobFinished:
    """executors -> completer: the entry with this token has its outcome."""

    token: str


@attrs.define
class Counters:
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
    table: InFlight
    dispatch_send: trio.MemorySendChannel[JobDispatched]
    dispatch_recv: trio.MemoryReceiveChannel[JobDispatched]
    finished_send: trio.MemorySendChannel[JobFinished]
    finished_recv: trio.MemoryReceiveChannel[JobFinished]
    counters: Counters = attrs.field(factory=Counters)
    #: Set when shutdown begins: executors stop starting handlers.
    draining: bool = False
    #: The leadership this worker holds (None: a follower). Set only by the
    #: leader-elector (and cleared by the scheduler when the store rejects its
    #: epoch); singleton duties run only while it is not None.
    leadership: AsyncValue[Leadership | None] = attrs.field(factory=lambda: AsyncValue(None))

    @property
    def registry(self) -> Registry:
        return self.app.registry

    @classmethod
    def create(cls, app: WorkerHost, store: Store, config: WorkerConfig) -> Runtime:
        dispatch_send, dispatch_recv = trio.open_memory_channel[JobDispatched](config.buffer_size)
        # Every finished job holds an in-flight slot until settled, so the
        # table's capacity bounds this channel: it can never hold more.
        finished_send, finished_recv = trio.open_memory_channel[JobFinished](config.in_flight_cap)
        return cls(
            app=app,
            store=store,
            config=config,
            table=InFlight(config.in_flight_cap),
            dispatch_send=dispatch_send,
            dispatch_recv=dispatch_recv,
            finished_send=finished_send,
            finished_recv=finished_recv,
        )

    async def dead_lettered(self, job: Job) -> None:
        """Tell the app's dead-letter hooks; a failing or slow hook is logged,
        never allowed to stall the worker for long."""
        log.warning(
            "dead job=%s kind=%s queue=%s attempts=%d error=%s",
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            (job.last_error.splitlines() or [""])[0],
        )
        for hook in self.registry.dead_letter_hooks:
            with trio.move_on_after(10) as scope:
                try:
                    await hook(job)
                except Exception:
                    log.exception("on_dead_letter hook failed for job %s", job.id)
            if scope.cancelled_caught:
                log.error("on_dead_letter hook timed out for job %s", job.id)
