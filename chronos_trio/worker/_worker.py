"""The worker: a supervised tree of actors in one Trio task tree.

Actors start in four groups and stop in reverse order:

* intake — promoter, leaser, recoverer, janitor, leader, scheduler, gauges,
  recycler: they bring work in (the leader-elector holds the leadership
  lease under which the scheduler fires triggers, the janitor trims, gauges
  reads queue depths for the metrics and the recycler ends the worker's run
  past ``max_jobs`` or ``max_memory_mb``);
* execution — the executor pool;
* settlement — heartbeater, completer, continuer, noter: they keep leases
  alive, write outcomes, run what follows a workflow job that succeeded,
  and write running jobs' progress and log lines;
* notification — the notifier, which runs dead-letter hooks and other event
  subscribers off the settle path, so it stops last and may flush; and the
  registrar, which keeps this process listed in the store's worker
  registry while any of it runs and removes the entry as it stops.

The store's core (lease, renew, settle, recover, wait) is all the leaser,
executors, heartbeater, completer, recoverer and notifier use. The others
start only when the store has their capability (``worker._needs``): the
promoter with promotion, the registrar with the registry, the janitor with
admin and leadership, the leader and scheduler with leadership, the
continuer with workflows, the noter with notes; and the worker refuses,
before it starts anything, an app that uses a capability its store lacks.

Graceful shutdown (cancellation of :meth:`Worker.run`, or :meth:`Worker.stop`):
stop intake, hand jobs that have not started straight back to ready, let
running handlers finish within ``shutdown_grace``, release the rest at once,
flush every outcome, deliver pending events within ``flush_timeout``, then
exit. Leases are never left to expire on a clean shutdown.

Recycling (``max_jobs``, ``max_memory_mb``; see ``runtime._recycle``) ends
the run the same way, by itself, except that running handlers finish
however long they take (their own timeouts bound them) unless
:meth:`Worker.stop` is called meanwhile, which starts ``shutdown_grace``
from then. :meth:`Worker.run` then returns normally and
:attr:`Worker.recycled` says why.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from types import ModuleType
from typing import TYPE_CHECKING

import attrs
import trio
from trio_util import wait_any

from ..actors import (
    aggregator,
    completer,
    continuer,
    executor,
    gauges,
    heartbeater,
    janitor,
    leader,
    leaser,
    noter,
    notifier,
    promoter,
    recoverer,
    recycler,
    registrar,
    scheduler,
)
from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import ActorFailed, first_exception
from ..records._jobs import PENDING_STATES
from ..records._log import log_event
from ..runtime._config import WorkerConfig
from ..runtime._events import ActorRestarted, JobDead
from ..runtime._metrics import Metrics, RoundTripTally
from ..runtime._recycle import Recycled
from ..runtime._registry import DeadLetterHook, WorkerHost
from ..runtime._state import Counters, Runtime
from ..runtime._supervisor import ChildSpec, Supervisor
from ..runtime._tasks import TaskSpec

if TYPE_CHECKING:
    # Child processes: imported only for an app with isolated tasks.
    from ..runtime._isolation import ChildPool, IsolationPlan
from ..store import (
    Capability,
    Store,
    StoreError,
    WorkerRole,
    capabilities_of,
    require_capabilities,
    require_roles,
)
from ._needs import app_needs, runs

log = logging.getLogger("chronos_trio.worker")

#: The actors of each group, in start order; groups start in this order and
#: stop in the reverse one.
GROUPS: Mapping[str, tuple[ModuleType, ...]] = {
    "notification": (notifier, registrar),
    "settlement": (heartbeater, completer, continuer, noter, aggregator),
    "execution": (executor,),
    "intake": (promoter, leaser, recoverer, janitor, leader, scheduler, gauges, recycler),
}

#: Actor names, in start order. Fault-injection tests address them by name.
ACTORS: tuple[str, ...] = tuple(
    module.__name__.rpartition(".")[2] for modules in GROUPS.values() for module in modules
)


def _child_pool(
    plan: IsolationPlan | None, config: WorkerConfig
) -> AbstractAsyncContextManager[ChildPool | None]:
    """The pool isolated handlers run in (started: its children are warm),
    or nothing for an app without isolated tasks."""
    if plan is None:
        return nullcontext()
    from ..runtime._isolation import open_child_pool

    return open_child_pool(plan, config.isolate_processes)


def _isolation_plan(app: object, tasks: Mapping[str, TaskSpec]) -> IsolationPlan | None:
    """``runtime._isolation.isolation_plan``, its module (child processes,
    their wire protocol and records) imported only for an app with isolated
    tasks: no other worker loads it. Raises what that raises."""
    if not any(spec.isolate for spec in tasks.values()):
        return None
    from ..runtime._isolation import isolation_plan

    return isolation_plan(app, tasks)


def _observe_store(store: Store, metrics: Metrics | None) -> RoundTripTally | None:
    """Hand the store a tally of its round trips when ``metrics`` takes
    them (``store_round_trips``); the tally, or None. The tally is only a
    dict increment on the store's hot path: the ``gauges`` actor feeds the
    metrics object from it, off that path."""
    if getattr(metrics, "store_round_trips", None) is None:
        return None
    tally = RoundTripTally()
    store.observe_round_trips(tally)
    return tally


@attrs.frozen
class WorkerStatistics:
    """What one worker did since it started, and holds now: a snapshot of
    its runtime's counters (every field of ``runtime.Counters``, by name),
    with the in-flight table, event bus, supervisor and thread figures."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    worker_id: str
    in_flight: int
    running: int
    leased: int
    succeeded: int
    retried: int
    #: Jobs the store dead-lettered for this worker: by a handler's outcome,
    #: an expiry at lease, a damaged record, unclaimed past its grace, or
    #: the recovery of an expired lease (those also in ``recovered``).
    dead: int
    #: Jobs of ``discard_dead`` tasks deleted instead of kept dead (also in ``dead``).
    discarded: int
    released: int
    lost: int
    recovered: int
    promoted: int
    trimmed: int
    triggered: int
    #: Events (for hooks and other subscribers) dropped because the buffer was full.
    events_dropped: int
    #: Damaged records the store dead-lettered when met (also in ``dead``),
    #: index entries it quarantined, newer-format records left alone.
    damaged: int
    quarantined: int
    newer_skipped: int
    restarts: dict[str, int]
    #: Jobs an abort stopped (settled ABORTED, or aborted by this worker's
    #: recovery of an expired lease).
    aborted: int = 0
    #: Jobs of a kind this worker has no handler for, sent back unrun for a
    #: worker that has one (see ``unknown_kind_grace``; those dead-lettered
    #: past it count in ``dead``).
    unclaimed: int = 0
    #: Plain-function handlers' threads still running after their run was
    #: called off (Python cannot stop a thread); at ``max_abandoned_threads``
    #: no plain handler starts until one ends.
    abandoned_threads: int = 0
    #: Why the worker ended its run by itself (``max_jobs``,
    #: ``max_memory_mb``), or None while it runs or when it was stopped.
    recycled: Recycled | None = None
    #: Isolated handlers' child processes replaced: killed (at a hard
    #: limit, or a run called off), crashed in a run, or found dead while
    #: idle (see docs/isolation.md).
    isolated_replaced: int = 0


