"""Command line: ``python -m chronos_trio <command>`` (also ``chronos-trio``).

Commands
--------
``demo [--url URL]``         producer + worker on the in-memory store (or the store at URL)
``tour [--only TEXT]``       every feature end to end on the in-memory store, as it happens
``worker APP``               run workers (``--processes N`` for a local process manager)
``enqueue KIND PAYLOAD``     enqueue one job (``--app``: checked; ``--wait``: print its result)
``queues [APP]``             counts per queue, state, version and partition
``jobs [APP] --queue Q --state S``   page through jobs
``job [APP] ID``             one job in full
``run-now | delete [APP] ID``        act on one job
``abort [APP] ID [--reason TEXT]``   stop one job (a running one within one heartbeat)
``requeue-dead [APP] --queue Q``     dead jobs back to ready (all, or ``--job ID``)
``search [APP] [filters]``   find jobs by queue, state, kind, error/payload text, worker, time
``bulk ACTION [APP] [filters]``      requeue, run-now, delete or abort every job found
``pause | resume [APP] QUEUE``       stop / restart leasing from a queue
``topology show|promote|complete [APP] QUEUE``   versioned queue routing
``schedules APP``            the app's cron/interval schedules
``workers [APP]``            live worker processes and the jobs they run
``check [APP] [--repair]``   walk the store for inconsistencies; repair them
``dashboard [APP] --port P`` the web dashboard (``--token``/``--basic-auth``, ``--read-only``)
``migrate [URL] [--check]``  apply a PostgreSQL store's pending schema migrations

``APP`` is ``module:attribute`` (``module`` alone means ``module:app``). The
store URL comes from ``--url``, else ``$CHRONOS_URL``, else the app; admin
commands need only one of them. Admin commands print a table, or JSON with
``--json``. Errors are one line on stderr with an exit code from the table
below, never a traceback (set ``CHRONOS_DEBUG=1`` to see one for an
unexpected error); under ``--json`` an error is also one JSON object on
stdout, ``{"error": {"message": ..., "exit_code": N, "reason": "not_found"}}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from .. import _collector
from ._options import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    Parser,
    UsageError,
    one_line,
    print_error,
)

Handler = Callable[[argparse.Namespace], int]

PROG = "python -m chronos_trio"
WORKER_HELP = "run workers for APP (--processes N: a local process manager)"


def build_worker_parser() -> argparse.ArgumentParser:
    """The ``worker`` command's parser alone: what :func:`parse_args` uses
    for ``worker ...``, so a worker neither builds the other commands'
    parsers nor imports their modules. The same parser as the full one's
    ``worker`` leaf (``tests/test_startup.py`` holds them to it)."""
    from . import _worker_command

    worker = Parser(prog=f"{PROG} worker")
    _worker_command.add_arguments(worker)
    return worker


def build_parser() -> tuple[
    argparse.ArgumentParser, dict[tuple[str, ...], argparse.ArgumentParser]
]:
    """The top-level parser, and each leaf command's parser by its words."""
    from . import (
        _admin,
        _dashboard_command,
        _enqueue_command,
        _migrate_command,
        _search_command,
        _worker_command,
    )

    parser = Parser(
        prog=PROG,
        description="Reliable distributed delayed jobs on Redis, built on Trio.",
        epilog="APP is module:attribute (module alone means module:app). "
        "The store URL comes from --url, else $CHRONOS_URL, else the app.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    leaves: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    demo = sub.add_parser(
        "demo", help="run producer + worker on the in-memory store (or the store at --url)"
    )
    demo.add_argument("--jobs", type=int, default=200, help="email jobs to enqueue (default 200)")
    demo.add_argument(
        "--url",
        help="run on this store (postgresql://, redis://; best an empty one) instead of in memory",
    )
    demo.add_argument("--no-live", action="store_true", help="print frames instead of redrawing")
    demo.set_defaults(handler=_run_demo)
    leaves[("demo",)] = demo

    tour = sub.add_parser(
        "tour", help="run every feature end to end on the in-memory store, printed as it happens"
    )
    tour.add_argument(
        "--only", metavar="TEXT", help="run only the chapters whose title contains TEXT"
    )
    tour.set_defaults(handler=_run_tour)
    leaves[("tour",)] = tour

    worker = sub.add_parser("worker", help=WORKER_HELP)
    _worker_command.add_arguments(worker)
    leaves[("worker",)] = worker

    enqueue = sub.add_parser(
        "enqueue",
        help="enqueue one job of KIND with a JSON payload (--wait: print its result)",
        description="enqueue one job of KIND with a JSON payload; prints its id (--wait: "
        "then its result as JSON; exit 12 when the job ends dead or aborted)",
    )
    _enqueue_command.add_arguments(enqueue)
    leaves[("enqueue",)] = enqueue

    _admin.add_commands(sub, leaves)
    _search_command.add_commands(sub, leaves)

    dashboard = sub.add_parser("dashboard", help="serve the web dashboard for APP or --url")
    _dashboard_command.add_arguments(dashboard)
    leaves[("dashboard",)] = dashboard

    migrate = sub.add_parser(
        "migrate",
        help="apply a PostgreSQL store's pending schema migrations (--check: only report)",
        description="apply a PostgreSQL store's pending schema migrations (--check: only "
        "report them, exit 10 while any is pending)",
    )
    _migrate_command.add_arguments(migrate)
    leaves[("migrate",)] = migrate
    return parser, leaves


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``. Leaf commands parse *intermixed*, so ``job APP --url U ID``
    and ``job --url U ID`` both work with the optional APP positional.
    ``worker ...`` is parsed by :func:`build_worker_parser` alone (its
    start-up is what users wait on)."""
    if list(argv[:1]) == ["worker"]:
        args = build_worker_parser().parse_intermixed_args(list(argv[1:]))
        args.command = "worker"
        return args
    parser, leaves = build_parser()
    for words in (2, 1):
        key = tuple(argv[:words])
        if len(key) == words and key in leaves:
            args = leaves[key].parse_intermixed_args(list(argv[words:]))
            args.command = " ".join(key)
            return args
    return parser.parse_args(list(argv))  # --help, unknown commands, missing words


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (see ``EXIT_*``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = parse_args(argv)
    except UsageError as exc:
        print_error(exc.message, EXIT_USAGE, as_json=as_json, prefix="")
        return EXIT_USAGE
    except SystemExit as exc:  # --help (0)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.argv = argv
    if args.command != "worker":  # a worker gives it back once its app is imported
        _collector.release()
    as_json = bool(getattr(args, "json", False))
    handler: Handler = args.handler
    try:
        return handler(args)
    except CliError as exc:
        print_error(one_line(str(exc)), exc.code, as_json=as_json)
        return exc.code
    except KeyboardInterrupt:
        print_error("interrupted", EXIT_INTERRUPTED, as_json=as_json)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("CHRONOS_DEBUG"):
            traceback.print_exc()
        message = (
            f"unexpected {type(exc).__name__}: {one_line(str(exc))} "
            "(set CHRONOS_DEBUG=1 for a traceback)"
        )
        print_error(message, EXIT_FAILURE, as_json=as_json)
        return EXIT_FAILURE


def _run_demo(args: argparse.Namespace) -> int:
    import logging

    import trio

    from ._demo import run_demo

    if args.jobs < 1:
        raise CliError("--jobs must be >= 1", EXIT_USAGE)
    from ..records._errors import StoreError, sole_exception
    from ..store import open_store
    from ._options import EXIT_BAD_URL, EXIT_UNAVAILABLE

    if args.url is not None:
        try:
            open_store(args.url)  # checks the URL; connects to nothing
        except (ValueError, ImportError) as exc:
            raise CliError(one_line(str(exc)), EXIT_BAD_URL) from None
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    live = False if args.no_live else None
    try:
        return trio.run(lambda: run_demo(jobs=args.jobs, live=live, url=args.url))
    except BaseException as exc:
        error = sole_exception(exc)
        if isinstance(error, StoreError):
            raise CliError(one_line(str(error)), EXIT_UNAVAILABLE) from None
        raise


def _run_tour(args: argparse.Namespace) -> int:
    import logging

    import trio

    from ._tour import run_tour

    # the tour prints what happens itself: the worker's own warnings (a dead
    # letter, a retry) would say it twice
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    try:
        return trio.run(lambda: run_tour(only=args.only))
    except ValueError as exc:  # --only matched no chapter
        raise CliError(one_line(str(exc)), EXIT_USAGE) from None


__all__ = ["build_parser", "build_worker_parser", "main", "parse_args"]
