"""The worker: a supervised tree of actors in one Trio task tree.

Actors start in three groups and stop in reverse order:

* intake — promoter, leaser, recoverer, janitor, leader, scheduler: they
  bring work in (the leader-elector holds the leadership lease under which
  the scheduler fires triggers and the janitor trims);
* execution — the executor pool;
* settlement — heartbeater, completer: they keep leases alive and write
  outcomes, so they stop last.

Graceful shutdown (cancellation of :meth:`Worker.run`, or :meth:`Worker.stop`):
stop intake, hand jobs that have not started straight back to ready, let
running handlers finish within ``shutdown_grace``, release the rest at once,
flush every outcome, then exit. Leases are never left to expire on a clean
shutdown.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import trio

from ..actors import (
    completer,
    executor,
    heartbeater,
    janitor,
    leader,
    leaser,
    promoter,
    recoverer,
    scheduler,
)
from ..records._errors import ActorFailed
from ..records._jobs import PENDING_STATES, JobState
from ..runtime._config import WorkerConfig
from ..runtime._inflight import Stage
from ..runtime._registry import WorkerHost
from ..runtime._state import Counters, JobFinished, Runtime
from ..runtime._supervisor import ChildSpec, Supervisor
from ..store import SettleKind, Settlement, StoreError

log = logging.getLogger("chronos_trio.worker")

#: Actor names, in start order. Fault-injection tests address them by name.
ACTORS = (
    "heartbeater",
    "completer",
    "executor",
    "promoter",
    "leaser",
    "recoverer",
    "janitor",
    "leader",
    "scheduler",
)


@attrs.frozen
class WorkerStatistics:
    worker_id: str
    in_flight: int
    running: int
    leased: int
    succeeded: int
    retried: int
    dead: int
    released: int
    lost: int
    recovered: int
    promoted: int
    restarts: dict[str, int]


class Worker:
    """One worker. Run it with ``await nursery.start(worker.run)`` or
    ``async with app.open_worker(...)``."""

    def __init__(self, app: WorkerHost, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig.build()
        self.supervisor = Supervisor(
            intensity=self.config.restart_intensity, period=self.config.restart_period
        )
        self._rt: Runtime | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()

    @property
    def id(self) -> str:
        return self.config.worker_id

    @property
    def runtime(self) -> Runtime:
        if self._rt is None:
            raise RuntimeError("the worker is not running")
        return self._rt

    def stop(self) -> None:
        """Ask for a graceful shutdown; :meth:`run` returns when it is done."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def crash_actor(self, name: str, exc: BaseException | None = None) -> None:
        """Fault injection: make actor ``name`` (see ``ACTORS``) raise ``exc``."""
        self.supervisor.crash(name, exc)

    def statistics(self) -> WorkerStatistics:
        c = self._rt.counters if self._rt else Counters()
        table = self._rt.table if self._rt else None
        return WorkerStatistics(
            worker_id=self.id,
            in_flight=len(table) if table else 0,
            running=table.count(Stage.RUNNING) if table else 0,
            leased=c.leased,
            succeeded=c.succeeded,
            retried=c.retried,
            dead=c.dead,
            released=c.released,
            lost=c.lost,
            recovered=c.recovered,
            promoted=c.promoted,
            restarts=dict(self.supervisor.restarts),
        )

    async def wait_idle(self, *, poll: float = 0.05) -> None:
        """Burst mode: until this worker holds nothing and its queues have no
        pending job (scheduled, ready, leased or retry_wait). Handy in tests."""
        names = self.config.queue_names
        while True:
            if self._rt is not None and len(self._rt.table) == 0:
                stats = await self.app.store.stats(names)
                if not any(s.counts[st] for s in stats for st in PENDING_STATES):
                    return
            await trio.sleep(poll)

    async def run(self, *, task_status: trio.TaskStatus[Worker] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled or :meth:`stop`; then shut down gracefully.

        Raises ``ActorFailed`` if an actor exceeds its restart intensity
        (after releasing what it can).
        """
        if self._rt is not None:
            raise RuntimeError("a Worker runs once; create another")
        store = self.app.store
        rt = self._rt = Runtime.create(self.app, store, self.config)
        actor = {
            name: ChildSpec(name, functools.partial(module.run, rt))
            for name, module in (
                ("heartbeater", heartbeater),
                ("completer", completer),
                ("executor", executor),
                ("promoter", promoter),
                ("leaser", leaser),
                ("recoverer", recoverer),
                ("janitor", janitor),
                ("leader", leader),
                ("scheduler", scheduler),
            )
        }
        groups = {
            "settlement": [actor["heartbeater"], actor["completer"]],
            "execution": [actor["executor"]],
            "intake": [
                actor["promoter"],
                actor["leaser"],
                actor["recoverer"],
                actor["janitor"],
                actor["leader"],
                actor["scheduler"],
            ],
        }
        scopes: dict[str, trio.CancelScope] = {}
        log.info(
            "worker %s starting: queues=%s concurrency=%d",
            self.id,
            ",".join(f"{q.name}={q.weight}" for q in self.config.queues),
            self.config.concurrency,
        )
        try:
            with _unwrapped_failure():
                async with trio.open_nursery() as root:
                    for name, specs in groups.items():
                        scopes[name] = await root.start(self._run_group, specs)
                    task_status.started(self)
                    try:
                        await self._stop.wait()
                    finally:
                        # Shielded: an outer cancellation is exactly what asks for
                        # this shutdown, and it must still flush every outcome.
                        with trio.CancelScope(shield=True):
                            await self._shutdown(rt, scopes)
        finally:
            with trio.CancelScope(shield=True):
                await self._release_leftovers(rt)
            self._stopped.set()
            log.info("worker %s stopped: %s", self.id, self.statistics())

    async def _run_group(
        self, specs: list[ChildSpec], *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        # Each group is shielded from outer cancellation: the worker's own
        # shutdown sequence decides when each group stops.
        with trio.CancelScope(shield=True) as scope:
            async with trio.open_nursery() as nursery:
                for spec in specs:
                    await nursery.start(self.supervisor.supervise, spec)
                task_status.started(scope)

    async def _shutdown(self, rt: Runtime, scopes: dict[str, trio.CancelScope]) -> None:
        cfg = self.config

        def stop_group(name: str) -> None:
            if name in scopes:  # absent when start-up itself failed
                scopes[name].cancel()

        stop_group("intake")
        rt.draining = True
        # Jobs leased but not started go back to ready now, not after expiry.
        for entry in rt.table.in_stage(Stage.LEASED, Stage.QUEUED):
            entry.outcome = Settlement(entry.leased.ref, SettleKind.RELEASE)
            entry.stage = Stage.DONE
            rt.finished_send.send_nowait(JobFinished(entry.token))
        with trio.move_on_after(cfg.shutdown_grace):
            await rt.table.wait_until(lambda: rt.table.count(Stage.RUNNING) == 0)
        running = rt.table.count(Stage.RUNNING)
        if running:
            log.warning(
                "shutdown grace of %gs over: cancelling %d running handler(s)",
                cfg.shutdown_grace,
                running,
            )
        stop_group("execution")
        await trio.lowlevel.checkpoint()
        for entry in rt.table.in_stage(Stage.RUNNING, Stage.QUEUED, Stage.LEASED):
            entry.outcome = Settlement(entry.leased.ref, SettleKind.RELEASE)
            entry.stage = Stage.DONE
            rt.finished_send.send_nowait(JobFinished(entry.token))
        with trio.move_on_after(cfg.flush_timeout):
            await rt.table.wait_until(lambda: len(rt.table) == 0)
        stop_group("settlement")

    async def _release_leftovers(self, rt: Runtime) -> None:
        """Last resort (completer dead or store slow): settle what is left in
        one direct call; whatever still fails will expire and be recovered."""
        settlements: list[Settlement] = []
        for entry in rt.table:
            if entry.stage in (Stage.DONE, Stage.SETTLING):
                if entry.outcome is not None:  # None: lease lost, nothing to write
                    settlements.append(entry.outcome)
            else:
                settlements.append(Settlement(entry.leased.ref, SettleKind.RELEASE))
        if not settlements:
            return
        with trio.move_on_after(self.config.flush_timeout):
            try:
                await rt.store.settle(settlements)
            except StoreError as exc:
                log.error("could not settle %d lease(s) at exit: %s", len(settlements), exc)
            else:
                rt.table.remove_many([entry.token for entry in rt.table])
                return
        log.error("%d lease(s) left to expire and be recovered", len(rt.table))


@contextmanager
def _unwrapped_failure() -> Iterator[None]:
    """Raise ``ActorFailed`` itself rather than inside the nursery's group."""
    try:
        yield
    except BaseExceptionGroup as group:
        matched, rest = group.split(ActorFailed)
        if matched is not None and rest is None:
            # Plain raise keeps its __cause__ (the actor's last crash).
            raise _first(matched)  # noqa: B904
        raise


def _first(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


__all__ = ["ACTORS", "JobState", "Worker", "WorkerStatistics"]