class Worker:
    """One worker. Run it with ``await nursery.start(worker.run)`` or
    ``async with app.open_worker(...)``.

    Dead-letter hooks (``app.on_dead_letter``) run in the notifier actor,
    never on the settle path: each is called at most once for each job this
    worker dead-letters (by a handler's outcome or by lease recovery), after
    the store applied it, bounded by ``hook_timeout``; errors are logged. A
    hook may be skipped when the event buffer overflows (counted in
    ``statistics().events_dropped``) or the worker stops before delivering
    it (it gets ``flush_timeout``). The dead job itself stays in the store,
    unless its task was registered with ``discard_dead=True``.

    Optional actors run only when the store has what they use (see
    ``worker._needs``): on a store with only the core, a worker leases,
    runs, renews, settles and recovers, and nothing else.
    """

    def __init__(self, app: WorkerHost, config: WorkerConfig | None = None) -> None:
        """Raises ``UnknownTask`` or ``PayloadError`` for a schedule of
        ``app`` this worker could only dead-letter (see
        ``Registry.check_schedules``; :meth:`run` checks again), and
        ``TypeError`` for a ``config`` that is not a WorkerConfig (options
        go to ``app.worker(**options)`` or ``WorkerConfig.build``)."""
        if config is not None and not isinstance(config, WorkerConfig):
            raise TypeError(
                f"config must be a WorkerConfig (or None), got {config!r}; pass options "
                "as app.worker(**options) or WorkerConfig.build(**options)"
            )
        app.registry.check_schedules()
        self.app = app
        self.config = config or WorkerConfig()
        self.supervisor = Supervisor(
            intensity=self.config.restart_intensity,
            period=self.config.restart_period,
            on_restart=self._actor_restarted,
        )
        self._rt: Runtime | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._recycled: Recycled | None = None
        #: While a recycle waits for running handlers: the wait, unbounded
        #: until stop() gives it ``shutdown_grace``.
        self._draining: trio.CancelScope | None = None

    @property
    def id(self) -> str:
        return self.config.worker_id

    @property
    def runtime(self) -> Runtime:
        if self._rt is None:
            raise RuntimeError("the worker is not running")
        return self._rt

    @property
    def recycled(self) -> Recycled | None:
        """Why this worker ended its run by itself (past ``max_jobs`` or
        ``max_memory_mb``), or None: still running, or stopped (by
        :meth:`stop`, a cancellation or a failure). Set as its shutdown
        begins; a program embedding workers that recycle checks it after
        :meth:`run` returns (or :meth:`wait_stopped`) and starts another."""
        return self._recycled

    def stop(self) -> None:
        """Ask for a graceful shutdown; :meth:`run` returns when it is done.
        During a recycle, running handlers get ``shutdown_grace`` from now."""
        self._stop.set()
        draining = self._draining
        if draining is not None and draining.deadline == math.inf:
            draining.deadline = trio.current_time() + self.config.shutdown_grace

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def crash_actor(self, name: str, exc: BaseException | None = None) -> None:
        """Fault injection: make actor ``name`` (see ``ACTORS``) raise ``exc``."""
        self.supervisor.crash(name, exc)

    def statistics(self) -> WorkerStatistics:
        rt = self._rt
        counters = rt.counters if rt else Counters()
        return WorkerStatistics(
            worker_id=self.id,
            in_flight=len(rt.table) if rt else 0,
            running=rt.table.running if rt else 0,
            events_dropped=rt.events.dropped if rt else 0,
            restarts=dict(self.supervisor.restarts),
            abandoned_threads=rt.threads.abandoned if rt else 0,
            recycled=self._recycled,
            isolated_replaced=rt.isolation.replaced if rt and rt.isolation else 0,
            # every counter, by name: a counter added there is a field here
            **attrs.asdict(counters, recurse=False),
        )

    async def wait_idle(self, *, poll: float = 0.05) -> None:
        """Burst mode: until this worker holds nothing and its queues have no
        pending job (scheduled, ready, leased or retry_wait). Handy in tests.
        Raises MissingCapability on a store without admin (it reads counts)."""
        names = self.config.queue_names
        require_capabilities(self.app.store, [Capability.ADMIN], what="wait_idle")
        while True:
            if self._rt is not None and len(self._rt.table) == 0:
                stats = await self.app.store.stats(names)
                if not any(s.counts[st] for s in stats for st in PENDING_STATES):
                    return
            await trio.sleep(poll)

    async def run(self, *, task_status: trio.TaskStatus[Worker] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled or :meth:`stop`; then shut down gracefully.

        Raises ``ActorFailed`` if an actor exceeds its restart intensity,
        also while the worker starts (after stopping the actors started and
        releasing what it can). Cancelled while it starts, it stops what
        it started the same way and leaves. Before it starts anything,
        ``UnknownTask`` or ``PayloadError`` for a schedule it could only
        dead-letter (one added since the worker was made), ``TypeError``
        for a store without the core, and ``MissingCapability`` (a
        TypeError) for an app that uses a capability the store lacks
        (schedules without leadership, a task that keeps results without
        results, tasks' unique or flow-control defaults without those
        features). For an app with isolated tasks (``isolate=True``), its
        child processes start first (warm), before the app's lifespan;
        ``IsolationError`` when they cannot (the app not importable by
        them), nothing else started.
        """
        if self._rt is not None:
            raise RuntimeError("a Worker runs once; create another")
        self.app.registry.check_schedules()
        store = self.app.store
        # The core, and what the app uses; optional actors follow the store.
        require_roles(store, WorkerRole, what="a worker")
        require_capabilities(
            store,
            app_needs(self.app.registry),
            what=f"the worker of app {self.app.registry.name!r}",
            outcome="nothing was started",
        )
        has = capabilities_of(store)
        # Where child processes find the isolated tasks: refused before anything starts.
        isolation = _isolation_plan(self.app, self.app.registry.tasks)
        rt = self._rt = Runtime.create(self.app, store, self.config)
        for hook in self.app.registry.dead_letter_hooks:
            rt.events.subscribe(
                JobDead,
                functools.partial(_call_hook, hook),
                name=f"on_dead_letter hook {getattr(hook, '__qualname__', hook)!r}",
            )
        metrics = self.app.registry.metrics
        if metrics is not None:
            # fed by the notifier, off the settle path (see runtime._metrics);
            # the feed's module loads only for an app with a metrics object
            from ..runtime._metrics_feed import METRIC_EVENTS, MetricsFeed

            rt.events.subscribe(
                METRIC_EVENTS,
                MetricsFeed(metrics),
                name=f"metrics {type(metrics).__qualname__}",
                inline=True,
            )
        rt.round_trips = _observe_store(store, metrics)
        scopes: dict[str, trio.CancelScope] = {}
        log_event(
            log,
            logging.INFO,
            "worker starting",
            worker=self.id,
            queues=",".join(f"{q.name}={q.weight}" for q in self.config.queues),
            concurrency=self.config.concurrency,
        )
        lifespan = self.app.registry.lifespan
        try:
            # Entered before the first lease and left after the last settle.
            # The children start (warm) before the lifespan is entered, and
            # stop after it is left.
            async with (
                _child_pool(isolation, self.config) as rt.isolation,
                lifespan(self.app) if lifespan else nullcontext() as value,
            ):
                rt.lifespan = value
                try:
                    with _unwrapped_failure():
                        async with trio.open_nursery() as root:
                            try:
                                for group, modules in GROUPS.items():
                                    specs = [
                                        _spec(rt, module)
                                        for module in modules
                                        if runs(_name(module), has)
                                    ]
                                    scopes[group] = await root.start(self._run_group, specs)
                                task_status.started(self)
                                await wait_any(self._stop.wait, rt.recycle.wait)
                                if not self._stop.is_set():
                                    self._recycled = rt.recycle.requested
                            finally:
                                # Shielded: an outer cancellation is exactly what asks
                                # for this shutdown, and it must still flush every outcome.
                                # Also when start-up itself failed (a group that could not
                                # start, an actor that crash-looped at once, a cancellation):
                                # the groups started so far are shielded, and nothing but
                                # this stops them.
                                with trio.CancelScope(shield=True):
                                    await self._shutdown(rt, scopes)
                finally:
                    with trio.CancelScope(shield=True):
                        await self._release_leftovers(rt)
        finally:
            if rt.round_trips is not None:
                store.observe_round_trips(None)
                rt.round_trips.feed(metrics)  # the last ones: every actor stopped
            self._stopped.set()
            log_event(log, logging.INFO, "worker stopped", **attrs.asdict(self.statistics()))

    async def _run_group(
        self, specs: list[ChildSpec], *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        # Once started, each group is shielded from outer cancellation: the
        # worker's own shutdown sequence decides when each group stops. Not
        # while it starts: Trio does not hand a task that reports started
        # under a cancelled start() over to the nursery; it runs on inside
        # start(), which waits for it to end, and a shielded group never
        # would. A group cancelled while it starts just stops (nothing
        # depends on it yet; its actors stop as shutdown would stop them).
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                for spec in specs:
                    await nursery.start(self.supervisor.supervise, spec)
                # No checkpoint from here to started(): the cancellation
                # seen here is the one started() sees.
                await trio.lowlevel.checkpoint_if_cancelled()
                scope.shield = True
                task_status.started(scope)

    async def _shutdown(self, rt: Runtime, scopes: dict[str, trio.CancelScope]) -> None:
        cfg = self.config
        table = rt.table

        def stop_group(name: str) -> None:
            if name in scopes:  # absent when start-up itself failed
                scopes[name].cancel()

        stop_group("intake")
        # Jobs leased but not started go back to ready now, not after expiry.
        table.release_unstarted()
        # A recycle lets running handlers finish, until stop() (see there).
        recycling = self._recycled is not None and not self._stop.is_set()
        grace = math.inf if recycling else trio.current_time() + cfg.shutdown_grace
        with trio.CancelScope(deadline=grace) as self._draining:
            await table.wait_until(lambda: table.running == 0)
        self._draining = None
        if table.running:
            log_event(
                log,
                logging.WARNING,
                "shutdown grace over: cancelling running handlers",
                grace=cfg.shutdown_grace,
                running=table.running,
            )
        stop_group("execution")
        await trio.lowlevel.checkpoint()  # the cancelled executors leave their handlers
        table.release_running()
        with trio.move_on_after(cfg.flush_timeout):
            await table.wait_until(lambda: len(table) == 0)
        stop_group("settlement")
        if rt.aggregates is not None:  # what the last settles counted
            with trio.move_on_after(cfg.flush_timeout):
                try:
                    await aggregator.write(rt, rt.aggregates)
                except StoreError as exc:
                    log_event(
                        log, logging.WARNING, "aggregates not written at shutdown", error=str(exc)
                    )
        with trio.move_on_after(cfg.flush_timeout):
            await rt.events.wait_drained()
        dropped = rt.events.discard_pending()
        if dropped:
            log_event(
                log,
                logging.WARNING,
                "events not delivered before shutdown (hooks not run)",
                count=dropped,
            )
        stop_group("notification")

    async def _release_leftovers(self, rt: Runtime) -> None:
        """Last resort (completer dead or store slow): settle what is left in
        one direct call; whatever still fails will expire and be recovered."""
        if not len(rt.table):
            return
        settlements = rt.table.unsettled()
        if settlements:
            with trio.move_on_after(self.config.flush_timeout):
                try:
                    await rt.store.settle(settlements)
                except StoreError as exc:
                    log_event(
                        log,
                        logging.ERROR,
                        "could not settle leases at exit",
                        count=len(settlements),
                        error=str(exc),
                    )
                else:
                    rt.table.forget_all()
                    return
            log_event(
                log, logging.ERROR, "leases left to expire and be recovered", count=len(rt.table)
            )
        rt.table.forget_all()

    def _actor_restarted(self, actor: str, failure: BaseException, restarts: int) -> None:
        if self._rt is not None:
            error = f"{type(failure).__name__}: {failure}"
            self._rt.events.publish(ActorRestarted(actor, error, restarts))


async def _call_hook(hook: DeadLetterHook, event: JobDead) -> None:
    """One dead-letter hook, as an event subscriber (the notifier bounds it
    by ``hook_timeout`` and logs what it raises)."""
    await hook(event.job)


def _name(module: ModuleType) -> str:
    return module.__name__.rpartition(".")[2]


def _spec(rt: Runtime, module: ModuleType) -> ChildSpec:
    return ChildSpec(_name(module), functools.partial(module.run, rt))


@contextmanager
def _unwrapped_failure() -> Iterator[None]:
    """Raise ``ActorFailed`` itself rather than inside the nursery's group."""
    try:
        yield
    except BaseExceptionGroup as group:
        matched, rest = group.split(ActorFailed)
        if matched is not None and rest is None:
            # Plain raise keeps its __cause__ (the actor's last crash).
            raise first_exception(matched)  # noqa: B904
        raise


__all__ = ["ACTORS", "GROUPS", "Worker", "WorkerStatistics"]
