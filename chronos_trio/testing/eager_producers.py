"""Stand-ins for :class:`~chronos_trio.producers.sync.SyncProducer` and
:class:`~chronos_trio.producers.asyncio.AsyncioProducer` in eager mode
(``mode.sync_producer()``, ``mode.asyncio_producer()``): the same calls
(``enqueue``, ``enqueue_many``, ``job``; handles with ``status()`` and
``result()``), each running the app's eager enqueue at once.

The real producers talk to Redis or SQL themselves, so eager mode cannot
reach them: a test puts a stand-in where the code under test finds its
producer (``monkeypatch.setattr(myproject.views, "producer", ...)``).

Each call runs on Trio: through ``trio.from_thread.run`` when
:func:`~chronos_trio.testing.eager` was entered inside a Trio run (then
call it from another thread: ``trio.to_thread.run_sync``, an asyncio
loop's thread), else in a ``trio.run`` of its own (a plain synchronous
test), one call at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import attrs
import trio

from ..app import App, JobHandle, Task
from ..records._errors import UnknownTask
from ..records._jobs import JobOutcome

T = TypeVar("T")


@attrs.define(eq=False)
class _Bridge:
    """Runs an async function of the eager app from synchronous code."""

    token: trio.lowlevel.TrioToken | None
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if trio.lowlevel.in_trio_run():
            raise RuntimeError(
                "an eager producer's calls block, as a SyncProducer's do: call it from "
                "synchronous code or another thread (trio.to_thread.run_sync), not a Trio task"
            )
        if self.token is not None:
            return trio.from_thread.run(fn, *args, trio_token=self.token)
        with self.lock:  # one trio.run at a time touches the eager store
            return trio.run(fn, *args)


@attrs.define(eq=False)
class EagerSyncHandle:
    """A job enqueued through :class:`EagerSyncProducer`: the fields of its
    :class:`~chronos_trio.JobHandle` and blocking ``status()``/``result()``
    (they raise what the JobHandle's raise)."""

    handle: JobHandle[Any]
    _bridge: _Bridge = attrs.field(repr=False)

    @property
    def job_id(self) -> str:
        return self.handle.job_id

    @property
    def created(self) -> bool:
        return self.handle.created

    @property
    def queue(self) -> str | None:
        return self.handle.queue

    @property
    def kind(self) -> str:
        return self.handle.kind

    def status(self) -> JobOutcome:
        return self._bridge.run(self.handle.status)

    def result(self, timeout: float | None = None) -> Any:
        return self._bridge.run(self.handle.result, timeout)


@attrs.define(eq=False)
class EagerSyncProducer:
    """SyncProducer's calls, run eagerly (see the module doc). ``task`` is
    a Task or a kind name of ``app`` (in eager mode); options are ``enqueue``'s.
    ``connection`` is not used. Raises what the eager enqueue raises, and
    RuntimeError when called in a Trio task."""

    app: App
    _bridge: _Bridge = attrs.field(repr=False)

    def enqueue(
        self, task: Task[Any] | str, payload: Any, *, connection: object = None, **options: Any
    ) -> EagerSyncHandle:
        async def enqueue() -> JobHandle[Any]:
            if isinstance(task, str):
                return await self.app.enqueue(task, payload, **options)
            return await task.enqueue(payload, **options)

        return EagerSyncHandle(self._bridge.run(enqueue), self._bridge)

    def enqueue_many(
        self,
        task: Task[Any] | str,
        payloads: Iterable[Any],
        *,
        delay: float | None = None,
        queue: str | None = None,
        connection: object = None,
    ) -> list[EagerSyncHandle]:
        target = self.app.tasks.get(task) if isinstance(task, str) else task
        if target is None:
            raise unknown_task(str(task))
        batch = list(payloads)

        async def enqueue_many() -> list[JobHandle[Any]]:
            return await target.enqueue_many(batch, delay=delay, queue=queue)

        return [EagerSyncHandle(h, self._bridge) for h in self._bridge.run(enqueue_many)]

    def job(self, job_id: str, *, queue: str | None = None, kind: str = "") -> EagerSyncHandle:
        return EagerSyncHandle(self.app.job(job_id, queue=queue, kind=kind), self._bridge)

    def close(self) -> None:
        """Nothing to close (as SyncProducer's ``close``)."""


@attrs.define(eq=False)
class EagerAsyncioHandle:
    """A job enqueued through :class:`EagerAsyncioProducer`: the fields of
    its :class:`~chronos_trio.JobHandle`, awaitable ``status()`` and
    ``result()``."""

    sync: EagerSyncHandle

    @property
    def job_id(self) -> str:
        return self.sync.job_id

    @property
    def created(self) -> bool:
        return self.sync.created

    async def status(self) -> JobOutcome:
        return await asyncio.to_thread(self.sync.status)

    async def result(self, timeout: float | None = None) -> Any:
        return await asyncio.to_thread(self.sync.result, timeout)


@attrs.define(eq=False)
class EagerAsyncioProducer:
    """AsyncioProducer's calls, run eagerly, each in a thread of the asyncio
    loop's (``asyncio.to_thread``) that runs it on Trio as
    :class:`EagerSyncProducer` does."""

    sync: EagerSyncProducer

    async def enqueue(
        self, task: Task[Any] | str, payload: Any, *, connection: object = None, **options: Any
    ) -> EagerAsyncioHandle:
        def enqueue() -> EagerSyncHandle:
            return self.sync.enqueue(task, payload, **options)

        return EagerAsyncioHandle(await asyncio.to_thread(enqueue))

    async def enqueue_many(
        self, task: Task[Any] | str, payloads: Iterable[Any], **options: Any
    ) -> list[EagerAsyncioHandle]:
        """As :meth:`EagerSyncProducer.enqueue_many` (``delay``, ``queue``,
        ``connection``)."""

        def enqueue_many() -> list[EagerSyncHandle]:
            return self.sync.enqueue_many(task, payloads, **options)

        return [EagerAsyncioHandle(h) for h in await asyncio.to_thread(enqueue_many)]

    def job(self, job_id: str, *, queue: str | None = None, kind: str = "") -> EagerAsyncioHandle:
        return EagerAsyncioHandle(self.sync.job(job_id, queue=queue, kind=kind))

    async def aclose(self) -> None:
        """Nothing to close (as AsyncioProducer's ``aclose``)."""


def sync_producer(app: App) -> EagerSyncProducer:
    """A stand-in SyncProducer for ``app`` in eager mode (see the module
    doc); made in a Trio run, its calls go back to that run."""
    token = trio.lowlevel.current_trio_token() if trio.lowlevel.in_trio_run() else None
    return EagerSyncProducer(app, _Bridge(token))


def unknown_task(kind: str) -> UnknownTask:
    """What eager mode raises for a kind its app does not register."""
    return UnknownTask(f"eager mode runs only this app's tasks: no task {kind!r} is registered")
