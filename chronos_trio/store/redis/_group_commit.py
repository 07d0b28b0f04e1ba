"""Group commit: concurrent callers share one round trip.

Used for enqueues (a call is a batch of jobs) and for handlers' own Redis
commands (``job.redis``: a call is one command).

A Redis round trip through the thread adapter costs a few hundred
microseconds of mostly fixed overhead, so many producers each enqueueing one
job at a time would spend their time on hops, not on Redis. While one
enqueue is in flight, the calls that arrive wait; when it returns, the first
of them sends everything that waited as one batch, and so on. A lone caller
is sent at once and never waits for anyone.

Guarantees (the same as a call of its own):

* A call returns only once the store holds its jobs, with the results of its
  own jobs, in order; a failure of the shared round trip is raised in every
  call that was part of it (its jobs may or may not be stored: retrying with
  the same IDs is safe).
* Jobs are applied in arrival order: a repeated ID in a later call finds the
  earlier call's job (``created`` False), as if the calls ran one by one.
* Cancellation does not split a batch: like the thread hop under it, a call
  that has been sent (or is waiting to be) completes, and the cancellation
  is delivered at the caller's next checkpoint.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import trio

from .._roles import StoreError

T = TypeVar("T")
R = TypeVar("R")

#: Sends items (jobs, commands) in one round trip: a result per item, in order.
Send = Callable[[Sequence[T]], Awaitable[list[R]]]

#: Largest batch made of waiting calls (more wait for the next round trip).
MAX_GROUP_JOBS = 2000


class _Call(Generic[T, R]):
    __slots__ = ("done", "error", "group", "jobs", "results")

    def __init__(self, jobs: Sequence[T]) -> None:
        self.jobs = jobs
        self.done = trio.Event()
        self.results: list[R] = []
        self.error: BaseException | None = None
        self.group: list[_Call[T, R]] | None = None  # set when this call must send a group

    def unwrap(self) -> list[R]:
        if self.error is not None:
            raise self.error
        return self.results


class GroupCommit(Generic[T, R]):
    """Coalesces concurrent ``send`` calls (see the module docstring)."""

    def __init__(
        self, send: Send[T, R], *, max_items: int = MAX_GROUP_JOBS, lone: Send[T, R] | None = None
    ) -> None:
        """``lone``: sends a lone caller's items as ``send`` does, and runs
        to completion even if its caller is cancelled (it shields itself);
        without it, a lone call is ``send`` in a shielded scope."""
        self._send = send
        self._lone = lone
        self._max_items = max_items
        self._busy = False
        self._waiting: deque[_Call[T, R]] = deque()
        self.groups_sent = 0  # round trips that carried more than one call

    async def submit(self, jobs: Sequence[T]) -> list[R]:
        """Send ``jobs`` (items), sharing a round trip with concurrent calls;
        their results in order (see the module docstring)."""
        if not self._busy:
            # A lone caller (the common one-at-a-time producer): no call
            # record, no event, its results as they come.
            self._busy = True
            try:
                if self._lone is not None:
                    return await self._lone(jobs)
                with trio.CancelScope(shield=True):
                    return await self._send(jobs)
            finally:
                self._hand_over()
        call: _Call[T, R] = _Call(jobs)
        self._waiting.append(call)
        with trio.CancelScope(shield=True):
            await call.done.wait()
        if call.group is None:
            return call.unwrap()  # sent in a group another call sent
        return await self._send_group(call, call.group)

    async def _send_group(self, me: _Call[T, R], group: list[_Call[T, R]]) -> list[R]:
        results: list[R] = []
        error: BaseException | None = None
        try:
            jobs = [job for c in group for job in c.jobs] if len(group) > 1 else me.jobs
            with trio.CancelScope(shield=True):
                results = await self._send(jobs)
        except BaseException as exc:
            error = exc
        finally:
            self._hand_over()
        if len(group) > 1:
            self.groups_sent += 1
        start = 0
        for c in group:
            if error is None:
                c.results = results[start : start + len(c.jobs)]
            else:
                c.error = error if c is me else _shared_failure(error)
            start += len(c.jobs)
            if c is not me:
                c.done.set()
        return me.unwrap()

    def _hand_over(self) -> None:
        """Let the first waiting call send the next group, or go idle."""
        if not self._waiting:
            self._busy = False
            return
        group: list[_Call[T, R]] = []
        size = 0
        while self._waiting and (not group or size + len(self._waiting[0].jobs) <= self._max_items):
            nxt = self._waiting.popleft()
            group.append(nxt)
            size += len(nxt.jobs)
        group[0].group = group
        group[0].done.set()


def _shared_failure(error: BaseException) -> BaseException:
    """The error for another call of a failed group (an outcome is raised once)."""
    if isinstance(error, StoreError):
        copy = StoreError(str(error))
        copy.__cause__ = error
        return copy
    return error
