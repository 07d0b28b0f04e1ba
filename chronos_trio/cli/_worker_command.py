"""``python -m chronos_trio worker APP``: run workers from the shell.

* ``--processes 1`` (default): one worker in this process. SIGTERM/SIGINT
  shut it down gracefully; a second signal exits at once (leases then expire
  and are recovered by other workers).
* ``--processes N``: a :class:`~chronos_trio.cli.ProcessManager`
  in this process runs N children, each ``python -m chronos_trio worker APP
  <same options> --child-index I --heartbeat-fd FD`` (hidden options). A
  child writes heartbeats to FD, exits by itself when its stdin (a pipe the
  manager holds) reaches EOF or its parent pid changes, and leaves signal
  escalation to the manager.
* ``--max-jobs-per-child N`` / ``--max-memory-per-child MB`` (recycling,
  also with ``--processes 1``, which then runs a manager with one child):
  a child past either ends its run by itself (``Worker.recycled``) and
  exits with ``EXIT_RECYCLED``; the manager starts a fresh one in its
  place at once, not counted as a crash.

Start-up checks, each a one-line error with its own exit code: the app
imports and is an App, the URL is valid, option values are valid, the
in-memory store is not asked to serve several processes, and the store
answers (one quick call).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from typing import Any

import attrs
import trio
from trio_util import periodic

from .. import _code_cache, _collector
from ..app._app import App
from ..records._attrs_methods import fields_eq, fields_repr
from ..records._errors import ActorFailed, PayloadError, UnknownTask, first_exception
from ..records._log import log_event
from ..runtime._config import WorkerConfig, parse_queues
from ..store import QueueWeight
from ..worker._worker import Worker
from . import _metrics_option
from ._loading import check_store, describe_store, load_app, resolve_store, url_from
from ._logs import FORMATS, LEVELS, configure_logging
from ._options import (
    CHILD_HEARTBEAT_INTERVAL,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_NO_APP,
    EXIT_OK,
    EXIT_RECYCLED,
    EXIT_RESTARTS,
    EXIT_USAGE,
    FATAL_CHILD_EXITS,
    CliError,
    int_at_least,
    one_line,
    seconds,
)

log = logging.getLogger("chronos_trio.cli")

#: Extra time the manager allows a child after its grace period (to flush
#: outcomes and exit) before SIGKILL.
KILL_MARGIN = 6.0

#: CLI flag -> WorkerConfig field.
_OPTIONS = {
    "concurrency": "concurrency",
    "queues": "queues",
    "strict": "strict_priority",
    "batch_size": "batch_size",
    "lease_duration": "lease_duration",
    "heartbeat_interval": "heartbeat_interval",
    "poll_interval": "poll_interval",
    "wait_lease_window": "wait_lease_window",
    "recover_interval": "recover_interval",
    "shutdown_grace": "shutdown_grace",
    "retain_succeeded": "retain_succeeded",
    "leader_ttl": "leader_ttl",
    "unknown_kind_grace": "unknown_kind_grace",
    "max_jobs_per_child": "max_jobs",
    "max_memory_per_child": "max_memory_mb",
    "isolate_processes": "isolate_processes",
    "hard_limit_grace": "hard_limit_grace",
}


def _queues(text: str) -> tuple[QueueWeight, ...]:
    try:
        return parse_queues(text)
    except ValueError as exc:
        # argparse names the option itself (--queues)
        raise argparse.ArgumentTypeError(str(exc).removeprefix("queues: ")) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="APP", help="module:attribute of the App, e.g. jobs:app")
    parser.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    parser.add_argument(
        "--processes",
        metavar="N",
        type=int_at_least(1),
        default=1,
        help="worker processes (default 1: run in this process; N > 1: a process "
        "manager supervises N children; needs a shared store such as redis://)",
    )
    worker = parser.add_argument_group("worker")
    worker.add_argument(
        "--concurrency", metavar="N", type=int_at_least(1), help="handlers at once per process (16)"
    )
    worker.add_argument(
        "--queues",
        metavar="SPEC",
        type=_queues,
        help="queues and weights, e.g. critical=6,default=3,low=1 (default)",
    )
    worker.add_argument(
        "--strict",
        action="store_true",
        default=None,
        help="strict priority: lease from a queue only while every queue listed before it "
        "in --queues has no ready job; weights are ignored (off: shares by weight)",
    )
    worker.add_argument(
        "--batch-size", metavar="N", type=int_at_least(1), help="jobs per lease call (64)"
    )
    worker.add_argument(
        "--lease-duration", metavar="S", type=seconds(), help="seconds per lease (30)"
    )
    worker.add_argument(
        "--heartbeat-interval", metavar="S", type=seconds(), help="lease renewal period (lease/3)"
    )
    worker.add_argument(
        "--poll-interval",
        metavar="S",
        type=seconds(),
        help="longest idle wait before re-checking the store (30)",
    )
    worker.add_argument(
        "--wait-lease-window",
        metavar="S",
        type=seconds(allow_zero=True),
        help="seconds after its last jobs an idle worker waits with its next lease queued "
        "behind the wake-up, on one Redis node; 0: never (1)",
    )
    worker.add_argument(
        "--recover-interval",
        metavar="S",
        type=seconds(),
        help="period of expired-lease recovery (lease/6, at most 5)",
    )
    worker.add_argument(
        "--shutdown-grace",
        metavar="S",
        type=seconds(allow_zero=True),
        help="seconds running handlers get to finish on shutdown (10)",
    )
    worker.add_argument(
        "--retain-succeeded",
        metavar="S",
        type=seconds(allow_zero=True),
        help="keep succeeded jobs visible for this long (0: drop at once)",
    )
    worker.add_argument(
        "--unknown-kind-grace",
        metavar="S",
        type=seconds(allow_zero=True),
        help="a job of a kind this worker has no handler for goes back for a worker that "
        "has one; it is dead-lettered once none took it within this long, 0: at once (3600)",
    )
    worker.add_argument(
        "--leader-ttl",
        metavar="S",
        type=seconds(),
        help="leadership lease: a dead leader's schedules and janitor move to another "
        "worker within this long (15)",
    )
    worker.add_argument(
        "--isolate-processes",
        metavar="N",
        type=int_at_least(1),
        help="child processes isolated handlers (isolate=True) run in "
        "(concurrency or CPUs, the fewer)",
    )
    worker.add_argument(
        "--hard-limit-grace",
        metavar="S",
        type=seconds(allow_zero=True),
        help="seconds an isolated handler has past its timeout before its child is killed (5)",
    )
    manager = parser.add_argument_group("process manager (--processes > 1, or recycling)")
    manager.add_argument(
        "--max-jobs-per-child",
        metavar="N",
        type=int_at_least(1),
        help="recycle a worker process once it has run N jobs: it finishes them, exits "
        "and a fresh one takes its place (never)",
    )
    manager.add_argument(
        "--max-memory-per-child",
        metavar="MB",
        type=int_at_least(1),
        help="recycle a worker process once its resident memory reaches MB megabytes: it "
        "hands back the jobs it has not started, finishes the running ones and a fresh "
        "one takes its place (never)",
    )
    manager.add_argument(
        "--liveness-timeout",
        metavar="S",
        type=seconds(),
        default=20.0,
        help="kill a process that sends no heartbeat for this long (20)",
    )
    manager.add_argument(
        "--max-restarts",
        metavar="N",
        type=int_at_least(0),
        default=10,
        help="give up after more restarts than this within --restart-window (10)",
    )
    manager.add_argument(
        "--restart-window", metavar="S", type=seconds(), default=60.0, help="seconds (60)"
    )
    logs = parser.add_argument_group("logging")
    logs.add_argument("--log-level", choices=LEVELS, default="info", help="(default info)")
    logs.add_argument("--log-format", choices=FORMATS, default="text", help="(default text)")
    # Set by the process manager for its children; not for people.
    _metrics_option.add_arguments(parser)
    parser.add_argument("--child-index", type=int_at_least(0), help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat-fd", type=int_at_least(0), help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def build_config(args: argparse.Namespace, worker_id: str) -> WorkerConfig:
    options: dict[str, Any] = {
        field: getattr(args, flag)
        for flag, field in _OPTIONS.items()
        if getattr(args, flag) is not None
    }
    try:
        return WorkerConfig.build(worker_id=worker_id, **options)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        for flag, field in _OPTIONS.items():
            message = message.replace(field, "--" + flag.replace("_", "-"))
        raise CliError(f"bad worker option: {message}", EXIT_USAGE) from None


def run(args: argparse.Namespace) -> int:
    child = args.child_index is not None
    index = args.child_index or 0
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{index}"
    recycling = args.max_jobs_per_child is not None or args.max_memory_per_child is not None
    managing = (args.processes > 1 or recycling) and not child
    configure_logging(args.log_level, args.log_format, label="manager" if managing else worker_id)
    with _metrics_option.manager_dir(args, managing):  # before the app imports prometheus-client
        app = load_app(args.app)
        try:
            app.registry.check_schedules()
        except (UnknownTask, PayloadError) as exc:
            raise CliError(f"{args.app}: {exc}", EXIT_NO_APP) from None
        url = url_from(args.url)
        store = resolve_store(app, url)
        where = describe_store(app, url, store)
        config = build_config(args, worker_id)
        if managing and not store.shared_across_processes:
            what = f"--processes {args.processes}" if args.processes > 1 else "recycling"
            raise CliError(
                f"{what}: the in-memory store ({where}) cannot be "
                "shared across processes; use a redis:// URL (--url or $CHRONOS_URL)",
                EXIT_USAGE,
            )
        with _metrics_option.endpoint(args, app, managing=managing, child=child):
            # The app is imported: give the collector back before the run,
            # so what the app's lifespan and its jobs make is collected as usual.
            _collector.release()
            _code_cache.save()  # what attrs compiled, if the cache missed
            if child:
                return trio.run(_child_main, app, config, args.heartbeat_fd)
            if managing:
                return trio.run(_manager_main, app, config, args, where)
            return trio.run(_single_main, app, config, where)


async def _single_main(app: App, config: WorkerConfig, where: str) -> int:
    await check_store(app.store, where)
    if not app.store.shared_across_processes:
        log.warning(
            "using the in-memory store: this worker sees only jobs enqueued inside this "
            "process; use a redis:// URL to share work"
        )
    log_event(log, logging.INFO, "store reachable", url=where)
    try:
        return await serve_worker(app, config)
    finally:
        with trio.CancelScope(shield=True):
            await app.aclose()


async def _child_main(app: App, config: WorkerConfig, heartbeat_fd: int | None) -> int:
    # No reachability check: the manager did one, and a worker rides out a
    # store outage with backoff instead of dying into a restart loop.
    try:
        return await serve_worker(app, config, heartbeat_fd=heartbeat_fd, managed=True)
    finally:
        with trio.CancelScope(shield=True):
            await app.aclose()


async def _manager_main(
    app: App, config: WorkerConfig, args: argparse.Namespace, where: str
) -> int:
    # here: a worker in this process (and each managed one) never needs it
    from ._process_manager import (
        ChildCannotStart,
        ProcessManager,
        RestartIntensityExceeded,
        run_until_signalled,
    )

    try:
        await check_store(app.store, where)
    finally:
        await app.aclose()  # the children open their own connections
    log_event(
        log,
        logging.INFO,
        "store reachable",
        url=where,
        processes=args.processes,
        concurrency=config.concurrency,
        queues=",".join(f"{q.name}={q.weight}" for q in config.queues),
        strict_priority=config.strict_priority,
    )
    argv = list(args.argv)

    def command(index: int, heartbeat_fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "chronos_trio",
            *argv,
            "--child-index",
            str(index),
            "--heartbeat-fd",
            str(heartbeat_fd),
        ]

    manager = ProcessManager(
        command,
        processes=args.processes,
        shutdown_timeout=config.shutdown_grace + KILL_MARGIN,
        liveness_timeout=args.liveness_timeout,
        restart_intensity=args.max_restarts,
        restart_period=args.restart_window,
        fatal_exit_codes=FATAL_CHILD_EXITS,
        recycle_exit_code=EXIT_RECYCLED,
        on_restart=getattr(app.registry.metrics, "process_restarted", None),
        on_recycle=getattr(app.registry.metrics, "process_recycled", None),
    )
    try:
        await run_until_signalled(manager)
    except RestartIntensityExceeded as exc:
        raise CliError(str(exc), EXIT_RESTARTS) from None
    except ChildCannotStart as exc:
        raise CliError(str(exc), exc.returncode) from None
    return EXIT_OK


@attrs.define
class _Shutdown:
    __repr__ = fields_repr
    __eq__ = fields_eq

    signals: int = 0
    parent_gone: bool = False


async def serve_worker(
    app: App, config: WorkerConfig, *, heartbeat_fd: int | None = None, managed: bool = False
) -> int:
    """Run one worker until SIGTERM/SIGINT (or, when ``managed``, until the
    parent process is gone, or it recycles itself: ``EXIT_RECYCLED``);
    returns an exit code."""
    worker = Worker(app, config)
    state = _Shutdown()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        try:
            async with trio.open_nursery() as nursery:

                async def on_signals() -> None:
                    async for signum in received:
                        state.signals += 1
                        name = signal.Signals(signum).name
                        if state.signals == 1:
                            log_event(
                                log,
                                logging.INFO,
                                "shutting down gracefully",
                                signal=name,
                                grace=config.shutdown_grace,
                            )
                            worker.stop()
                        elif not managed:  # a managed child leaves escalation to the manager
                            log_event(
                                log,
                                logging.WARNING,
                                "exiting now (signal received twice)",
                                signal=name,
                            )
                            logging.shutdown()
                            os._exit(EXIT_INTERRUPTED)

                nursery.start_soon(on_signals)
                if managed:
                    nursery.start_soon(_watch_parent, worker, state)
                await nursery.start(worker.run)
                if heartbeat_fd is not None:
                    nursery.start_soon(_heartbeat, heartbeat_fd, worker, state)
                await worker.wait_stopped()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            failed, rest = group.split(ActorFailed)
            if failed is None or rest is not None:
                raise
            log_event(
                log,
                logging.ERROR,
                "worker failed",
                error=one_line(str(first_exception(failed))),
            )
            return EXIT_FAILURE
    recycled = worker.recycled
    if recycled is not None:
        log_event(log, logging.INFO, "worker process recycled", **attrs.asdict(recycled))
        return EXIT_RECYCLED
    return EXIT_OK


async def _heartbeat(fd: int, worker: Worker, state: _Shutdown) -> None:
    """Tell the manager this process's event loop is alive, once a second."""
    os.set_inheritable(fd, False)  # grandchildren must not hold it open
    stream = trio.lowlevel.FdStream(fd)
    message = b"ready\n"
    try:
        while True:
            await stream.send_all(message)
            message = b"beat\n"
            await trio.sleep(CHILD_HEARTBEAT_INTERVAL)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        _parent_gone(worker, state, how="heartbeat pipe broken")
    finally:
        await stream.aclose()


