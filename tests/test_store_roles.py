"""The store's roles and capabilities: what each backend offers, the checks
at the door (``require_roles``, ``require_capabilities``, the Inspector),
the conformance suite's factory and capability declarations, and
FaultyStore wrapping every role method."""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Sequence
from typing import Any, cast

import attrs
import pytest

from chronos_trio import Inspector
from chronos_trio.app._inspector import schedule_rows
from chronos_trio.records import JobState
from chronos_trio.store import (
    FEATURES,
    ROLE_CAPABILITIES,
    ROLES,
    AdminRole,
    Capability,
    LeadershipRole,
    MemoryStore,
    PromotionRole,
    Store,
    StoreRole,
    TopologyRole,
    WorkerRole,
    capabilities_of,
    require_roles,
    roles_of,
)
from chronos_trio.store._offers import CAPABILITY_ROLES, check_jobs
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing import CHECKS, Check, FaultyStore
from chronos_trio.testing.faulty_store import OPERATIONS


# -- the layout -------------------------------------------------------------------------
def _own_methods(role: type) -> set[str]:
    """The abstract methods a role adds to those of StoreRole."""
    return set(role.__abstractmethods__) - set(StoreRole.__abstractmethods__)


def test_each_method_belongs_to_one_role_and_store_is_all_of_them() -> None:
    owners: dict[str, list[str]] = {}
    for role in ROLES:
        for name in _own_methods(role):
            owners.setdefault(name, []).append(role.__name__)
    assert all(len(o) == 1 for o in owners.values()), owners
    assert set(owners) | set(StoreRole.__abstractmethods__) == set(Store.__abstractmethods__)
    assert StoreRole.__abstractmethods__ == frozenset({"now"})
    assert roles_of(Store) == ROLES


@pytest.mark.parametrize("backend", [MemoryStore, RedisStore, FaultyStore, Store])
def test_shipped_stores_offer_every_role(backend: type) -> None:
    assert roles_of(backend) == ROLES
    assert issubclass(backend, Store)
    assert capabilities_of(backend) == frozenset(Capability)


def test_the_core_is_worker_role_and_every_other_role_is_a_capability() -> None:
    assert ROLES[0] is WorkerRole and WorkerRole not in ROLE_CAPABILITIES
    assert set(ROLE_CAPABILITIES) == set(ROLES[1:])
    assert set(ROLE_CAPABILITIES.values()) | FEATURES == set(Capability)
    assert _own_methods(WorkerRole) == {
        "enqueue_many", "lease", "renew", "settle", "recover_expired", "wait_ready",
    }  # fmt: skip
    # roles are offered by subclassing: a declared role name counts for nothing
    lying = type("Lying", (limited_store_type([WorkerRole]),), {"features": frozenset(Capability)})
    assert capabilities_of(lying) == FEATURES
    assert capabilities_of(object()) == frozenset()


# -- stores that offer only some roles ---------------------------------------------------
def _without_handover(outcomes: Sequence[Any]) -> list[Any]:
    """``outcomes`` (Settlements) with no successor asked leased to the
    settling worker (``Successor.lease_to`` cleared), as a store without
    ``leases_in_settle`` treats them."""
    return [
        attrs.evolve(o, successor=attrs.evolve(o.successor, lease_to=""))
        if o.successor is not None and o.successor.lease_to
        else o
        for o in outcomes
    ]


