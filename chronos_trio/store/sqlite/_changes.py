"""Wake-ups of a SQLite store's waiters, without a server.

Two sources, one signal:

* **this process**: a part whose write may have made work (a job ready, a
  job finished, the outbox filled) calls :meth:`Changes.signal` after the
  commit; every waiter of the process wakes at once;
* **other processes**: while anyone waits, ``PRAGMA data_version`` is read
  every ``wake_interval`` seconds on a connection that never writes (it
  changes whenever any other connection commits to the file: one cheap
  read of the WAL index, no table is touched). Readings are shared by the
  waiters of a process: at most one per ``wake_interval / 2``.

A waiter takes a :meth:`mark` *before* it looks at the tables and waits
from that mark, so a change committed between its look and its wait is
never lost: it wakes it at once. A wake-up is a hint (a commit of any kind
wakes everyone): waiters look again and wait again when there is nothing
for them; the idle poll of the caller bounds a miss.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

#: Reads the file's ``PRAGMA data_version`` (off the Trio loop).
VersionReader = Callable[[], Awaitable[int]]


class Mark:
    """Where a waiter started: the process's wake-up generation and the
    file's data version it knew then."""

    __slots__ = ("event", "version")

    def __init__(self, event: trio.Event, version: int) -> None:
        self.event = event
        self.version = version


class Changes:
    """The wake-ups of one store (its single owner of the signal)."""

    def __init__(self, read_version: VersionReader, interval: float) -> None:
        self._read_version = read_version
        self.interval = interval
        self._event = trio.Event()
        self._version: int | None = None
        self._read_at = -float("inf")
        self._reading: trio.Event | None = None

    def signal(self) -> None:
        """A write of this process committed something waiters may want:
        wake every waiter (they look again)."""
        self._event.set()
        self._event = trio.Event()

    async def mark(self) -> Mark:
        """The start of a wait (take it before looking at the tables)."""
        if self._version is None:
            await self._poll(force=True)
        assert self._version is not None
        return Mark(self._event, self._version)

    async def wait(self, mark: Mark, seconds: float) -> bool:
        """Wait until a change after ``mark`` (this process's signal, or a
        commit of another process seen within ``interval``) or ``seconds``.
        True when a change came (or had come), False on timeout. Raises
        StoreError only if the file cannot be read at all."""
        deadline = trio.current_time() + max(0.0, seconds)
        while True:
            if mark.event.is_set():
                return True
            if self._version is not None and self._version != mark.version:
                return True
            left = deadline - trio.current_time()
            if left <= 0:
                return False
            with trio.move_on_after(min(left, self.interval)):
                await mark.event.wait()
                return True
            await self._poll()

    async def _poll(self, *, force: bool = False) -> None:
        """Read the data version (shared: a reading younger than half an
        interval is reused, and concurrent callers wait for one reading)."""
        if not force and trio.current_time() - self._read_at < self.interval / 2:
            return
        if self._reading is not None:
            await self._reading.wait()
            return
        self._reading = reading = trio.Event()
        try:
            version = await self._read_version()
            self._read_at = trio.current_time()
            if self._version is not None and version != self._version:
                self._version = version
                self.signal()
            else:
                self._version = version
        finally:
            self._reading = None
            reading.set()
