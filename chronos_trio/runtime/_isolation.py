"""The pool of warm child processes isolated handlers run in
(``@app.task(isolate=True)``), owned by the worker, used by its executors.

The worker owns it, not the executor actor (as the design first said), so
that an executor restarted by its supervisor does not kill every warm
child with it, and so that a child that cannot start (the app not
importable) stops the worker before anything runs, with its own error,
instead of crash-looping an actor.

* **Warm**: ``size`` children start with the worker; each imports the app's
  modules once and then runs one job at a time, job after job.
* **Bounded**: an executor takes an idle child (its job waits for one,
  holding its executor slot, its lease renewed meanwhile) and gives it
  back after the run; at most ``size`` run at once.
* **Replaced**: a child that died in a run (a segfault, ``os._exit``) or
  was killed (its hard limit, a lost lease, an abort, a shutdown past its
  grace: anything that calls its run off) is reaped and a fresh one takes
  its place, in the background; the executor goes on at once.
* **Clean start**: a fresh interpreter (``python -m``, never a fork of
  this Trio process), given this process's ``sys.path``.
* **No leaks**: closing the pool closes the idle children's pipes (they
  exit), kills what still runs after ``STOP_TIMEOUT`` and reaps every
  child; a child also dies with its worker, even one killed by ``kill -9`` (see
  ``runtime._isolated_child``).

Which app and modules a child imports: :func:`isolation_plan`, checked when
the worker starts, before anything runs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import IsolationError, sole_exception
from ..records._log import log_event
from ..records._public import fixup_module_metadata
from ._error_text import describe_exit
from ._isolation_wire import (
    ChildNote,
    ChildReply,
    WireError,
    frame,
    frame_length,
    parse,
    parse_note,
    parse_reply,
)
from ._tasks import TaskSpec

log = logging.getLogger("chronos_trio.worker")

#: Longest a child may take to import the app and say it is ready.
START_TIMEOUT = 60.0
#: Longest closing waits for idle children to exit before killing them.
STOP_TIMEOUT = 2.0
#: After a replacement fails to start, wait this long (doubling, at most
#: ``_RESPAWN_MAX``) before the next try.
_RESPAWN_FIRST = 0.5
_RESPAWN_MAX = 30.0


@attrs.frozen
class IsolationPlan:
    """What every child imports: ``modules`` (those of the isolated
    handlers), then the app at ``app_module``:``app_attr``, in which it
    finds each of ``kinds``."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    app_module: str
    app_attr: str
    modules: tuple[str, ...]
    kinds: tuple[str, ...]

    def start_message(self) -> dict[str, Any]:
        return {
            "op": "start",
            "modules": list(self.modules),
            "app": [self.app_module, self.app_attr],
            "kinds": list(self.kinds),
        }


def isolation_plan(app: object, tasks: Mapping[str, TaskSpec]) -> IsolationPlan | None:
    """How children find ``app``'s isolated tasks (None: it has none).
    Raises :class:`IsolationError` when a child could not: a handler
    defined in ``__main__`` (a child's ``__main__`` is not your script) or
    in no module, or an app that no isolated handler's module holds as a
    module-level name."""
    kinds = tuple(sorted(kind for kind, spec in tasks.items() if spec.isolate))
    if not kinds:
        return None
    modules: list[str] = []
    for kind in kinds:
        module = getattr(tasks[kind].handler, "__module__", None)
        if not isinstance(module, str) or module == "__main__" or module not in sys.modules:
            raise IsolationError(
                f"isolated task {kind!r}: its handler is defined in {module or 'no module'!r}, "
                "which a child process cannot import; define the app and its isolated "
                "tasks in an importable module (myproject/jobs.py, run as myproject.jobs:app)"
            )
        if module not in modules:
            modules.append(module)
    for module in modules:
        for name, value in vars(sys.modules[module]).items():
            if value is app:
                return IsolationPlan(module, name, tuple(modules), kinds)
    raise IsolationError(
        f"isolated task {kinds[0]!r}: no module-level name in {', '.join(modules)} holds "
        "the app, so a child process cannot find it (create the App at module level, or "
        "import it there: from myproject.app import app)"
    )


class ChildDied(Exception):
    """A child ended (or broke the protocol) during a run; the message says
    how (exit code or signal)."""


