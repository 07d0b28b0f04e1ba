"""Transactional enqueue, as a capability of the store contract: a store
that can write jobs **on the caller's own database connection, inside the
caller's transaction**, so that a job exists if and only if that
transaction commits (the business row and its job commit or roll back
together).

The worker side (the App) reaches it only through
:class:`TransactionalEnqueue`, and the producers outside Trio only through
:class:`ProducerEnqueue`, which a backend offers in modules that never
import Trio (never a backend's modules by name: the scheme registry's
producer opener); the PostgreSQL and SQLite stores offer both.
:func:`transactional_store` refuses, with one clear
:class:`MissingCapability`, a store that does not.

What a "connection" may be is the backend's to say (for PostgreSQL: a
psycopg connection, a SQLAlchemy connection or session, Django's
connection; for SQLite: a ``sqlite3.Connection`` to the store's file); a
connection it does not recognise is a ``TypeError`` raised before anything
is written.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ..records._jobs import EnqueueResult, JobOutcome, JobRef, NewJob
from ..records._notes import JobNotes
from ._capabilities import MissingCapability


class ProducerEnqueue(abc.ABC):
    """What a producer outside Trio needs of a store that writes jobs in
    the caller's transaction: the blocking and asyncio forms, and its
    committed enqueue and outcome reads. A backend offers it in a module
    that never imports Trio (the scheme registry's producer opener), so a
    producer on such a store imports no Trio.

    Every method writes ``jobs`` with statements run on ``connection`` (the
    caller's), commits nothing and rolls nothing back: the caller's
    transaction decides. The jobs are visible to workers only once it
    commits, and gone if it rolls back or the caller dies first; workers are
    woken at commit. On an autocommit connection (no transaction open) each
    statement commits at once, so the jobs are stored when the call returns.

    Each raises ``TypeError`` for a connection of a kind the store does not
    know, ``ValueError`` for one that is closed or whose transaction has
    failed, and ``StoreError`` when the store's schema is missing or not
    current in the connection's database or a statement fails (the caller's
    transaction must then be rolled back); nothing was written then.
    """

    @abc.abstractmethod
    def enqueue_in_transaction_blocking(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        """From a thread (no event loop): a synchronous connection."""

    @abc.abstractmethod
    async def enqueue_in_transaction_asyncio(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        """From asyncio: an asyncio connection (awaited on the loop), or a
        synchronous one (used in a thread of ``asyncio.to_thread``)."""

    @abc.abstractmethod
    def enqueue_committed_blocking(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """From a thread: write ``jobs`` on a connection of the store's own,
        committed before it returns (a producer given no connection).
        Raises ``StoreError`` when the database cannot be reached (the jobs
        may or may not be stored then, as for every enqueue)."""

    @abc.abstractmethod
    async def enqueue_committed_asyncio(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """:meth:`enqueue_committed_blocking` from asyncio."""

    @abc.abstractmethod
    def outcome_blocking(self, ref: JobRef) -> JobOutcome | None:
        """From a thread (a producer's handle): where the job ``ref`` stands
        now, read on a connection of the store's own; None when there is no
        such job. Raises ``StoreError`` when the database cannot be reached."""

    @abc.abstractmethod
    def notes_blocking(self, ref: JobRef) -> JobNotes | None:
        """From a thread (a producer's handle): the job ``ref``'s progress
        and log lines, read on a connection of the store's own; None when
        there is no such job. Raises ``StoreError`` when the database cannot
        be reached."""

    def close_blocking(self) -> None:  # noqa: B027 - a store may hold nothing open
        """From a thread: close the connections the store opened for the
        blocking and asyncio methods (a producer's ``close``). The store
        cannot be used afterwards. Does nothing by default."""


class TransactionalEnqueue(ProducerEnqueue):
    """A store (a mixin of the store class, beside its roles) that writes
    jobs in the caller's transaction from Trio too, as
    :class:`ProducerEnqueue` says."""

    @abc.abstractmethod
    async def enqueue_in_transaction(
        self, connection: object, jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        """From Trio: a synchronous connection, used in a worker thread
        (the call waits for it; the connection must not be used meanwhile)."""

    async def start_workflow_in_transaction(
        self,
        connection: object,
        workflow_id: str,
        tree: str,
        first_kind: str,
        ttl: float,
        jobs: Sequence[NewJob],
    ) -> list[EnqueueResult]:
        """From Trio, as :meth:`enqueue_in_transaction`: a workflow's first
        ``jobs`` and, before them in the same transaction, its record (as
        ``WorkflowRole.save_workflow`` saves it: ``tree``, ``first_kind``,
        kept ``ttl`` seconds; a live record of that ID stands), so that the
        record commits, or rolls back, with the jobs. Raises as
        :meth:`enqueue_in_transaction`. This default writes the jobs alone
        (a store without workflow records: the flow cannot be cancelled or
        viewed by its ID); the PostgreSQL and SQLite stores write both."""
        return await self.enqueue_in_transaction(connection, jobs)


def transactional_store(store: object, where: str = "") -> TransactionalEnqueue:
    """``store`` as a :class:`TransactionalEnqueue`; ``MissingCapability``
    naming the store (and ``where`` it came from, e.g. its URL) when it
    cannot write jobs in the caller's transaction. Nothing is written then."""
    if isinstance(store, TransactionalEnqueue):
        return store
    raise not_transactional(type(store).__name__, where)


def not_transactional(store_name: str, where: str = "") -> MissingCapability:
    """The error for ``connection=`` given to a store (named ``store_name``,
    at ``where``) that cannot write jobs in the caller's transaction."""
    at = f" ({where})" if where else ""
    return MissingCapability(
        f"enqueue(connection=...) writes jobs in your own database transaction, which "
        f"needs a PostgreSQL store (postgresql://...) or a SQLite store (sqlite:///...) "
        f"in the same database; this store is {store_name}{at}. No job was stored; "
        "enqueue without connection=, or use a PostgreSQL or SQLite store"
    )


__all__ = ["ProducerEnqueue", "TransactionalEnqueue", "not_transactional", "transactional_store"]