def limited_store_type(
    roles: Sequence[type], features: Iterable[Capability] = (), label: str = ""
) -> type:
    """A store class offering exactly ``roles`` (and StoreRole) and declaring
    ``features``, each method passed to an ``inner`` store: the shape of a
    third-party backend with fewer capabilities. Its ``enqueue_many``
    refuses a job that uses a feature it does not declare, and its ``abort``
    raises without ABORT, so a check that uses one undeclared fails."""
    names = set(StoreRole.__abstractmethods__).union(*(r.__abstractmethods__ for r in roles))
    # and the roles' optional methods (a default in the role, e.g.
    # keep_workflows), so the inner store's own answer is what a check sees
    names |= {
        name
        for role in roles
        for name, value in vars(role).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }
    declared = frozenset(features)

    promotes = PromotionRole in roles

    def forward(name: str) -> Any:
        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "enqueue_many":
                check_jobs(self, args[0])
            if name == "settle":
                # a third-party backend does not hand successors over (it
                # declares no leases_in_settle): it ignores lease_to
                args = (_without_handover(args[0]), *args[1:])
            if name == "abort" and Capability.ABORT not in declared:
                raise AssertionError("abort used by a check that does not declare ABORT")
            if name in ("lease", "wait_ready") and not promotes:
                # No promoter: judge due times in the lease, as such a store must
                # (see WorkerRole), and wait no longer than the next due time.
                queues = [getattr(q, "name", q) for q in args[0]]
                promoted = await self.inner.promote_due(queues, 10_000)
                if name == "wait_ready" and promoted.next_due_at is not None:
                    due_in = max(0.0, promoted.next_due_at - promoted.now)
                    if "timeout" in kwargs:
                        kwargs["timeout"] = min(kwargs["timeout"], due_in)
                    else:
                        args = (args[0], min(args[1], due_in), *args[2:])
            return await getattr(self.inner, name)(*args, **kwargs)

        method.__name__ = name
        return method

    namespace: dict[str, Any] = {name: forward(name) for name in names}
    namespace["features"] = declared
    label = label or "".join(r.__name__.removesuffix("Role") for r in roles) or "Bare"
    return type(f"{label}OnlyStore", (*roles, StoreRole), namespace)


def limited_store(roles: Sequence[type], inner: Store) -> StoreRole:
    """An instance of :func:`limited_store_type` (no features) over ``inner``."""
    store = limited_store_type(roles)()
    store.inner = inner
    return cast(StoreRole, store)


def capable_store(needs: Iterable[Capability], inner: Store) -> StoreRole:
    """A store with the core and exactly the capabilities ``needs``."""
    needs = frozenset(needs)
    roles = [WorkerRole, *(CAPABILITY_ROLES[c] for c in sorted(needs) if c in CAPABILITY_ROLES)]
    store = limited_store_type(roles, needs & FEATURES, label="Capable")()
    store.inner = inner
    return cast(StoreRole, store)


def test_require_roles_names_the_missing_roles_and_who_needs_them() -> None:
    worker_only = limited_store([WorkerRole], MemoryStore())
    require_roles(worker_only, WorkerRole, what="a producer")
    require_roles(MemoryStore(), *ROLES, what="a full worker")
    with pytest.raises(TypeError) as info:
        require_roles(worker_only, WorkerRole, AdminRole, LeadershipRole, what="the janitor")
    message = str(info.value)
    assert message.startswith("the janitor needs a store offering WorkerRole, AdminRole and")
    assert "WorkerOnlyStore lacks AdminRole and LeadershipRole (it offers WorkerRole)" in message
    with pytest.raises(TypeError, match=r"object lacks AdminRole \(it offers no role\)"):
        require_roles(object(), AdminRole, what="x")


def test_inspector_needs_admin_and_topology() -> None:
    with pytest.raises(TypeError, match=r"the inspector needs .*AdminRole and TopologyRole"):
        Inspector(cast(Store, limited_store([WorkerRole, AdminRole], MemoryStore())))
    Inspector(cast(Store, limited_store([AdminRole, TopologyRole], MemoryStore())))


async def test_inspector_lists_queues_of_a_store_with_only_its_roles() -> None:
    inner = MemoryStore()
    await inner.set_paused("q", True)
    inspector = Inspector(cast(Store, limited_store([AdminRole, TopologyRole], inner)))
    [info] = await inspector.queues()
    assert info.name == "q" and info.paused and info.counts[JobState.READY] == 0
    assert [v.version for v in (await inspector.topology("q")).versions] == [1]


async def test_schedules_need_leadership() -> None:
    store = limited_store([AdminRole, TopologyRole], MemoryStore())
    host = types.SimpleNamespace(store=store, registry=None)
    with pytest.raises(TypeError, match="listing schedules needs a store offering LeadershipRole"):
        await schedule_rows(host)  # type: ignore[arg-type]


# -- the conformance suite -----------------------------------------------------------------
def test_every_check_declares_its_capabilities() -> None:
    assert len({c.name for c in CHECKS}) == len(CHECKS)
    for check in CHECKS:
        assert check.needs <= set(Capability), check
        assert set(check.roles) <= set(ROLES) and check.roles[0] is WorkerRole, check
    # The core has checks of its own, and so does every capability.
    assert any(not c.needs for c in CHECKS)
    assert {cap for c in CHECKS for cap in c.needs} == set(Capability)


