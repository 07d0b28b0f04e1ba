"""The PostgreSQL store: :class:`PostgresStore`, made of one part per group
of roles (``_worker``, ``_admin``, ``_registry``, ``_leader``, ``_check``),
each a mixin over the shared :class:`~._database.Database`.

It offers every role but promotion (a claim judges due times itself: a
scheduled or retry_wait job whose time has come is leased as if ready, so no
promoter runs) and every feature.
"""

from __future__ import annotations

from typing import ClassVar

from .._capabilities import FEATURES, Capability
from .._observer import StoreObserver
from ._admin import AdminPart
from ._aggregates import AggregatesPart
from ._check import CheckPart
from ._database import Database
from ._leader import LeaderPart
from ._notes import NotesPart
from ._registry import RegistryPart
from ._schedules import SchedulesPart
from ._search import SearchPart
from ._transactional import TransactionalPart
from ._url import PostgresOptions, parse_url
from ._worker import WorkerPart
from ._workflows import WorkflowPart


class PostgresStore(
    WorkerPart,
    AdminPart,
    RegistryPart,
    LeaderPart,
    CheckPart,
    NotesPart,
    SchedulesPart,
    SearchPart,
    AggregatesPart,
    TransactionalPart,
    WorkflowPart,
):
    """A store in a PostgreSQL database (``postgresql://`` URLs; see
    ``_url`` for the options). Shared by every process and host that
    reaches the database. Nothing connects until the first operation, which
    applies pending migrations (``migrate=auto``) or checks the schema is
    current (``migrate=off``) and raises StoreError otherwise.

    It also writes jobs in a caller's own transaction
    (:class:`~chronos_trio.store._transactional.TransactionalEnqueue`:
    ``task.enqueue(payload, connection=conn)``)."""

    shared_across_processes = True
    features: ClassVar[frozenset[Capability]] = FEATURES

    def __init__(self, options: PostgresOptions) -> None:
        self._db = Database(options)
        self._files = self._db

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """A store for ``url``. ValueError for a malformed URL or option."""
        return cls(parse_url(url))

    @property
    def options(self) -> PostgresOptions:
        return self._db.options

    @property
    def schema(self) -> str:
        """The PostgreSQL schema the store's tables live in."""
        return self._db.schema

    def observe_round_trips(self, observer: StoreObserver | None) -> None:
        self._db.observe(observer)

    async def aclose(self) -> None:
        await self._close_waiting()
        await self._db.aclose()

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"


def open_postgres_store(url: str) -> PostgresStore:
    """The scheme registry's opener for ``postgresql://`` and ``postgres://``."""
    return PostgresStore.from_url(url)