class IsolatedChild:
    """One child process and its end of the pipes."""

    __slots__ = ("_buffer", "process", "runs")

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = bytearray()
        #: Jobs it has run.
        self.runs = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(frame(message))

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the child closed its end."""
        stdout = self.process.stdout
        assert stdout is not None
        buffer = self._buffer
        need = 4
        while True:
            if len(buffer) >= need:
                if need == 4:
                    need = 4 + frame_length(bytes(buffer[:4]))
                    continue
                body = bytes(buffer[4:need])
                del buffer[:need]
                return parse(body)
            data = await stdout.receive_some(65536)
            if not data:
                return None
            buffer += data

    def kill(self) -> None:
        if self.process.returncode is None:
            try:
                self.process.kill()
            except ProcessLookupError:  # exited, not yet reaped
                pass


@attrs.frozen
class ChildPoolStatistics:
    """``size`` children wanted; ``alive`` started and not yet reaped;
    ``idle`` waiting for a job; ``started`` ever (replacements included);
    ``replaced`` after they died or were killed in a run."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    size: int
    alive: int
    idle: int
    started: int
    replaced: int


class ChildPool:
    """See the module docstring. Used from Trio's thread only."""

    def __init__(self, plan: IsolationPlan, size: int) -> None:
        if size < 1:
            raise ValueError(f"a child pool needs size >= 1, got {size}")
        #: Where replacements start and killed children are reaped (set
        #: once every child started: see :func:`open_child_pool`).
        self.nursery: trio.Nursery | None = None
        self._plan = plan
        self.size = size
        self._idle_send, self._idle = trio.open_memory_channel[IsolatedChild](size)
        self._alive: set[IsolatedChild] = set()
        self._started = 0
        #: Children replaced (see :meth:`replace`).
        self.replaced = 0
        self._closing = False

    def statistics(self) -> ChildPoolStatistics:
        return ChildPoolStatistics(
            size=self.size,
            alive=len(self._alive),
            idle=self._idle.statistics().current_buffer_used,
            started=self._started,
            replaced=self.replaced,
        )

    async def start(self) -> None:
        """Start every child; returns once all are ready. Raises
        IsolationError when one cannot start (the ones started are left to
        :meth:`aclose`)."""
        failures: list[IsolationError] = []
        async with trio.open_nursery() as nursery:
            for _ in range(self.size):
                nursery.start_soon(self._start_one, failures)
        if failures:
            raise failures[0]

    async def _start_one(self, failures: list[IsolationError]) -> None:
        try:
            self._idle_send.send_nowait(await self._spawn())
        except IsolationError as exc:
            failures.append(exc)

    async def _spawn(self) -> IsolatedChild:
        env = dict(os.environ)
        path = [p for p in sys.path if p]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        command = [sys.executable, "-m", "chronos_trio.runtime._isolated_child", str(os.getpid())]
        try:
            process = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
        except OSError as exc:
            raise IsolationError(f"cannot start a child process: {exc}") from None
        child = IsolatedChild(process)
        self._alive.add(child)
        self._started += 1
        try:
            with trio.fail_after(START_TIMEOUT):
                await child.send(self._plan.start_message())
                hello = await child.receive()
        except (
            trio.TooSlowError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            WireError,
        ) as exc:
            hello = {"op": "broken", "error": f"no handshake: {exc!r}"}
        except BaseException:
            child.kill()
            await self._wait_gone(child)
            raise
        if hello is None or hello.get("op") != "ready":
            child.kill()
            await self._wait_gone(child)
            why = "it exited" if hello is None else hello.get("error", hello)
            raise IsolationError(
                f"a child process for isolated tasks did not start: {why} (it imports "
                f"{', '.join(self._plan.modules)} and finds the app as "
                f"{self._plan.app_module}:{self._plan.app_attr})"
            )
        log_event(log, logging.DEBUG, "isolation child ready", pid=child.pid)
        return child

    async def take(self) -> IsolatedChild:
        """An idle child that is alive, once one is (cancellable; a
        cancelled wait takes none). One that died while idle (killed from
        outside, the OOM killer) is replaced, not handed out, so no job's
        attempt is spent on it (one killed a moment before it is taken, its
        exit not yet collectable, still is: the run then fails as a crash)."""
        while True:
            child = await self._idle.receive()
            if child.process.poll() is None:
                return child
            log_event(
                log,
                logging.WARNING,
                "isolation child died while idle: replaced",
                pid=child.pid,
                status=describe_exit(child.process.returncode or 0),
            )
            self.replace(child)

    def give_back(self, child: IsolatedChild) -> None:
        """``child`` finished its run well: it takes the next job."""
        self._idle_send.send_nowait(child)

    async def run(
        self,
        child: IsolatedChild,
        request: dict[str, Any],
        on_note: Callable[[ChildNote], None] | None = None,
    ) -> ChildReply:
        """Run one job in ``child`` (taken with :meth:`take`); the notes it
        sends before its reply (its handler's progress and log lines) go to
        ``on_note`` as they come (dropped without one). Raises ChildDied
        when it died during the run or answered nonsense (the caller then
        discards it with :meth:`replace`)."""
        child.runs += 1
        try:
            await child.send(request)
            while (message := await child.receive()) is not None:
                note = parse_note(message)
                if note is None:
                    return parse_reply(message)
                if on_note is not None:
                    on_note(note)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except WireError as exc:
            child.kill()
            raise ChildDied(f"the isolated handler's process broke the protocol: {exc}") from None
        raise ChildDied(f"the isolated handler's process died: {await self._reap(child)}")

    async def _reap(self, child: IsolatedChild) -> str:
        """Wait (briefly) for a child whose pipe closed to end; how it ended."""
        with trio.move_on_after(1.0):
            await child.process.wait()
        if child.process.returncode is None:
            child.kill()
            await child.process.wait()
        code = child.process.returncode
        assert code is not None
        status = describe_exit(code)
        return status if code <= 0 else f"{status} with exit code {code}"

    def replace(self, child: IsolatedChild) -> None:
        """Kill ``child`` now (if it still runs) and start a fresh one in its
        place, in the background. Never blocks: what a called-off run's
        executor does on its way out."""
        assert self.nursery is not None  # (runs are only after the start)
        self.replaced += 1
        child.kill()
        self.nursery.start_soon(self._wait_gone, child)
        if not self._closing:
            self.nursery.start_soon(self._respawn)

    async def _wait_gone(self, child: IsolatedChild) -> None:
        with trio.CancelScope(shield=True):  # a killed child is reaped, always
            await child.process.wait()
            await _close_pipes(child)
        self._alive.discard(child)

    async def _respawn(self) -> None:
        delay = _RESPAWN_FIRST
        while not self._closing:
            try:
                child = await self._spawn()
            except IsolationError as exc:
                if self._closing:
                    return
                log_event(
                    log, logging.ERROR, "isolation child did not start", error=str(exc), retry=delay
                )
                await trio.sleep(delay)
                delay = min(2 * delay, _RESPAWN_MAX)
                continue
            self._idle_send.send_nowait(child)
            return

    async def aclose(self) -> None:
        """Stop every child: idle ones are told to exit (their pipe is
        closed), any still alive after ``STOP_TIMEOUT`` is killed; returns
        once all are reaped."""
        self._closing = True
        with trio.CancelScope(shield=True):
            for child in list(self._alive):
                assert child.process.stdin is not None
                await child.process.stdin.aclose()
            with trio.move_on_after(STOP_TIMEOUT):
                for child in list(self._alive):
                    await child.process.wait()
            for child in list(self._alive):
                child.kill()
                await child.process.wait()
                await _close_pipes(child)
                self._alive.discard(child)


