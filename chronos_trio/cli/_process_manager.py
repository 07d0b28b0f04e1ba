"""Local process manager: one Trio parent supervising N worker processes.

``python -m chronos_trio worker APP --processes N`` runs a :class:`ProcessManager`.
Each child is a full worker (its own actor tree) with worker id
``host:pid:index``. The manager, in the spirit of an OTP supervisor:

* **restarts** a child that exits (crash, ``kill -9``, actor failure) with
  exponential backoff, one_for_one; more than ``restart_intensity`` restarts
  within ``restart_period`` seconds (all children together) and it gives up:
  it stops the others and raises :class:`RestartIntensityExceeded`. A child
  that exits with a *fatal* code (bad app, bad option: restarting cannot help)
  makes it give up at once (:class:`ChildCannotStart`);
* **replaces a recycled child at once**: a child that exits with
  ``recycle_exit_code`` (past its ``--max-jobs-per-child`` or
  ``--max-memory-per-child``: it finished what it held and handed back
  what it had not started) is started again without backoff, and that is
  not a crash: it counts neither in the restart intensity nor in
  ``restarts`` (in ``recycled`` instead);
* **kills a hung child**: every child writes a line to a heartbeat pipe each
  second from its Trio loop (``ready`` once its worker runs, then ``beat``).
  No line for ``liveness_timeout`` seconds (``start_timeout`` before the
  first) means its event loop is stuck, e.g. a handler calling blocking code:
  SIGKILL, and the restart logic takes over. Its leases expire and are
  recovered by the other workers;
* **stops gracefully**: :meth:`ProcessManager.stop` (SIGTERM/SIGINT to the
  parent, see :func:`run_until_signalled`) sends SIGTERM to every child,
  which drains (in-flight handlers finish within the worker's grace, unstarted
  leases go straight back to ready) and exits; a child still alive after
  ``shutdown_timeout`` gets SIGKILL. A second signal kills at once;
* **leaves no orphans**: children run in their own session (a terminal's
  Ctrl-C reaches only the parent, which forwards it once), and each watches a
  pipe whose write end only the parent holds (its stdin): EOF means the parent
  died (even by ``kill -9``), and the child drains and exits by itself. If
  the manager itself is cancelled, it SIGKILLs its children before returning.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import attrs
import trio

from ..records._errors import ChronosError, sole_exception
from ..records._log import log_event
from ..runtime import RestartWindow
from ..runtime._error_text import describe_exit as _describe_exit
from ._options import CHILD_HEARTBEAT_INTERVAL

log = logging.getLogger("chronos_trio.manager")

#: ``command(index, heartbeat_fd)`` -> the argv of child ``index``; the child
#: writes heartbeat lines to ``heartbeat_fd`` (inherited by it).
ChildCommand = Callable[[int, int], Sequence[str]]


class ManagerError(ChronosError):
    """The process manager gave up."""


class RestartIntensityExceeded(ManagerError):
    def __init__(self, restarts: int, period: float) -> None:
        super().__init__(
            f"worker processes were restarted {restarts} times within {period:g}s; giving up"
        )
        self.restarts = restarts
        self.period = period


class ChildCannotStart(ManagerError):
    """A child exited with a code that restarting cannot fix (bad app, bad option)."""

    def __init__(self, index: int, returncode: int) -> None:
        super().__init__(
            f"worker process {index} exited with code {returncode}, which restarting "
            "cannot fix (see its error above); giving up"
        )
        self.index = index
        self.returncode = returncode


@attrs.frozen
class ChildStatistics:
    index: int
    pid: int | None  # None while waiting to restart
    ready: bool
    restarts: int
    #: Times this slot's child recycled itself and was replaced.
    recycled: int = 0


@attrs.frozen
class ManagerStatistics:
    processes: int
    running: int
    restarts: int
    stopping: bool
    children: tuple[ChildStatistics, ...]
    #: Children that recycled themselves and were replaced (not in ``restarts``).
    recycled: int = 0


@attrs.define(eq=False)
class _Child:
    index: int
    process: trio.Process
    beats: int = 0
    ready: bool = False
    hung: bool = False


class ProcessManager:
    """Supervises ``processes`` children started by ``command``. Run it with
    ``await manager.run()`` (or :func:`run_until_signalled`)."""

    def __init__(
        self,
        command: ChildCommand,
        *,
        processes: int,
        shutdown_timeout: float = 15.0,
        liveness_timeout: float = 20.0,
        start_timeout: float = 60.0,
        restart_intensity: int = 10,
        restart_period: float = 60.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        fatal_exit_codes: frozenset[int] = frozenset(),
        recycle_exit_code: int | None = None,
        env: Mapping[str, str] | None = None,
        on_restart: Callable[[int], None] | None = None,
        on_recycle: Callable[[int], None] | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.command = command
        self.processes = processes
        self.shutdown_timeout = shutdown_timeout
        self.liveness_timeout = liveness_timeout
        self.start_timeout = max(start_timeout, liveness_timeout)
        self._restart_window = RestartWindow(restart_intensity, restart_period)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.fatal_exit_codes = fatal_exit_codes
        self.recycle_exit_code = recycle_exit_code
        self.env = dict(env) if env is not None else None
        #: Called with a child's index each time it is restarted (metrics).
        self.on_restart = on_restart
        #: Called with a child's index each time it recycled itself (metrics).
        self.on_recycle = on_recycle
        self._children: dict[int, _Child] = {}
        self._restarts: collections.Counter[int] = collections.Counter()
        self._recycled: collections.Counter[int] = collections.Counter()
        self._stop_event = trio.Event()
        self._outer: trio.Nursery | None = None
        self._failure: ManagerError | None = None
        self._started = False

    @property
    def restart_intensity(self) -> int:
        return self._restart_window.intensity

    @property
    def restart_period(self) -> float:
        return self._restart_window.period

    # -- control -------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def stop(self) -> None:
        """Graceful: SIGTERM every child now, SIGKILL those still alive after
        ``shutdown_timeout``; :meth:`run` returns once all have exited."""
        if self.stopping:
            return
        self._stop_event.set()
        log_event(
            log,
            logging.INFO,
            "stopping worker processes",
            count=len(self._children),
            signal="SIGTERM",
            kill_after=self.shutdown_timeout,
        )
        for child in list(self._children.values()):
            _signal(child.process, signal.SIGTERM)
        if self._outer is not None:
            self._outer.start_soon(self._kill_after_timeout)

    def kill(self) -> None:
        """SIGKILL every child now (their leases expire and are recovered)."""
        self.stop()
        for child in list(self._children.values()):
            _signal(child.process, signal.SIGKILL)

    def statistics(self) -> ManagerStatistics:
        children = []
        for index in range(self.processes):
            child = self._children.get(index)
            children.append(
                ChildStatistics(
                    index=index,
                    pid=child.process.pid if child else None,
                    ready=bool(child and child.ready),
                    restarts=self._restarts[index],
                    recycled=self._recycled[index],
                )
            )
        return ManagerStatistics(
            processes=self.processes,
            running=len(self._children),
            restarts=sum(self._restarts.values()),
            stopping=self.stopping,
            children=tuple(children),
            recycled=sum(self._recycled.values()),
        )

    # -- running -------------------------------------------------------------------
    async def run(
        self, *, task_status: trio.TaskStatus[ProcessManager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start every child and supervise them until :meth:`stop` (then
        return) or until giving up (then raise a :class:`ManagerError`)."""
        if self._started:
            raise RuntimeError("a ProcessManager runs once; create another")
        self._started = True
        log_event(log, logging.INFO, "starting worker processes", count=self.processes)
        async with trio.open_nursery() as outer:
            self._outer = outer
            async with trio.open_nursery() as slots:
                for index in range(self.processes):
                    slots.start_soon(self._slot, index)
                task_status.started(self)
            outer.cancel_scope.cancel()  # the kill timer, if any
        if self._failure is not None:
            raise self._failure
        log_event(log, logging.INFO, "all worker processes stopped")

    def _give_up(self, failure: ManagerError) -> None:
        if self._failure is None:
            self._failure = failure
            log_event(log, logging.ERROR, "giving up", error=str(failure))
        self.stop()

    async def _slot(self, index: int) -> None:
        """Keep child ``index`` running until the manager stops."""
        failures = 0
        while not self.stopping:
            started = trio.current_time()
            returncode = await self._run_child(index)
            if self.stopping:
                return
            if returncode == self.recycle_exit_code:
                self._recycled[index] += 1
                if self.on_recycle is not None:
                    self.on_recycle(index)
                continue  # a fresh child at once: not a failure
            if returncode in self.fatal_exit_codes:
                self._give_up(ChildCannotStart(index, returncode))
                return
            now = trio.current_time()
            if self._restart_window.record_failure(now):
                self._give_up(
                    RestartIntensityExceeded(self._restart_window.failures, self.restart_period)
                )
                return
            # A child that ran for a whole period was healthy: start backoff over.
            failures = 1 if now - started >= self.restart_period else failures + 1
            delay = min(self.backoff_max, self.backoff_initial * 2 ** (failures - 1))
            self._restarts[index] += 1
            if self.on_restart is not None:
                self.on_restart(index)
            log_event(
                log,
                logging.WARNING,
                "restarting worker process",
                index=index,
                delay=round(delay, 3),
                restart=self._restarts[index],
                max_restarts=self.restart_intensity,
                window=self.restart_period,
            )
            with trio.move_on_after(delay):
                await self._stop_event.wait()

    async def _run_child(self, index: int) -> int:
        """Start child ``index``, watch its liveness, return its exit code."""
        read_fd, write_fd = os.pipe()
        try:
            try:
                process = await trio.lowlevel.open_process(
                    list(self.command(index, write_fd)),
                    stdin=subprocess.PIPE,
                    pass_fds=(write_fd,),
                    start_new_session=True,
                    env=self.env,
                )
            finally:
                os.close(write_fd)
        except OSError as exc:
            os.close(read_fd)
            log_event(
                log, logging.ERROR, "cannot start worker process", index=index, error=str(exc)
            )
            return -1
        child = _Child(index, process)
        self._children[index] = child
        log_event(log, logging.INFO, "worker process started", index=index, pid=process.pid)
        if self.stopping:  # stop() ran while we were spawning
            _signal(process, signal.SIGTERM)
        beats = trio.lowlevel.FdStream(read_fd)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_liveness, child, beats)
                await process.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:  # we are cancelled: leave no orphan
                    _signal(process, signal.SIGKILL)
                    await process.wait()
                await beats.aclose()
                if process.stdin is not None:
                    await process.stdin.aclose()
            del self._children[index]
        returncode = process.returncode
        assert returncode is not None
        recycled = returncode == self.recycle_exit_code
        level = logging.INFO if (self.stopping and returncode == 0) or recycled else logging.WARNING
        status = "recycled" if recycled else _describe_exit(returncode)
        log_event(
            log,
            level,
            "worker process exited",
            index=index,
            pid=process.pid,
            code=returncode,
            status=status + (" (hung: no heartbeat)" if child.hung else ""),
        )
        return returncode

    async def _watch_liveness(self, child: _Child, beats: trio.lowlevel.FdStream) -> None:
        while True:
            timeout = self.liveness_timeout if child.beats else self.start_timeout
            with trio.move_on_after(timeout):
                data = await beats.receive_some(4096)
                if not data:
                    return  # the child closed the pipe: it is exiting
                child.beats += 1
                if not child.ready and b"ready" in data:
                    child.ready = True
                    log_event(
                        log,
                        logging.INFO,
                        "worker process ready",
                        index=child.index,
                        pid=child.process.pid,
                    )
                continue
            log_event(
                log,
                logging.WARNING,
                "killing hung worker process",
                index=child.index,
                pid=child.process.pid,
                no_heartbeat_for=timeout,
            )
            child.hung = True
            _signal(child.process, signal.SIGKILL)
            return

    async def _kill_after_timeout(self) -> None:
        await trio.sleep(self.shutdown_timeout)
        for child in list(self._children.values()):
            log_event(
                log,
                logging.WARNING,
                "killing worker process",
                index=child.index,
                pid=child.process.pid,
                still_running_after=self.shutdown_timeout,
                signal="SIGKILL",
            )
            _signal(child.process, signal.SIGKILL)


