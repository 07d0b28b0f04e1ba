"""Admin commands on the :class:`~chronos_trio.Inspector`: queues, jobs, job,
run-now, delete, requeue-dead, pause, resume, topology, schedules, check.

Each takes ``[APP]`` and/or ``--url`` (a URL alone is enough, except for
``schedules``, which lives in the app), prints a table or ``--json``, and
maps every expected failure to a one-line :class:`CliError`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import attrs
import trio

from ..app import Inspector
from ..app._app import App
from ..records import ActionRefused, UnknownJob, UnknownQueue
from ..records._errors import sole_exception
from ..records._jobs import JobState
from ..store import LEASE_GRACE, StoreError, TopologyError, scheme_of
from ._loading import check_store, describe_store, load_app, resolve_store, url_from
from ._options import (
    EXIT_BAD_URL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    int_at_least,
    one_line,
    seconds,
)
from ._output import (
    check_json,
    check_table,
    job_details,
    job_json,
    jobs_table,
    page_json,
    print_json,
    queue_json,
    queues_table,
    schedule_json,
    schedules_table,
    topology_json,
    topology_table,
)


@attrs.define
class Context:
    """What a command needs: the inspector, where output goes, the flags."""

    inspector: Inspector
    app: App | None
    where: str
    json: bool
    out: TextIO
    err: TextIO
    stdin: TextIO | None
    yes: bool = False


Command = Callable[[Context, argparse.Namespace], Awaitable[int]]


def _state(text: str) -> JobState:
    try:
        return JobState.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_commands(sub: Any, leaves: dict[tuple[str, ...], argparse.ArgumentParser]) -> None:
    """Add every admin command to the ``sub`` subparsers action."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "app", nargs="?", metavar="APP", help="module:attribute of the App (optional with --url)"
    )
    common.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def command(
        words: tuple[str, ...], fn: Command, help: str, parent: Any = sub
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(
            words[-1], help=help, description=help, parents=[common]
        )
        parser.set_defaults(handler=_handler(fn))
        leaves[words] = parser
        return parser

    p = command(("queues",), _queues, "queues with job counts per state, version and partition")
    p.add_argument("--queue", action="append", help="only this queue (repeatable)")

    p = command(("jobs",), _jobs, "list a queue's jobs in one state, a page at a time")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--state", required=True, type=_state, help="job state: " + _state_names())
    p.add_argument("--offset", type=int_at_least(0), default=0, help="skip this many (default 0)")
    p.add_argument("--limit", type=int_at_least(1), default=50, help="page size (default 50)")

    for words, fn, text in (
        (("job",), _job, "show one job: payload, attempts, last error, lease, next run"),
        (("run-now",), _run_now, "make a scheduled, retry_wait or dead job ready now"),
        (("delete",), _delete, "delete one job (not while it is leased)"),
    ):
        p = command(words, fn, text)
        p.add_argument("job_id", metavar="ID", help="job id")
        p.add_argument("--queue", help="the job's queue (faster lookup, and a check)")

    p = command(("requeue-dead",), _requeue_dead, "make dead jobs ready again (attempts reset)")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--job", metavar="ID", help="only this dead job (no confirmation needed)")
    p.add_argument("--limit", type=int_at_least(1), help="at most this many")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    for words, fn, text in (
        (("pause",), _pause, "stop workers leasing from a queue (within one poll)"),
        (("resume",), _resume, "let workers lease from a paused queue again"),
    ):
        p = command(words, fn, text)
        p.add_argument("queue", metavar="QUEUE", help="queue name")

    topology = sub.add_parser(
        "topology", help="show, promote or complete a queue's versioned routing"
    )
    topo_sub = topology.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = command(("topology", "show"), _topology_show, "show a queue's versions", topo_sub)
    p.add_argument("queue", metavar="QUEUE")
    p = command(
        ("topology", "promote"),
        _topology_promote,
        "route new jobs to a new version (the old one drains)",
        topo_sub,
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--partitions", type=int_at_least(1), required=True)
    p.add_argument("--version", type=int_at_least(1), help="default: one above the highest")
    p = command(
        ("topology", "complete"),
        _topology_complete,
        "remove a drained version (refused while it holds jobs)",
        topo_sub,
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--version", type=int_at_least(1), help="default: the only draining one")

    p = command(("schedules",), _schedules, "the app's cron and interval schedules")
    p.set_defaults(needs_app=True)

    p = command(
        ("check",),
        _check,
        "walk the store for inconsistencies (records without an index, index entries "
        "without a record, damaged records, leases never recovered); --repair fixes them; "
        "exit code 9 when problems are left",
    )
    p.add_argument("--queue", action="append", help="only this queue (repeatable)")
    p.add_argument(
        "--repair",
        action="store_true",
        help="put each job back where its state says, or dead-letter it with the reason",
    )
    p.add_argument(
        "--batch",
        type=int_at_least(1),
        default=500,
        help="keys or index entries per store command (default 500)",
    )
    p.add_argument(
        "--lease-grace",
        type=seconds(allow_zero=True),
        default=LEASE_GRACE,
        help=f"report leases expired longer ago than this (default {LEASE_GRACE:g}s)",
    )


def _shared(url: str) -> bool:
    """Whether ``url``'s store can be seen from another process (a malformed
    URL is left to :func:`resolve_store` to report)."""
    try:
        return scheme_of(url).shared
    except ValueError:
        return True


def _state_names() -> str:
    return ", ".join(s.value for s in JobState)


# -- running a command ------------------------------------------------------------
def _handler(fn: Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        if getattr(args, "needs_app", False) and not args.app:
            raise CliError(
                f"{args.command} are declared in the app: pass APP (module:attr)", EXIT_USAGE
            )
        app = load_app(args.app) if args.app else None
        url = url_from(args.url)
        if url is not None and not _shared(url):
            raise CliError(
                "memory:// lives inside one process and cannot be inspected from another: "
                "use the Redis URL your workers use",
                EXIT_BAD_URL,
            )
        store = resolve_store(app, url)
        ctx = Context(
            inspector=Inspector(store, app=app),
            app=app,
            where=describe_store(app, url, store),
            json=args.json,
            out=sys.stdout,
            err=sys.stderr,
            stdin=sys.stdin,
            yes=getattr(args, "yes", False),
        )
        return trio.run(run_command, fn, ctx, args)

    return handle


async def run_command(fn: Command, ctx: Context, args: argparse.Namespace) -> int:
    """Run ``fn`` and turn the inspector's errors into one-line CliErrors.
    Tests call it directly (in-process, on any store)."""
    try:
        await check_store(ctx.inspector.store, ctx.where)
        return await fn(ctx, args)
    except BaseException as exc:
        error = _as_cli_error(sole_exception(exc), ctx.where)
        if error is None:
            raise
        raise error from None
    finally:
        with trio.CancelScope(shield=True):
            await ctx.inspector.aclose()


def _as_cli_error(exc: BaseException, where: str) -> CliError | None:
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, UnknownQueue | UnknownJob):
        return CliError(str(exc), EXIT_NOT_FOUND)
    if isinstance(exc, ActionRefused | TopologyError):
        return CliError(str(exc), EXIT_REFUSED)
    if isinstance(exc, StoreError):
        return CliError(one_line(str(exc)), EXIT_UNAVAILABLE)
    if isinstance(exc, ValueError):
        return CliError(str(exc), EXIT_USAGE)
    return None


async def confirm(ctx: Context, question: str, action: str) -> None:
    """Ask ``question`` on the terminal unless ``--yes``; refuse (one line,
    EXIT_REFUSED) when stdin is not a terminal or the answer is not yes."""
    if ctx.yes:
        return
    if ctx.stdin is None or not ctx.stdin.isatty():
        raise CliError(
            f"refusing to {action} without confirmation (stdin is not a terminal): pass --yes",
            EXIT_REFUSED,
        )
    ctx.err.write(f"{question} [y/N] ")
    ctx.err.flush()
    answer = await trio.to_thread.run_sync(ctx.stdin.readline, abandon_on_cancel=True)
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError(f"not confirmed: did not {action}", EXIT_REFUSED)


def _say(ctx: Context, text: str) -> None:
    ctx.out.write(text + "\n")


# -- commands -------------------------------------------------------------------
async def _queues(ctx: Context, args: argparse.Namespace) -> int:
    infos = await ctx.inspector.queues(args.queue)
    if ctx.json:
        print_json([queue_json(i) for i in infos], ctx.out)
    else:
        _say(ctx, queues_table(infos))
    return EXIT_OK


async def _jobs(ctx: Context, args: argparse.Namespace) -> int:
    page = await ctx.inspector.jobs(args.queue, args.state, offset=args.offset, limit=args.limit)
    if ctx.json:
        print_json(page_json(page), ctx.out)
    else:
        _say(ctx, jobs_table(page, await ctx.inspector.now()))
    return EXIT_OK


async def _job(ctx: Context, args: argparse.Namespace) -> int:
    job = await ctx.inspector.job(args.job_id, queue=args.queue)
    if ctx.json:
        print_json(job_json(job), ctx.out)
    else:
        _say(ctx, job_details(job, await ctx.inspector.now()))
    return EXIT_OK


async def _run_now(ctx: Context, args: argparse.Namespace) -> int:
    before = await ctx.inspector.job(args.job_id, queue=args.queue)
    job = await ctx.inspector.run_now(args.job_id, queue=args.queue)
    if ctx.json:
        print_json({"previous_state": before.state.value, "job": job_json(job)}, ctx.out)
    else:
        reset = "; attempts reset" if before.state is JobState.DEAD else ""
        _say(ctx, f"job {job.id} is {job.state.value} now (was {before.state.value}{reset})")
    return EXIT_OK


async def _delete(ctx: Context, args: argparse.Namespace) -> int:
    job = await ctx.inspector.delete(args.job_id, queue=args.queue)
    if ctx.json:
        print_json({"deleted": job_json(job)}, ctx.out)
    else:
        _say(ctx, f"deleted job {job.id} ({job.kind}, {job.state.value}, queue {job.queue})")
    return EXIT_OK


async def _requeue_dead(ctx: Context, args: argparse.Namespace) -> int:
    insp = ctx.inspector
    if args.job is not None:
        count = await insp.requeue_dead(args.queue, job_id=args.job)
    else:
        dead = await insp.dead_count(args.queue)
        if dead == 0:
            count = 0
        else:
            n = dead if args.limit is None else min(dead, args.limit)
            await confirm(
                ctx,
                f"requeue {n} dead job(s) of queue {args.queue!r} (attempts reset)?",
                f"requeue {n} dead job(s)",
            )
            count = await insp.requeue_dead(args.queue, limit=args.limit)
    if ctx.json:
        print_json({"queue": args.queue, "job": args.job, "requeued": count}, ctx.out)
    elif count == 0:
        _say(ctx, f"no dead jobs in queue {args.queue!r}")
    else:
        _say(ctx, f"requeued {count} dead job(s) of queue {args.queue!r}: ready to run")
    return EXIT_OK


async def _pause(ctx: Context, args: argparse.Namespace) -> int:
    await ctx.inspector.pause(args.queue)
    if ctx.json:
        print_json({"queue": args.queue, "paused": True}, ctx.out)
    else:
        _say(
            ctx,
            f"queue {args.queue!r} paused: workers stop leasing from it within one poll "
            "(leased jobs finish)",
        )
    return EXIT_OK


async def _resume(ctx: Context, args: argparse.Namespace) -> int:
    await ctx.inspector.resume(args.queue)
    if ctx.json:
        print_json({"queue": args.queue, "paused": False}, ctx.out)
    else:
        _say(ctx, f"queue {args.queue!r} resumed")
    return EXIT_OK


async def _topology_show(ctx: Context, args: argparse.Namespace) -> int:
    topology = await ctx.inspector.topology(args.queue)
    if ctx.json:
        print_json(topology_json(topology), ctx.out)
    else:
        _say(ctx, topology_table(topology))
    return EXIT_OK


async def _topology_promote(ctx: Context, args: argparse.Namespace) -> int:
    topology = await ctx.inspector.promote(
        args.queue, partitions=args.partitions, version=args.version
    )
    if ctx.json:
        print_json(topology_json(topology), ctx.out)
    else:
        active = topology.active
        _say(
            ctx,
            f"queue {args.queue!r}: new jobs go to version {active.version} "
            f"({active.partitions} partitions); older versions drain\n{topology_table(topology)}",
        )
    return EXIT_OK


async def _topology_complete(ctx: Context, args: argparse.Namespace) -> int:
    topology = await ctx.inspector.complete(args.queue, version=args.version)
    if ctx.json:
        print_json(topology_json(topology), ctx.out)
    else:
        _say(ctx, f"queue {args.queue!r}: drained version removed\n{topology_table(topology)}")
    return EXIT_OK


async def _schedules(ctx: Context, args: argparse.Namespace) -> int:
    rows = await ctx.inspector.schedules()
    if ctx.json:
        print_json([schedule_json(row) for row in rows], ctx.out)
    else:
        _say(ctx, schedules_table(rows, await ctx.inspector.now()))
    return EXIT_OK


async def _check(ctx: Context, args: argparse.Namespace) -> int:
    report = await ctx.inspector.check(
        args.queue, repair=args.repair, batch=args.batch, lease_grace=args.lease_grace
    )
    if ctx.json:
        print_json(check_json(report), ctx.out)
    else:
        _say(ctx, check_table(report))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


__all__ = ["Context", "add_commands", "confirm", "run_command"]