async def _close_pipes(child: IsolatedChild) -> None:
    for stream in (child.process.stdin, child.process.stdout):
        if stream is not None:
            await stream.aclose()


@asynccontextmanager
async def open_child_pool(plan: IsolationPlan, size: int) -> AsyncIterator[ChildPool]:
    """A started pool for the body of the ``async with`` (raises
    IsolationError, itself, when its children cannot start), closed on the
    way out with every child reaped. What the body raises comes out as it
    was (not in the pool nursery's exception group)."""
    pool = ChildPool(plan, size)
    try:
        await pool.start()
    except BaseException:
        await pool.aclose()
        raise
    try:
        async with trio.open_nursery() as nursery:
            pool.nursery = nursery
            try:
                yield pool
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The pool's own tasks raise nothing: what is in it is the body's.
        raise sole_exception(group)  # noqa: B904  (keeps its own __cause__)
    finally:
        # A replacement that finished starting while the pool closed (its
        # task is gone now): stopped too.
        await pool.aclose()


# Public as ``chronos_trio.runtime.<name>``, loaded on first use (the package
# names them lazily): they report that module however they were first reached.
fixup_module_metadata(
    "chronos_trio.runtime",
    {
        "ChildPool": ChildPool,
        "ChildPoolStatistics": ChildPoolStatistics,
        "IsolatedChild": IsolatedChild,
        "IsolationPlan": IsolationPlan,
    },
)
