"""The SQLite store: :class:`SqliteStore`, made of one part per group of
roles (``_worker``, ``_admin``, ``_registry``, ``_leader``, ``_check``,
``_transactional``), each a mixin over the shared
:class:`~._database.Database`.

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
from ._connections import Clock
from ._database import Database
from ._leader import LeaderPart
from ._notes import NotesPart
from ._registry import RegistryPart
from ._schedules import SchedulesPart
from ._search import SearchPart
from ._transactional import TransactionalPart
from ._url import SqliteOptions, parse_url
from ._worker import WorkerPart
from ._workflows import WorkflowPart


class SqliteStore(
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
    """A store in one SQLite file (``sqlite:///path/to/jobs.db``; see
    ``_url`` for the options), durable across restarts and shared by every
    process of one host that opens the file (not across hosts, and never on
    a network filesystem: SQLite's locks are not safe there). Nothing opens
    until the first operation, which creates the schema in a new file (or
    checks an existing file's) and raises StoreError when it cannot.

    ``clock`` (tests): the store's clock in epoch seconds, default the
    host's wall clock."""

    shared_across_processes = True
    features: ClassVar[frozenset[Capability]] = FEATURES

    def __init__(self, options: SqliteOptions, *, clock: Clock | None = None) -> None:
        self._db = Database(options, clock=clock)
        self._files = self._db

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SqliteStore:
        """A store for ``url``. ValueError for a malformed URL or option."""
        return cls(parse_url(url), clock=clock)

    @property
    def options(self) -> SqliteOptions:
        return self._db.options

    @property
    def path(self) -> str:
        """The database file's path."""
        return self._db.path

    def observe_round_trips(self, observer: StoreObserver | None) -> None:
        self._db.observe(observer)

    async def aclose(self) -> None:
        await self._db.aclose()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"


def open_sqlite_store(url: str) -> SqliteStore:
    """The scheme registry's opener for ``sqlite://``."""
    return SqliteStore.from_url(url)
