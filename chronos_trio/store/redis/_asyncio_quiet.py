"""A quiet asyncio loop: a round trip waits for its reply without a pass of
the event loop while nothing else in the loop has anything to do (the
asyncio twin of ``_quiet``, the Trio run's).

Waiting for a reply the usual way (``AsyncioNode``: ``add_reader``, a
timer, a future) takes two passes of the loop (``_run_once``: the select,
the reader's callback, then the task's wake-up; the socket, still readable
in the second pass, queues its callback once more) and the registrations
around them: about 40,000-50,000 instructions (callgrind, CPython 3.11:
an enqueue counted 198,000-209,000 waiting so, 158,000-160,000 blocking as
below, ``SyncProducer``'s 141,000), around a round trip whose blocking
``send`` and ``recv`` cost 4,000.
When the loop is quiet those passes do nothing a blocking wait would not:
so a round trip then blocks in ``poll()`` on its socket *and on the loop's
own epoll descriptor* (its selector's), which becomes readable as soon as
any I/O a callback waits for is ready, a thread's ``call_soon_threadsafe``
(the loop's self-pipe is registered there) or a signal with a handler of
``add_signal_handler`` (the wake-up descriptor is that self-pipe).

It blocks only when all of this holds, and gives up (the round trip goes
on in the loop's wait, from where it stands, within the same timeout) as
soon as one stops:

* the loop is the standard library's selector loop on epoll (not uvloop,
  a Windows or kqueue loop, or another class: their internals are not
  read; every wait is the loop's there), and is not stopping;
* no callback is ready to run (the loop's ready queue holds only
  cancelled handles: it is where every callback waits, the rest of the
  current pass's too, so nothing runnable hides elsewhere);
* no timer comes due before the block ends (the block ends at the
  earliest timer, rounded up to the millisecond as the loop's own select
  rounds it), and the block lasts at most :data:`CAP`;
* the loop's epoll descriptor stays unready (nothing else has I/O ready).

What a caller sees is unchanged: the replies, errors and timeout are the
same, and a task cancelled while its round trip waits (by a timer, another
task woken by I/O, a thread, or SIGINT under ``asyncio.run``, each of
which ends the block first) gets ``CancelledError`` from the loop's wait
as before, its connection closed. A block that gets its replies is no
suspension point, as a round trip whose replies were already there never
was. A Python signal handler that raises (a second Ctrl-C's
KeyboardInterrupt) raises in the blocked task, which closes its
connection. The loop's internals it reads (the ready queue, the timer
heap, the stopping flag, the selector's epoll object;
``test_asyncio_internals_in_use`` pins them): where they are missing,
every wait is the loop's, as before.
"""

from __future__ import annotations

import asyncio
import select
import selectors
import time
from typing import Any

#: Longest block, in seconds (a reply later than that is waited for on the
#: loop: a link that slow gains nothing from blocking).
CAP = 0.002


class QuietLoop:
    """One event loop's quiet state (see the module docstring); made for the
    loop a node belongs to. :attr:`epoll_fd` is -1 when this loop can never
    be quiet (then :meth:`budget` is always 0.0)."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.epoll_fd = -1
        self._ready: Any = ()
        #: Blocks that got their replies; blocks that gave up (for tests).
        self.blocked = 0
        self.interrupted = 0
        try:
            selector: Any = loop._selector
            standard = type(loop) is asyncio.SelectorEventLoop
            on_epoll = type(selector) is selectors.EpollSelector
            if standard and on_epoll:
                ready = loop._ready
                _ = (loop._scheduled, loop._stopping)
                self.epoll_fd = selector._selector.fileno()
                self._ready = ready
        except AttributeError:
            pass

    def budget(self) -> float:
        """How long the next round trip may block for its reply, in
        seconds: 0.0 when it must wait on the loop."""
        if self.epoll_fd < 0:
            return 0.0
        for handle in self._ready:
            if not handle._cancelled:
                return 0.0
        loop = self.loop
        if loop._stopping:
            return 0.0
        scheduled = loop._scheduled
        if scheduled:
            left: float = scheduled[0]._when - time.monotonic()  # (the loop's time)
            if left < CAP:
                return left if left > 0.0 else 0.0
        return CAP


def poller(sock_fd: int, epoll_fd: int) -> Any:
    """A ``poll`` object watching ``sock_fd`` and the loop's epoll descriptor."""
    p = select.poll()
    p.register(sock_fd, select.POLLIN)
    p.register(epoll_fd, select.POLLIN)
    return p
