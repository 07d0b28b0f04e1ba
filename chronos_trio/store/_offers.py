"""What a store offers, and the checks at the door: :func:`capabilities_of`
answers what a store (or a store class) has; :func:`require_capabilities`
refuses, with one clear :class:`MissingCapability`, what it lacks;
:func:`check_jobs` does so for a batch of new jobs before it is sent.

A store's capabilities are those of the roles it subclasses
(:data:`ROLE_CAPABILITIES`) plus the features its class declares in
``features``; a ``Store`` has them all. Answers are cached per class, so
asking costs one dictionary lookup: producers and workers ask once per
batch, or once when they start, never per job on a full store.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

from ..records._jobs import NewJob
from ._capabilities import FEATURES, Capability, MissingCapability
from ._roles import (
    AdminRole,
    AggregatesRole,
    CheckRole,
    FlowRole,
    LeadershipRole,
    NotesRole,
    PromotionRole,
    RegistryRole,
    ResultRole,
    ScheduleStoreRole,
    SearchRole,
    StoreRole,
    TopologyRole,
    WorkflowRole,
)

#: The capability each optional role gives (the core, ``WorkerRole``, is no
#: capability: every backend has it).
# ``type``, not ``type[StoreRole]``: mypy refuses abstract classes (every role
# is one) where ``type[X]`` is expected.
ROLE_CAPABILITIES: Mapping[type, Capability] = {
    PromotionRole: Capability.PROMOTION,
    RegistryRole: Capability.REGISTRY,
    AdminRole: Capability.ADMIN,
    TopologyRole: Capability.TOPOLOGY,
    LeadershipRole: Capability.LEADERSHIP,
    ResultRole: Capability.RESULTS,
    FlowRole: Capability.FLOWS,
    CheckRole: Capability.CHECK,
    NotesRole: Capability.NOTES,
    ScheduleStoreRole: Capability.DYNAMIC_SCHEDULES,
    SearchRole: Capability.SEARCH,
    WorkflowRole: Capability.WORKFLOW_CONTROL,
    AggregatesRole: Capability.AGGREGATES,
}

#: The role behind each role capability.
CAPABILITY_ROLES: Mapping[Capability, type] = {cap: role for role, cap in ROLE_CAPABILITIES.items()}

#: What a job can carry that needs a capability (the others are used by
#: calls, not carried by jobs).
JOB_FEATURES: frozenset[Capability] = FEATURES - {Capability.ABORT, Capability.HISTORY} | {
    Capability.FLOWS
}


def capabilities_of(store: object) -> frozenset[Capability]:
    """The capabilities of ``store`` (an instance or a class): those of the
    roles it subclasses, and the :data:`FEATURES` its class declares in
    ``features`` (a declared name that is not a feature counts for
    nothing: a role is offered by subclassing it). Empty for an object that
    is not a store."""
    return _of_class(store if isinstance(store, type) else type(store))


@functools.cache
def _of_class(cls: type) -> frozenset[Capability]:
    if not issubclass(cls, StoreRole):
        return frozenset()
    roles = {cap for role, cap in ROLE_CAPABILITIES.items() if issubclass(cls, role)}
    return frozenset(roles) | (cls.features & FEATURES)


@functools.cache
def _lacking_for_jobs(cls: type) -> frozenset[Capability]:
    return JOB_FEATURES - _of_class(cls)


def features_used(job: NewJob) -> set[Capability]:
    """The capabilities ``job`` needs of the store that stores it: a unique
    key, a workflow continuation, a priority, an expiry, rate or concurrency
    limits. Empty for a plain job."""
    used: set[Capability] = set()
    if job.unique is not None:
        used.add(Capability.UNIQUE)
    if job.then is not None:
        used.add(Capability.FLOWS)
    control = job.control
    if control is not None:
        if control.priority:
            used.add(Capability.PRIORITY)
        if control.expires_at is not None or control.expires_in is not None:
            used.add(Capability.EXPIRY)
        if control.rates:
            used.add(Capability.RATE_LIMITS)
        if control.caps:
            used.add(Capability.CONCURRENCY_LIMITS)
    return used


def check_jobs(store: object, jobs: Sequence[NewJob]) -> None:
    """Refuse the whole batch, before any of it is sent, when a job uses a
    feature ``store`` lacks (see :func:`features_used`). On a store with
    every job feature this costs one cached lookup per batch, not a look at
    each job.

    Raises :class:`MissingCapability` naming each lacking feature, the first
    job that uses it, and the store; nothing was stored then.
    """
    cls: type = type(store)
    lacking = _lacking_for_jobs(cls)
    if not lacking:
        return
    needs: dict[Capability, str] = {}
    for job in jobs:
        for cap in features_used(job) & lacking:
            needs.setdefault(cap, f"job {job.id!r} of {job.kind!r}")
    if needs:
        require_capabilities(store, needs, what="this enqueue", outcome="no job of it was stored")


def require_capabilities(
    store: object,
    needs: Mapping[Capability, str] | Iterable[Capability],
    *,
    what: str,
    outcome: str = "",
) -> None:
    """Check that ``store`` has every capability of ``needs``: capabilities,
    or a mapping of each to who uses it (``"schedule 'digest'"``), for the
    message. ``what`` names who needs them (``"a worker"``); ``outcome``
    says what did not happen (``"nothing was started"``).

    Call it where a store enters or before a feature is first used, so a
    store without the capability fails at once, not halfway through a run.
    Raises :class:`MissingCapability` (a ``TypeError``) naming each missing
    capability with its user, the store's class and what it offers.
    """
    users = needs if isinstance(needs, Mapping) else dict.fromkeys(needs, "")
    has = capabilities_of(store)
    missing = [cap for cap in users if cap not in has]
    if not missing:
        return
    name = store.__name__ if isinstance(store, type) else type(store).__name__
    listed = [f"{cap.value} (used by {users[cap]})" if users[cap] else cap.value for cap in missing]
    offered = ", ".join(sorted(cap.value for cap in has))
    message = (
        f"{what} needs {_and(listed)}, which the store {name} lacks "
        f"(it offers the core{', ' + offered if offered else ' only'})"
    )
    raise MissingCapability(message + (f"; {outcome}" if outcome else ""))


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


__all__ = [
    "CAPABILITY_ROLES",
    "JOB_FEATURES",
    "ROLE_CAPABILITIES",
    "capabilities_of",
    "check_jobs",
    "features_used",
    "require_capabilities",
]
