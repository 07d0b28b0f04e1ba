"""Wake-ups of a SQLite store's waiters, without a server.

Two sources, one signal:

* **this process**: a part whose write may have made work (a job ready, a
  job finished, the outbox filled) calls :meth:`Changes.signal` after the
  commit; every waiter of the process wakes at once;
* **other processes**: while anyone waits, one poller task of the process
  reads ``PRAGMA data_version`` on a connection that never writes (it
  changes whenever any other connection commits to the file: one look at
  the WAL index, no table is touched) and signals when it moved. It reads
  every ``wake_interval`` seconds while the file has changed within the
  last :data:`QUIET_AFTER` seconds, and every :data:`QUIET_FACTOR` intervals
  once it has been quiet that long (a wake-up of a Trio task costs CPU:
  on a 2-core VM an idle worker spent 33 ms of CPU a second polling every
  20 ms, 9 ms every 100 ms). Waiters themselves only sleep on the signal,
  so the cost is per process, however many tasks wait.

The poller is a Trio system task of the current run, started by the first
waiter and ending once nobody has waited for a whole interval; it never
raises (a failed read is a change: the waiters look, and meet the error
themselves).

A waiter takes a :meth:`mark` *before* it looks at the tables and waits
from that mark, so a change committed between its look and its wait is
never lost: it wakes it at once. A wake-up is a hint (a commit of any kind
wakes everyone): waiters look again and wait again when there is nothing
for them; the idle poll of the caller bounds a miss.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

#: Seconds without a change after which the poller slows down.
QUIET_AFTER = 1.0
#: How many times ``wake_interval`` a quiet file is polled at.
QUIET_FACTOR = 5

#: Reads the file's ``PRAGMA data_version``.
VersionReader = Callable[[], Awaitable[int]]


class Mark:
    """Where a waiter started: the process's wake-up generation."""

    __slots__ = ("event",)

    def __init__(self, event: trio.Event) -> None:
        self.event = event


class Changes:
    """The wake-ups of one store (its single owner of the signal)."""

    def __init__(self, read_version: VersionReader, interval: float) -> None:
        self._read_version = read_version
        self.interval = interval
        self._event = trio.Event()
        self._version: int | None = None
        self._waiting = 0
        self._changed_at = -float("inf")
        #: The run whose system task polls (None: no poller is running).
        self._polling_in: object | None = None

    def signal(self) -> None:
        """A write of this process committed something waiters may want:
        wake every waiter (they look again)."""
        self._event.set()
        self._event = trio.Event()
        self._changed_at = trio.current_time()

    async def mark(self) -> Mark:
        """The start of a wait (take it before looking at the tables). The
        first mark of a run reads the file's version, so that the poller
        compares later readings with one taken before the look."""
        self._ensure_poller()
        if self._version is None:
            self._version = await self._read_version()
        return Mark(self._event)

    async def wait(self, mark: Mark, seconds: float) -> bool:
        """Wait until a change after ``mark`` (this process's signal, or a
        commit of another process, seen within ``wake_interval``) or
        ``seconds``. True when a change came (or had come), False on
        timeout."""
        if mark.event.is_set():
            await trio.lowlevel.checkpoint()
            return True
        self._waiting += 1
        try:
            self._ensure_poller()
            with trio.move_on_after(max(0.0, seconds)):
                await mark.event.wait()
                return True
            return False
        finally:
            self._waiting -= 1

    def _ensure_poller(self) -> None:
        run = trio.lowlevel.current_root_task()
        if self._polling_in is run:
            return
        self._polling_in = run
        trio.lowlevel.spawn_system_task(self._poll, run, name="chronos_trio sqlite changes")

    async def _poll(self, run: object) -> None:
        """Read the data version every interval while anyone waits; signal
        when it moved. Never raises."""
        idle = 0
        try:
            while idle < 2:
                quiet = trio.current_time() - self._changed_at >= QUIET_AFTER
                await trio.sleep(self.interval * (QUIET_FACTOR if quiet else 1))
                if self._waiting == 0:
                    idle += 1
                    continue
                idle = 0
                try:
                    version = await self._read_version()
                except Exception:  # the waiters meet the error when they look
                    self.signal()
                    continue
                if version != self._version:
                    self._version = version
                    self.signal()
        finally:
            if self._polling_in is run:
                self._polling_in = None
