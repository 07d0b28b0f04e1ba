"""What a store can do beyond the core: the :class:`Capability` names.

A store's **core** is what a worker needs to run jobs: its clock and
lifecycle (:class:`~chronos_trio.store.StoreRole`: ``now``, ``aclose``,
``shared_across_processes``) and :class:`~chronos_trio.store.WorkerRole`
(``enqueue_many``, ``lease``, ``renew``, ``settle``, ``recover_expired``,
``wait_ready``). Every other thing a store does is a capability, of one of
two kinds:

* **Roles** (:data:`ROLE_CAPABILITIES`): a set of methods, offered by
  subclassing the role's ABC (``PromotionRole``, ``RegistryRole``,
  ``AdminRole``, ``TopologyRole``, ``LeadershipRole``, ``ResultRole``,
  ``FlowRole``, ``CheckRole``, ``NotesRole``, ``ScheduleStoreRole``,
  ``SearchRole``, ``WorkflowRole``, ``AggregatesRole``).
* **Features** (:data:`FEATURES`): semantics carried inside the core's
  arguments (a ``NewJob``'s ``unique`` and ``control``, an abort flag in a
  renew's reply), which no method shows; a backend declares the ones it
  honours in its class attribute ``features``. ``Store`` (every role)
  declares every feature.

This module only names them (it imports nothing of the store);
``store._offers`` derives what a store has and checks it.
"""

from __future__ import annotations

import enum

from ..records._errors import ChronosError


class Capability(enum.StrEnum):
    """One optional thing a store can do (see the module docstring)."""

    # -- roles: methods a backend offers by subclassing the role -------------------------
    #: ``PromotionRole``: ``promote_due``/``wait_scheduled``, a promoter moves
    #: due delayed jobs to ready. A store without it judges due times in its
    #: lease (a scheduled or retry_wait job whose time has come is leased as
    #: if ready, and ``wait_ready`` returns for it), so it needs no promoter.
    PROMOTION = "promotion"
    #: ``RegistryRole``: the registry of live workers (``beat_worker``,
    #: ``unregister_worker``, ``workers``).
    REGISTRY = "registry"
    #: ``AdminRole``: inspection, administration and retention (``trim``).
    ADMIN = "admin"
    #: ``TopologyRole``: versioned, partitioned queue routing.
    TOPOLOGY = "topology"
    #: ``LeadershipRole``: leadership leases with epochs and fenced schedule
    #: triggers (cron and interval schedules, the janitor).
    LEADERSHIP = "leadership"
    #: ``ResultRole``: results kept by the success settle, and waiting for a
    #: job's outcome (job handles).
    RESULTS = "results"
    #: ``FlowRole``: workflow continuations (chains, groups).
    FLOWS = "flows"
    #: ``CheckRole``: the store checker.
    CHECK = "check"
    #: ``NotesRole``: a running job's progress and log lines, written by
    #: its lease holder (``job.progress``, ``job.log``, ``handle.progress``).
    NOTES = "notes"
    #: ``ScheduleStoreRole``: schedules kept in the store and edited at run
    #: time (``app.dynamic_schedules``), fired by the leader beside the code's.
    DYNAMIC_SCHEDULES = "dynamic_schedules"
    #: ``SearchRole``: jobs searched by kind, state, queue, error and
    #: payload text, times and worker, a bounded scan per call.
    SEARCH = "search"
    #: ``WorkflowRole``: workflow records and cancel marks
    #: (``app.workflow(id).abort()``, ``.status()``).
    WORKFLOW_CONTROL = "workflow_control"
    #: ``AggregatesRole``: per-minute aggregates of outcomes and run times
    #: (``add_aggregates``, ``aggregates``): the dashboard's charts.
    AGGREGATES = "aggregates"
    # -- features: semantics inside the core's arguments, declared in ``features`` ------
    #: ``NewJob.unique``: at most one pending job per key.
    UNIQUE = "unique"
    #: Rate limits of ``NewJob.control``, applied in the lease.
    RATE_LIMITS = "rate_limits"
    #: Concurrency limits of ``NewJob.control``, applied in the lease.
    CONCURRENCY_LIMITS = "concurrency_limits"
    #: Expiry of ``NewJob.control``: a job not started in time is dead-lettered.
    EXPIRY = "expiry"
    #: Priorities of ``NewJob.control``: higher leases first within a queue.
    PRIORITY = "priority"
    #: Abort flags: ``AdminRole.abort`` of a leased job is reported by
    #: ``renew`` and applied by settle and recovery.
    ABORT = "abort"
    #: Attempt history: settle and recovery keep each attempt that ends
    #: without success, and ``AdminRole.get_job`` reads them (``Job.history``).
    HISTORY = "history"


#: The capabilities a backend declares in its ``features`` class attribute
#: (the others come from the roles it subclasses).
FEATURES: frozenset[Capability] = frozenset(
    {
        Capability.UNIQUE,
        Capability.RATE_LIMITS,
        Capability.CONCURRENCY_LIMITS,
        Capability.EXPIRY,
        Capability.PRIORITY,
        Capability.ABORT,
        Capability.HISTORY,
    }
)


class MissingCapability(ChronosError, TypeError):
    """A feature was asked of a store that lacks the capability it needs:
    raised before anything is stored or started (an enqueue stores no job of
    its batch, a worker starts no actor). The message names each feature,
    who asked for it, and the store."""


__all__ = ["FEATURES", "Capability", "MissingCapability"]
