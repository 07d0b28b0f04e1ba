"""A quiet Trio run: a lone round trip waits for its reply without a pass
of Trio's scheduler while nothing else in the run has anything to do.

Waiting for a reply the usual way (``trio.lowlevel.wait_readable``) parks
the task, and Trio's run loop registers the socket with epoll, waits, takes
the event and reschedules the task: about 57,000 instructions (callgrind,
Trio 0.35) around a round trip that costs 4,000 blocking, most of the
difference between an awaited enqueue from Trio and the blocking
producer's. When the run is quiet, that pass does nothing a blocking wait
would not: so a lone round trip (``NativeNode.execute(lone=True)``, the one
of a lone ``task.enqueue``) then blocks in ``poll()`` on its socket *and on
Trio's own epoll descriptor*, which becomes readable as soon as any I/O
another task waits for (or a wake-up from a thread or a signal) is ready.

It blocks only when all of this holds, and gives up (the round trip goes
on in the scheduler's wait, from where it stands) as soon as one stops:

* no task is runnable (``runq``), none waits for the run to be idle
  (``wait_all_tasks_blocked``), no instrument is installed, no
  KeyboardInterrupt is pending, the clock is Trio's system clock and the
  run is not a guest run: checked before each block;
* no Trio deadline comes before the block ends (a sleep, a cancel scope's
  deadline: the block ends at the earliest, rounded up to the millisecond
  as Trio's own wait rounds it), and the block lasts at most :data:`CAP`;
* Trio's epoll descriptor stays unready (no other task's I/O is ready);
* the run was seen quiet by the last *probe*. Tasks that Trio runs in the
  same scheduler pass as the caller are in no queue that can be looked at
  (the pass's batch is a local of Trio's run loop), so a block could hold
  them up for a round trip. So after a few quiet round trips (4, then
  twice as many after each quiet probe, up to :data:`CREDIT`) the next one
  waits in the scheduler with an instrument counting the steps of other
  tasks meanwhile (a probe): none, and the next may block; some, and the
  next :data:`SKIP` wait in the scheduler, as they do after a block that
  gave up because the run had work. A task that enqueues in a loop beside
  tasks woken with it thus runs at most :data:`CREDIT` round trips ahead of
  them (4 after any sign of other work). A process with concurrent work (a worker, a
  server under load, concurrent enqueues that group commit joins) thus
  waits in the scheduler nearly always; a producer with nothing else to
  do blocks nearly always.

What a caller sees is unchanged: the round trip's replies and errors are
the same; a lone round trip is already no cancellation point (its
cancellation lands at the caller's next checkpoint). A block that gets its
replies is no schedule point either: in a quiet run nobody can tell, but
for the tasks of the caller's own scheduler pass (above), which may start
up to one round trip (at most :data:`CAP`) later. It reads Trio internals
(the runner's run queue, deadlines, instruments and epoll object;
``test_trio_internals_in_use`` pins them): where they are missing
(another Trio version, another platform's I/O manager) the run is never
quiet and every wait is the scheduler's.
"""

from __future__ import annotations

import contextlib
import select
from typing import Any

import trio

#: Quiet round trips allowed by a quiet probe: the first after a busy one
#: allows :data:`FIRST_CREDIT`, each next one twice as many, up to :data:`CREDIT`.
FIRST_CREDIT = 4
CREDIT = 64
#: Round trips that wait in the scheduler after a probe saw other tasks
#: step, or after a block gave up because the run had work, before the
#: next probe.
SKIP = 64
#: Longest block, in seconds (a reply later than that is waited for in the
#: scheduler: a link that slow gains nothing from blocking).
CAP = 0.002


class _Steps(trio.abc.Instrument):
    """Notes whether a task other than ``task`` took a step."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.others = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.task:
            self.others = True


class QuietRun:
    """One Trio run's quiet state (see the module docstring)."""

    def __init__(self) -> None:
        #: Trio's runner, or None when this run can never be quiet (then
        #: there is never credit: :meth:`probe` gives none).
        self._runner: Any = None
        #: The file descriptor of Trio's epoll object (-1: none).
        self.epoll_fd = -1
        # the runner's parts read by budget(), each looked up once
        self._runq: Any = ()
        self._idle_waiters: Any = ()
        self._instruments: Any = ()
        self._next_deadline: Any = None
        self._now: Any = None
        self._credit = 0
        self._grant = FIRST_CREDIT
        self._skip = 0
        #: Blocks that got their replies, blocks that gave up, probes (for tests).
        self.blocked = 0
        self.interrupted = 0
        self.probes = 0
        try:
            from trio._core._run import GLOBAL_RUN_CONTEXT, SystemClock

            runner = GLOBAL_RUN_CONTEXT.runner
            epoll = runner.io_manager._epoll  # type: ignore[attr-defined,unused-ignore]
            if type(runner.clock) is SystemClock and not runner.is_guest:
                _ = runner.ki_pending  # (missing: an AttributeError now, not later)
                self._runq = runner.runq
                self._idle_waiters = runner.waiting_for_idle
                self._instruments = runner.instruments.data["_all"]
                self._next_deadline = runner.deadlines.next_deadline
                self._now = runner.clock.current_time
                self.epoll_fd = epoll.fileno()
                self._runner = runner
        except (ImportError, AttributeError, KeyError, RuntimeError):
            pass

    def budget(self) -> float:
        """How long the next lone round trip may block for its reply, in
        seconds: 0.0 when it must wait in the scheduler (then
        :meth:`probe` says whether that wait is a probe). Counts it."""
        if (
            self._credit <= 0
            or self._runq
            or self._idle_waiters
            or self._instruments
            or self._runner.ki_pending
        ):
            return 0.0
        left = self._next_deadline() - self._now()
        if left <= 0.0:
            return 0.0
        self._credit -= 1
        return CAP if left > CAP else left

    def gave_up(self, busy: bool) -> None:
        """A block gave up: ``busy``, the run had work (its epoll was ready:
        the next :data:`SKIP` round trips wait in the scheduler); else its
        budget was spent or the socket's buffer was full."""
        self.interrupted += 1
        if busy:
            self._busy()

    def _busy(self) -> None:
        self._credit = 0
        self._grant = FIRST_CREDIT
        self._skip = SKIP

    def probe(self) -> _Steps | None:
        """Before a round trip's wait in the scheduler: a probe when one is
        due (the steps of other tasks are counted until :meth:`probed`,
        which sets the credit of the next round trips), else None."""
        if self._runner is None or self._credit > 0:
            return None
        if self._skip > 0:
            self._skip -= 1
            return None
        steps = _Steps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(steps)
        self.probes += 1
        return steps

    def probed(self, steps: _Steps) -> None:
        """The wait :meth:`probe` watched is over (never raises)."""
        with contextlib.suppress(KeyError):
            trio.lowlevel.remove_instrument(steps)
        if steps.others:
            self._busy()
        else:
            self._credit = self._grant
            self._grant = min(2 * self._grant, CREDIT)


#: What ``_Connection.pump_quiet`` returns when the run had work (an
#: empty list: never a round trip's replies, which are never empty).
BUSY: list[Any] = []


def poller(sock_fd: int, epoll_fd: int) -> Any:
    """A ``poll`` object watching ``sock_fd`` and Trio's epoll descriptor."""
    p = select.poll()
    p.register(sock_fd, select.POLLIN)
    p.register(epoll_fd, select.POLLIN)
    return p