@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_each_check_needs_only_the_capabilities_it_declares(
    check: Check, autojump_clock: object
) -> None:
    """A store with exactly the declared capabilities passes: a check that
    called a method of another role would fail here with an AttributeError,
    one that used an undeclared feature with MissingCapability."""

    async def fresh() -> StoreRole:
        return capable_store(check.needs, MemoryStore())

    assert check.skip_reason(capable_store(check.needs, MemoryStore())) is None
    await check(fresh)


def test_skip_reason_names_what_a_backend_lacks() -> None:
    [leadership] = [c for c in CHECKS if c.name == "leadership_epochs"]
    worker_only = type(limited_store([WorkerRole], MemoryStore()))
    assert leadership.skip_reason(worker_only) == (
        "leadership_epochs needs leadership, which WorkerOnlyStore does not offer"
    )
    assert leadership.skip_reason(MemoryStore) is None
    assert leadership.skip_reason(object) == (
        "leadership_epochs needs the core (WorkerRole), which object does not offer"
    )


async def test_a_check_refuses_a_store_without_its_roles(autojump_clock: object) -> None:
    [topology] = [c for c in CHECKS if c.name == "topology_versions_drain"]

    async def fresh() -> StoreRole:
        return limited_store([WorkerRole, AdminRole], MemoryStore())

    with pytest.raises(TypeError, match=r"topology_versions_drain needs topology, which the store"):
        await topology(fresh)


async def test_a_check_refuses_a_factory_store_that_is_not_empty(autojump_clock: object) -> None:
    async def fresh() -> MemoryStore:
        store = MemoryStore()
        await store.set_paused("leftover", True)
        return store

    with pytest.raises(AssertionError, match="the factory must make empty stores"):
        await CHECKS[0](fresh)


async def test_the_independence_check_fails_on_a_shared_store(autojump_clock: object) -> None:
    [independent] = [c for c in CHECKS if c.name == "factory_makes_independent_stores"]
    shared = limited_store([WorkerRole], MemoryStore())  # no AdminRole: no emptiness check

    async def fresh() -> StoreRole:
        return shared

    with pytest.raises(AssertionError, match="must not see another's jobs"):
        await independent(fresh)


class _Closing(MemoryStore):
    closed = 0

    async def aclose(self) -> None:
        type(self).closed += 1


async def test_a_check_closes_every_store_it_made_even_when_it_fails(
    autojump_clock: object,
) -> None:
    [independent] = [c for c in CHECKS if c.name == "factory_makes_independent_stores"]
    _Closing.closed = 0

    async def fresh() -> MemoryStore:
        return _Closing()

    await independent(fresh)
    assert _Closing.closed == 2

    async def failing(make: Any) -> None:
        await make()
        raise AssertionError("boom")

    with pytest.raises(AssertionError, match="boom"):
        await Check(failing)(fresh)
    assert _Closing.closed == 3


# -- FaultyStore -----------------------------------------------------------------------------
def test_faulty_store_wraps_every_role_method() -> None:
    every = {name for role in ROLES for name in role.__abstractmethods__}
    assert set(OPERATIONS) == every == set(Store.__abstractmethods__)
    for name in every:
        method = getattr(FaultyStore, name, None)
        assert method is not None, f"FaultyStore does not wrap {name}"
        assert not getattr(method, "__isabstractmethod__", False), name
        assert method.__doc__ == getattr(Store, name).__doc__
    assert not FaultyStore.__abstractmethods__


@pytest.mark.parametrize("name", sorted(Store.__abstractmethods__))
async def test_faulty_store_fails_and_forwards_each_operation(name: str) -> None:
    calls: list[str] = []

    class Spy(MemoryStore):
        pass

    for op in Store.__abstractmethods__:

        def spy(op: str = op) -> Any:
            async def method(self: Any, *args: Any, **kwargs: Any) -> str:
                calls.append(op)
                return op

            return method

        setattr(Spy, op, spy())
    store = FaultyStore(Spy())
    store.fail(name)
    with pytest.raises(Exception, match=f"injected fault in {name}"):
        await getattr(store, name)()
    assert await getattr(store, name)() == name
    assert calls == [name] and store.calls[name] == 2 and store.failures[name] == 1
