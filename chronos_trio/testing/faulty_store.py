"""A store wrapper that injects faults, for fault-injection tests.

``FaultyStore(inner)`` behaves exactly like ``inner`` until told otherwise,
and offers exactly its roles and features (wrapping a store without
promotion, it offers none, so a worker starts no promoter)::

    store.fail("settle", times=3)      # the next 3 settle calls raise StoreError
    store.break_ops("renew", "lease")  # every call raises until heal()
    store.heal()

It wraps every method of every role (:data:`OPERATIONS`, built from the
roles themselves, so a method added to a role is wrapped without a change
here); ``aclose`` is passed through and never fails.
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..store._capabilities import Capability
from ..store._roles import ROLES, Store, StoreError, StoreRole, roles_of


class _FaultInjection(StoreRole):
    """What every FaultyStore class has: the wrapped store, the counters and
    the faults to inject, and a delegate for every operation of every role."""

    inner: Store

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.shared_across_processes = inner.shared_across_processes
        self.calls: collections.Counter[str] = collections.Counter()
        self.failures: collections.Counter[str] = collections.Counter()
        self._fail_next: collections.Counter[str] = collections.Counter()
        self._broken: set[str] = set()
        self._make_error: Callable[[str], BaseException] = lambda op: StoreError(
            f"injected fault in {op}"
        )

    def fail(self, op: str, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``op`` raise."""
        self._check(op)
        self._fail_next[op] += times

    def break_ops(self, *ops: str) -> None:
        """Make every call of ``ops`` (all operations when none given) raise."""
        for op in ops:
            self._check(op)
        self._broken |= set(ops) if ops else set(OPERATIONS)

    def heal(self) -> None:
        self._broken.clear()
        self._fail_next.clear()

    def _check(self, op: str) -> None:
        if op not in OPERATIONS:
            raise ValueError(f"unknown store operation {op!r}")

    def _maybe_fail(self, op: str) -> None:
        self.calls[op] += 1
        if op in self._broken or self._fail_next[op] > 0:
            if self._fail_next[op] > 0:
                self._fail_next[op] -= 1
            self.failures[op] += 1
            raise self._make_error(op)

    async def aclose(self) -> None:
        await self.inner.aclose()


class FaultyStore(_FaultInjection, Store):
    """Delegates every :class:`Store` method to ``inner``, failing on demand.

    ``FaultyStore(inner)`` of a store that lacks some roles is an instance of
    a class with just ``inner``'s roles and features (its name is
    FaultyStore too, but it is not a subclass of this one)."""

    def __new__(cls, inner: Store, *args: Any, **kwargs: Any) -> FaultyStore:
        if cls is FaultyStore and set(roles_of(inner)) != set(ROLES):
            made: Any = object.__new__(_faulty_class(roles_of(inner), type(inner).features))
            _FaultInjection.__init__(made, inner)
            return made  # type: ignore[no-any-return]
        return super().__new__(cls)


@functools.cache
def _faulty_class(roles: tuple[type, ...], features: frozenset[Capability]) -> type:
    return type(
        "FaultyStore",
        (_FaultInjection, *roles),
        {"features": features, "__abstractmethods__": frozenset()},
    )


#: Every store operation a FaultyStore can fail: each method of each role.
OPERATIONS = sorted({name for role in ROLES for name in role.__abstractmethods__})


def _delegate(name: str) -> Any:
    async def method(self: _FaultInjection, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail(name)
        return await getattr(self.inner, name)(*args, **kwargs)

    declared = getattr(Store, name)
    method.__name__ = name
    method.__qualname__ = f"FaultyStore.{name}"
    method.__doc__ = declared.__doc__
    # Introspection (help(), the public-API test) sees the role's signature.
    method.__signature__ = inspect.signature(declared)  # type: ignore[attr-defined]
    method.__annotations__ = dict(declared.__annotations__)
    return method


for _name in OPERATIONS:
    setattr(_FaultInjection, _name, _delegate(_name))
_FaultInjection.__abstractmethods__ = frozenset()
FaultyStore.__abstractmethods__ = frozenset()
