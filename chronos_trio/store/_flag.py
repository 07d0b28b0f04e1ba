"""A wake-up flag a writer raises and one waiter takes (the workflow outbox's
"something to continue" signal, on every backend)."""

from __future__ import annotations

import trio


class Flag:
    """Raised by :meth:`set`, taken by :meth:`take`. A raise
    that comes while nobody waits is kept for the next take, so a waiter
    that reads what the raise announced after taking the flag misses
    nothing."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        """Raise the flag (it stays raised until taken)."""
        self._event.set()

    async def take(self, timeout: float) -> None:
        """Wait until the flag is raised, at most ``timeout`` seconds, then
        lower it: a raise after this returns wakes the next take. Always a
        checkpoint; never raises (but ``trio.Cancelled``)."""
        if not self._event.is_set():
            with trio.move_on_after(timeout):
                await self._event.wait()
        # lowered before the caller reads what was announced: a raise after
        # this is for the next take
        self._event = trio.Event()
        await trio.lowlevel.checkpoint()
