"""The runtime tests' backend: one parametrized fixture runs a test on the
MemoryStore under Trio's virtual clock, and on a real Redis, a real
PostgreSQL and a SQLite file under the real clock.

* ``backend`` (function, ids ``memory``, ``redis``, ``postgres`` and ``sqlite``): a
  :class:`Backend`,
  which makes fresh stores (closed after the test) and holds the timing and
  tolerances suited to its clock.
* ``clock``: the clock ``backend`` needs. pytest-trio runs a test under the
  ``trio.abc.Clock`` among the test's own arguments (none: the real clock),
  and it picks it before the run starts, so the clock cannot come from inside
  ``backend``: a backend test takes ``clock`` too. It is the autojump
  ``MockClock`` on memory and ``None`` on Redis; ``backend`` fails a test that
  runs under any other clock, so forgetting ``clock`` cannot turn virtual
  minutes into real ones.

::

    async def test_x(backend: Backend, clock: object) -> None:
        rec = Recorder(backend.store())
        async with rec.app.open_worker(**backend.timing(poll_interval=0.5)) as worker:
            n = backend.pick(memory=100, redis=20)
            ...
        assert started == backend.around(7.0, abs=0.05)

The Redis case needs a ``redis-server`` binary (see ``tests/_redis_fixtures.py``)
and carries the ``redis`` mark; the PostgreSQL case needs the server binaries
(``tests/_postgres_fixtures.py``) and carries the ``postgres`` mark, so
``-m "not redis and not postgres"`` leaves memory and SQLite (a file in the
test's temporary directory, mark ``sqlite``). PostgreSQL and SQLite take the
Redis case's timing and sizes (``pick``'s ``redis``): all three are real clocks.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import pytest
import trio
import trio.testing

from chronos_trio import MemoryStore
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.testing import DamageableMemoryStore

if TYPE_CHECKING:
    from chronos_trio import Store

__all__ = ["Backend", "_backend_case", "backend", "clock"]

T = TypeVar("T")

#: Worker timing on Redis: short real intervals in place of the virtual ones.
REDIS_TIMING = {
    "poll_interval": 0.2,
    "lease_duration": 1.5,
    "recover_interval": 0.2,
    "heartbeat_interval": 0.5,
    "shutdown_grace": 0.5,
}

#: How late a real run may be against the time a virtual one hits exactly.
REDIS_SLACK = 0.3

_namespaces = itertools.count()


@attrs.frozen(eq=False)
class Within:
    """Equal to any number in ``[low, high]``, like ``pytest.approx`` but lopsided."""

    low: float
    high: float

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int | float) and self.low <= other <= self.high

    def __repr__(self) -> str:
        return f"<between {self.low:g} and {self.high:g}>"


@attrs.define(eq=False)
class Backend:
    """One backend's store factory, timing and tolerances."""

    #: ``"memory"``, ``"redis"`` or ``"postgres"``.
    name: str
    redis_url: str | None = None
    postgres_url: str | None = None
    sqlite_urls: Callable[[], str] | None = None
    _stores: list[Store] = attrs.field(factory=list)

    @property
    def virtual(self) -> bool:
        """True when the test runs on the virtual (autojump) clock."""
        return self.name == "memory"

    def store(self, *, damageable: bool = False) -> Store:
        """A fresh, empty store: a MemoryStore (``damageable``: a
        ``DamageableMemoryStore``, whose records a test can damage), or a
        RedisStore on a namespace of its own, or a PostgresStore on a schema
        of its own. Redis and PostgreSQL stores are closed after the test."""
        made: Store
        if self.sqlite_urls is not None:
            made = cast("Store", SqliteStore.from_url(self.sqlite_urls()))
        elif self.postgres_url is not None:
            made = cast(
                "Store",
                PostgresStore.from_url(f"{self.postgres_url}?schema=t{next(_namespaces)}"),
            )
        elif self.redis_url is None:
            made = DamageableMemoryStore() if damageable else MemoryStore()
        else:
            made = RedisStore.from_url(self.redis_url, namespace=f"t{next(_namespaces)}")
        self._stores.append(made)
        return made

    def pick(self, *, memory: T, redis: T) -> T:
        """``memory`` on the virtual clock, ``redis`` on the real one: job
        counts and durations, so that a real run stays short."""
        return memory if self.virtual else redis

    def timing(self, **memory: Any) -> dict[str, Any]:
        """Worker options: ``memory`` as given on the virtual clock; on Redis,
        the short real :data:`REDIS_TIMING` value for each of those keys that
        has one."""
        if self.virtual:
            return dict(memory)
        return {key: REDIS_TIMING.get(key, value) for key, value in memory.items()}

    def late(self, abs: float) -> float:
        """How late a measured time may be: ``abs`` on the virtual clock, at
        least :data:`REDIS_SLACK` on a real one."""
        return abs if self.virtual else max(abs, REDIS_SLACK)

    def around(self, expected: float, *, abs: float) -> object:
        """What a measured time must equal: on the virtual clock ``expected``
        within ``abs`` either side; on a real one never earlier than that and at
        most :meth:`late` late."""
        if self.virtual:
            return pytest.approx(expected, abs=abs)
        return Within(expected - abs, expected + self.late(abs))

    async def aclose(self) -> None:
        for store in self._stores:
            await store.aclose()


@attrs.frozen
class _Case:
    name: str
    clock: trio.abc.Clock | None
    redis_url: str | None
    postgres_url: str | None = None
    sqlite_urls: Callable[[], str] | None = None


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
    ]
)
def _backend_case(request: pytest.FixtureRequest) -> _Case:
    if request.param == "memory":
        return _Case("memory", trio.testing.MockClock(autojump_threshold=0), None)
    if request.param == "postgres":
        return _Case("postgres", None, None, request.getfixturevalue("postgres_url"))
    if request.param == "sqlite":
        return _Case("sqlite", None, None, None, request.getfixturevalue("sqlite_urls"))
    return _Case("redis", None, request.getfixturevalue("redis_url"))


@pytest.fixture
def clock(_backend_case: _Case) -> trio.abc.Clock | None:
    return _backend_case.clock


@pytest.fixture
async def backend(_backend_case: _Case) -> AsyncIterator[Backend]:
    running = trio.lowlevel.current_clock()
    if _backend_case.clock is not None and running is not _backend_case.clock:
        pytest.fail("a test on `backend` must take the `clock` fixture too")
    if _backend_case.clock is None and isinstance(running, trio.testing.MockClock):
        pytest.fail("a test on `backend` runs under the `clock` fixture, not another one")
    made = Backend(
        _backend_case.name,
        _backend_case.redis_url,
        _backend_case.postgres_url,
        _backend_case.sqlite_urls,
    )
    try:
        yield made
    finally:
        await made.aclose()
