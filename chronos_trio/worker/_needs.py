"""What a worker needs of its store beyond the core, and which actors it
runs for what the store offers.

A worker starts an optional actor only when its store has the capability
the actor uses (:data:`ACTOR_NEEDS`), and refuses, before it starts
anything, an app that uses a capability the store lacks
(:func:`app_needs`): schedules need leadership, a task that keeps results
needs results, a task whose jobs are unique, limited, expiring or
prioritised by default needs those features.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..runtime._registry import Registry
from ..store import Capability

#: The capabilities each optional actor uses; an actor not named here uses
#: only the core and always runs.
ACTOR_NEEDS: Mapping[str, frozenset[Capability]] = {
    "promoter": frozenset({Capability.PROMOTION}),
    "registrar": frozenset({Capability.REGISTRY}),
    "janitor": frozenset({Capability.ADMIN, Capability.LEADERSHIP}),
    "leader": frozenset({Capability.LEADERSHIP}),
    "scheduler": frozenset({Capability.LEADERSHIP}),
    "continuer": frozenset({Capability.FLOWS}),
    "noter": frozenset({Capability.NOTES}),
    "aggregator": frozenset({Capability.AGGREGATES}),
}


def runs(actor: str, capabilities: frozenset[Capability]) -> bool:
    """Whether ``actor`` runs on a store with ``capabilities``."""
    return ACTOR_NEEDS.get(actor, frozenset()) <= capabilities


def app_needs(registry: Registry) -> dict[Capability, str]:
    """Each capability the app's tasks and schedules use, with the first
    task or schedule that uses it (for the refusal's message)."""
    needs: dict[Capability, str] = {}
    for schedule in registry.schedules:
        needs.setdefault(Capability.LEADERSHIP, f"schedule {schedule.id!r}")
    for kind, spec in registry.tasks.items():
        task = f"task {kind!r}"
        if spec.result_type is not None and spec.result_ttl > 0:
            needs.setdefault(Capability.RESULTS, f"{task}, which keeps its results")
        if spec.unique is not None:
            needs.setdefault(Capability.UNIQUE, task)
        control = spec.control
        if control is not None:
            if control.priority:
                needs.setdefault(Capability.PRIORITY, task)
            if control.expires is not None:
                needs.setdefault(Capability.EXPIRY, task)
            if control.rate_limits:
                needs.setdefault(Capability.RATE_LIMITS, task)
            if control.concurrency_limits:
                needs.setdefault(Capability.CONCURRENCY_LIMITS, task)
    return needs


__all__ = ["ACTOR_NEEDS", "app_needs", "runs"]
