"""The threads plain-function (``def``) handlers run in, and the account of
the ones left behind.

Python cannot stop a thread. When a plain handler's run is called off (its
timeout, a lost lease, an abort, a shutdown past its grace) the executor
decides its outcome at once and abandons the thread, which runs on until
the function returns. This keeps that from starving every other plain
handler, and keeps it in sight:

* a run holds one of ``sync_concurrency`` slots while its thread works for
  it, and gives the slot back the moment its run is called off, so the next
  plain handler starts at once (``trio.to_thread`` alone would hold it until
  the thread really ends);
* an abandoned thread is counted until it really ends (:attr:`abandoned`,
  the worker's ``statistics().abandoned_threads``), with a warning naming
  its job when it is left behind;
* while ``max_abandoned`` or more of them still run, no new plain handler
  starts (its job waits, its lease renewed and its timeout not running) and
  an error says so, until one ends. So handlers that never return cost a
  bounded number of threads, not one per job: a thread starts only while
  fewer than ``max_abandoned`` are abandoned and at most
  ``sync_concurrency`` run, so at most ``max_abandoned + sync_concurrency -
  1`` are ever alive (every running one may be abandoned at once).

Handlers that may never return belong in child processes that can be
killed: ``@app.task(isolate=True)`` (see ``runtime._isolation``).
"""

from __future__ import annotations

import logging

import trio

from ..records._jobs import Job
from ..records._log import log_event

log = logging.getLogger("chronos_trio.worker")


class ThreadRun:
    """One plain handler's run. It is also the "CapacityLimiter-like"
    object ``trio.to_thread.run_sync`` is given (its documented protocol):
    Trio calls :meth:`acquire_on_behalf_of` just before it starts the thread
    and :meth:`release_on_behalf_of` once the thread has really ended, which
    is how an abandoned thread's end is known."""

    __slots__ = ("_threads", "abandoned", "ended", "job", "started")

    def __init__(self, threads: HandlerThreads, job: Job) -> None:
        self._threads = threads
        self.job = job
        #: A thread was started for it.
        self.started = False
        #: Its run was called off while its thread ran.
        self.abandoned = False
        #: Its thread has ended.
        self.ended = False

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        # The slot is held already (HandlerThreads.wait_slot); no checkpoint.
        self.started = True

    def release_on_behalf_of(self, borrower: object) -> None:
        self._threads._ended(self)


class HandlerThreads:
    """Slots for plain handlers' threads (``slots`` at once) and the count
    of abandoned threads still running (see the module docstring). One per
    worker; used only from Trio's thread."""

    def __init__(self, slots: int, max_abandoned: int) -> None:
        if slots < 1 or max_abandoned < 1:
            raise ValueError("slots and max_abandoned must be >= 1")
        self._slots = trio.CapacityLimiter(slots)
        self.max_abandoned = max_abandoned
        #: Threads whose run was called off and that still run.
        self.abandoned = 0
        self._fewer_abandoned: trio.Event | None = None
        self._capped = False

    async def wait_slot(self, job: Job) -> ThreadRun:
        """Until a thread may start for ``job``'s handler: a slot is free
        and fewer than ``max_abandoned`` abandoned threads still run. The
        caller must run the thread (``limiter=`` the returned run) or call
        :meth:`call_off`. Cancellable; a cancelled wait holds nothing."""
        run = ThreadRun(self, job)
        try:
            self._slots.acquire_on_behalf_of_nowait(run)
        except trio.WouldBlock:
            await self._slots.acquire_on_behalf_of(run)
        try:
            while self.abandoned >= self.max_abandoned:
                if not self._capped:
                    self._capped = True
                    log_event(
                        log,
                        logging.ERROR,
                        "abandoned handler threads at max_abandoned_threads: no plain-function "
                        "handler starts until one ends; this job and the next ones wait "
                        "(restart the worker if they never end)",
                        abandoned=self.abandoned,
                        max_abandoned_threads=self.max_abandoned,
                        job=job.id,
                        kind=job.kind,
                    )
                if self._fewer_abandoned is None:
                    self._fewer_abandoned = trio.Event()
                await self._fewer_abandoned.wait()
        except BaseException:
            self._slots.release_on_behalf_of(run)
            raise
        return run

    def call_off(self, run: ThreadRun) -> None:
        """``run`` was called off: its slot is free again at once; a thread
        still running for it is abandoned (counted until it ends)."""
        if run.ended:
            return  # its thread ended and gave the slot back already
        self._slots.release_on_behalf_of(run)
        if not run.started:
            return
        run.abandoned = True
        self.abandoned += 1
        log_event(
            log,
            logging.WARNING,
            "run called off: its thread runs on, abandoned",
            job=run.job.id,
            kind=run.job.kind,
            abandoned=self.abandoned,
            max_abandoned_threads=self.max_abandoned,
        )

    def _ended(self, run: ThreadRun) -> None:
        run.ended = True
        if not run.abandoned:
            self._slots.release_on_behalf_of(run)
            return
        self.abandoned -= 1
        log_event(
            log,
            logging.INFO,
            "abandoned thread ended",
            job=run.job.id,
            kind=run.job.kind,
            abandoned=self.abandoned,
        )
        if self.abandoned < self.max_abandoned:
            if self._capped:
                self._capped = False
                log_event(
                    log,
                    logging.WARNING,
                    "abandoned handler threads below max_abandoned_threads: plain-function "
                    "handlers start again",
                    abandoned=self.abandoned,
                )
            if self._fewer_abandoned is not None:
                self._fewer_abandoned.set()
                self._fewer_abandoned = None
