"""The child process an isolated handler runs in (``python -m
chronos_trio.runtime._isolated_child PARENT_PID``), one job at a time.

It imports the app's modules once (a warm child), then runs each job it is
sent with the handler registered under its kind and answers with the
outcome (protocol: ``runtime._isolation_wire``). The soft limit: a plain
handler gets :class:`~chronos_trio.SoftTimeLimit` raised where it is (a
``SIGALRM`` in this, the main, thread); an ``async def`` handler runs under
``trio.run`` and is cancelled at its timeout, after which the run fails
with ``SoftTimeLimit``. The hard limit is the worker's: it kills this
process.

Its protocol goes over copies of the pipes it was started with: the
handler's ``print`` goes to stderr and its ``input()`` reads nothing, so
neither can corrupt a frame. It dies with its worker, even one killed
with ``kill -9``: at its next read of the pipe, or within half a second
while a handler runs.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any, NoReturn

import attrs
import trio

from ..records._codec import decode_payload, encode_payload
from ..records._errors import PayloadError, RateLimited, Retry, SkipRetry, SoftTimeLimit
from ..records._notes import check_fraction, check_message, cut_line
from ._error_text import error_text
from ._isolation_wire import How, WireError, b64, frame, frame_length, parse, unb64
from ._tasks import TaskSpec

#: Where the docs say what an isolated handler's context lacks.
_DOCS = "docs/isolation.md"


#: The least time between two progress notes a child sends (the worker
#: writes them to the store at most every ``notes_interval`` anyway): a
#: tight loop of reports costs no frame each.
NOTE_GAP = 0.05


class Outbox:
    """The notes a run's handler reports (``job.progress``, ``job.log``),
    sent to the worker on the protocol's pipe before the run's reply: log
    lines at once, progress at most every :data:`NOTE_GAP` (the latest
    wins), and what is left by :meth:`flush` before the reply. ``fd`` None:
    nothing is sent (a test's run)."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._progress: tuple[float, str] | None = None
        self._sent_at = -math.inf

    def progress(self, fraction: float, message: str) -> None:
        self._progress = (fraction, message)
        if time.monotonic() - self._sent_at >= NOTE_GAP:
            self.flush()

    def log(self, line: str) -> None:
        self._send(self._progress, [line])
        self._progress = None

    def flush(self) -> None:
        if self._progress is not None:
            self._send(self._progress, [])
            self._progress = None

    def _send(self, progress: tuple[float, str] | None, lines: list[str]) -> None:
        self._sent_at = time.monotonic()
        if self._fd is not None:
            _send(self._fd, {"op": "note", "progress": progress, "lines": lines})


@attrs.frozen
class ChildJobContext:
    """What an isolated handler gets for its job context: the job's
    ``id``, ``attempt``, ``queue``, ``kind``, ``headers`` and the running
    ``worker_id``; ``deadline`` is the soft limit on ``time.monotonic()``
    (``inf``: none); ``progress``/``progress_nowait``/``log`` as a
    JobContext's (the same checks and errors), sent to the worker, which
    writes them as the run's own. What needs the worker's process (``app``,
    ``redis``, ``lifespan``, ``lease_lost``, ``abort_requested``,
    ``store``) raises AttributeError saying so: the handler runs in another
    process."""

    id: str
    attempt: int
    queue: str
    kind: str
    _headers: tuple[tuple[str, str], ...]
    worker_id: str
    deadline: float
    _outbox: Outbox = attrs.field(factory=lambda: Outbox(None))

    async def progress(self, fraction: float, message: str = "") -> None:
        """As ``JobContext.progress``: checked, then sent to the worker."""
        self.progress_nowait(fraction, message)
        await trio.lowlevel.checkpoint()

    def progress_nowait(self, fraction: float, message: str = "") -> None:
        """As ``JobContext.progress_nowait``: checked, then sent."""
        self._outbox.progress(check_fraction(fraction), check_message(message))

    def log(self, line: str) -> None:
        """As ``JobContext.log``: cut and checked, then sent."""
        self._outbox.log(cut_line(line))

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._headers)

    @property
    def cancelled(self) -> bool:
        """Always False: a called-off isolated run is ended by killing its
        process, not by a flag."""
        return False

    def check_cancelled(self) -> None:
        """Nothing to check (see :attr:`cancelled`)."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AttributeError(
            f"job.{name} is not available to an isolated handler: it runs in a child "
            f"process, away from the worker's store, app and lease (see {_DOCS})"
        )


def _read(fd: int, n: int) -> bytes | None:
    """Exactly ``n`` bytes, or None at end of file (the worker is gone)."""
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> dict[str, Any] | None:
    header = _read(fd, 4)
    body = None if header is None else _read(fd, frame_length(header))
    return None if body is None else parse(body)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = frame(message)
    while data:
        data = data[os.write(fd, data) :]


def _load(start: Mapping[str, Any]) -> dict[str, TaskSpec]:
    """Import the modules the worker named and find the app and each
    isolated kind in it; ValueError saying what is missing."""
    for name in start["modules"]:
        importlib.import_module(name)
    module_name, attr = start["app"]
    app: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        app = getattr(app, part)
    tasks = getattr(getattr(app, "registry", None), "tasks", None)
    if not isinstance(tasks, Mapping):
        raise ValueError(f"{module_name}:{attr} is not a chronos_trio.App here")
    found = {}
    for kind in start["kinds"]:
        spec = tasks.get(kind)
        if spec is None:
            raise ValueError(
                f"importing {', '.join(start['modules'])} does not register task {kind!r} "
                f"on {module_name}:{attr} (register it at import time, at module level)"
            )
        found[kind] = spec
    return found


def _soft_limit(signum: int, frame: FrameType | None) -> None:
    raise SoftTimeLimit("the handler's timeout (its soft time limit) passed")


def _arm(timeout: float | None) -> None:
    if timeout is not None and timeout > 0:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    elif timeout is not None:
        raise SoftTimeLimit("the handler's timeout (its soft time limit) passed")


def _disarm() -> float:
    """Stop the alarm; the seconds it had left (0 if none was armed)."""
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    return left


async def _bounded(coro: Any, timeout: float | None) -> object:
    with trio.move_on_after(math.inf if timeout is None else timeout):
        return await coro
    raise SoftTimeLimit("the handler's timeout (its soft time limit) passed: it was cancelled")


def _call(spec: TaskSpec, request: Mapping[str, Any], outbox: Outbox) -> object:
    timeout = request["timeout"]
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    ctx = ChildJobContext(
        request["id"],
        request["attempt"],
        request["queue"],
        request["kind"],
        tuple((str(k), str(v)) for k, v in request["headers"]),
        request["worker_id"],
        deadline,
        outbox,
    )
    payload = decode_payload(unb64(request["payload"]) or b"", spec.payload_type)
    _arm(timeout)
    try:
        # The context stands in for a JobContext (see ChildJobContext).
        value = spec.fn(payload, ctx)  # type: ignore[arg-type]
    finally:
        left = _disarm()
    if inspect.iscoroutine(value):  # an async def handler: run it now
        rest = None if timeout is None else left
        value = trio.run(_bounded, value, rest)
    return value


def _failed(how: How, error: str, delay: float | None = None) -> dict[str, Any]:
    return {"op": "failed", "how": how, "error": error, "delay": delay}


def run_job(
    tasks: Mapping[str, TaskSpec], request: Mapping[str, Any], outbox: Outbox | None = None
) -> dict[str, Any]:
    """Run one job; the reply for the worker (every outcome the executor
    tells apart in-process, told apart here the same way). The handler's
    notes go to ``outbox`` (none: not sent), flushed before this returns."""
    outbox = Outbox(None) if outbox is None else outbox
    try:
        return _run_job(tasks, request, outbox)
    finally:
        outbox.flush()


def _run_job(
    tasks: Mapping[str, TaskSpec], request: Mapping[str, Any], outbox: Outbox
) -> dict[str, Any]:
    spec = tasks.get(request["kind"])
    if spec is None:
        return _failed("dead", f"task {request['kind']!r} is not isolated in this child")
    try:
        value = _call(spec, request, outbox)
    except PayloadError as exc:
        return _failed("dead", str(exc))
    except SkipRetry as exc:
        return _failed("skip", error_text(exc, "SkipRetry"))
    except Retry as exc:
        return _failed("retry", error_text(exc, "Retry"), exc.delay)
    except RateLimited as exc:
        return _failed("rate_limited", error_text(exc, "RateLimited"), exc.retry_after)
    except Exception as exc:
        if spec.never_retry and isinstance(exc, spec.never_retry):
            label = f"{type(exc).__name__} (never retried for this task)"
            return _failed("never_retry", error_text(exc, label))
        return _failed("error", error_text(exc))
    if spec.result_type is None or spec.result_ttl <= 0:
        return {"op": "done", "result": None}
    try:
        data = encode_payload(value, spec.result_type, what="result")
    except Exception as exc:  # a PayloadError, or an unstructure hook's bug
        detail = str(exc) if isinstance(exc, PayloadError) else repr(exc)
        return _failed("dead", f"result does not encode: {detail}")
    if len(data) > spec.max_result_bytes:
        return _failed(
            "dead",
            f"result is {len(data)} bytes encoded, over the {spec.max_result_bytes}-byte limit",
        )
    return {"op": "done", "result": b64(data)}


#: How often a child checks that its worker still lives.
_PARENT_CHECK = 0.5


def _die_with_parent(parent: int) -> None:
    """End this process soon after the worker ``parent`` is gone, even by
    ``kill -9`` and while a handler runs: a daemon thread sees this process
    handed to another parent. (Not Linux's parent-death signal: it follows
    the *thread* that started the child, and Trio starts children from a
    worker thread that ends when idle.)"""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_CHECK)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # the handler's prints go to stderr, never into a frame
    _die_with_parent(int(argv[0]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when this ends
    try:
        start = _receive(proto_in)
        if start is None:
            return 0
        tasks = _load(start)
    except (Exception, WireError) as exc:
        _send(proto_out, {"op": "broken", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    signal.signal(signal.SIGALRM, _soft_limit)
    _send(proto_out, {"op": "ready", "pid": os.getpid()})
    outbox = Outbox(proto_out)
    while True:
        request = _receive(proto_in)
        if request is None:
            return 0  # the worker closed the pipe: stop
        _send(proto_out, run_job(tasks, request, outbox))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