async def _watch_parent(worker: Worker, state: _Shutdown) -> None:
    """Stop the worker when the manager dies: EOF on stdin (a pipe only the
    manager writes to) or a new parent pid, whichever shows first."""
    parent = os.getppid()
    stdin = trio.lowlevel.FdStream(os.dup(0))
    try:
        await _wait_parent_gone(stdin, parent)
    finally:
        stdin.close()
    _parent_gone(worker, state, how="parent exited", parent_pid=parent)


async def _wait_parent_gone(stdin: trio.lowlevel.FdStream, parent: int) -> None:
    async with trio.open_nursery() as nursery:

        async def eof() -> None:
            try:
                while await stdin.receive_some(4096):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        async def reparented() -> None:
            async for _ in periodic(CHILD_HEARTBEAT_INTERVAL):
                if os.getppid() != parent:
                    break
            nursery.cancel_scope.cancel()

        nursery.start_soon(eof)
        nursery.start_soon(reparented)


def _parent_gone(
    worker: Worker, state: _Shutdown, *, how: str, parent_pid: int | None = None
) -> None:
    if not state.parent_gone:
        state.parent_gone = True
        log_event(
            log,
            logging.WARNING,
            "shutting down: process manager gone",
            how=how,
            parent_pid=parent_pid,
        )
        worker.stop()


__all__ = ["add_arguments", "build_config", "run", "serve_worker"]