def _signal(process: trio.Process, signum: int) -> None:
    if process.returncode is None:
        try:
            process.send_signal(signum)
        except ProcessLookupError:  # exited, not yet reaped
            pass


async def run_until_signalled(
    manager: ProcessManager,
    *,
    signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    task_status: trio.TaskStatus[ProcessManager] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``manager``; the first SIGINT/SIGTERM stops it gracefully, a second
    one kills the children at once. Raises what :meth:`ProcessManager.run` raises."""
    with trio.open_signal_receiver(*signals) as received, _unwrapped():
        async with trio.open_nursery() as nursery:

            async def forward() -> None:
                async for signum in received:
                    name = signal.Signals(signum).name
                    if not manager.stopping:
                        log_event(
                            log, logging.INFO, "stopping worker processes gracefully", signal=name
                        )
                        manager.stop()
                    else:
                        log_event(
                            log,
                            logging.WARNING,
                            "killing worker processes now (signal received twice)",
                            signal=name,
                        )
                        manager.kill()

            async def supervise(*, task_status: trio.TaskStatus[ProcessManager]) -> None:
                try:
                    await manager.run(task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()  # stop forwarding signals

            nursery.start_soon(forward)
            task_status.started(await nursery.start(supervise))


@contextmanager
def _unwrapped() -> Iterator[None]:
    """Raise a lone exception from a nursery as itself, not in a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        exc = sole_exception(group)
        if exc is group:
            raise
        raise exc from None


__all__ = [
    "CHILD_HEARTBEAT_INTERVAL",
    "ChildCannotStart",
    "ManagerError",
    "ManagerStatistics",
    "ProcessManager",
    "RestartIntensityExceeded",
    "run_until_signalled",
]
