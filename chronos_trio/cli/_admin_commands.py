"""What the admin commands do (their command lines are in ``_admin``): each
runs on an :class:`~chronos_trio.Inspector`, prints a table or JSON, and
maps every expected failure to a one-line :class:`CliError`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

import attrs
import trio

from ..app import Inspector
from ..app._app import App
from ..app._purge import purge_summary, purged_counts
from ..app._workflow_control import abort_workflow, workflow_view
from ..records import ActionRefused, UnknownJob, UnknownQueue
from ..records._errors import sole_exception
from ..records._jobs import JobState
from ..store import Capability, StoreError, TopologyError, capabilities_of
from ._loading import check_store, describe_store, load_app, resolve_shared_store, url_from
from ._options import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    one_line,
)
from ._output import (
    check_json,
    check_table,
    job_details,
    job_json,
    jobs_table,
    limit_json,
    limits_table,
    page_json,
    print_json,
    queue_json,
    queues_table,
    topology_json,
    topology_table,
    worker_json,
    workers_table,
)
from ._output_batch import batch_json, batch_lines
from ._output_notes import notes_json, notes_lines
from ._output_schedules import schedule_json, schedules_table
from ._output_workflow import abort_json, abort_text, workflow_json, workflow_text


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


# -- running a command ------------------------------------------------------------
def handle(fn: Command, args: argparse.Namespace) -> int:
    """Run the command ``fn`` for the parsed ``args``; its exit code."""
    if getattr(args, "needs_app", False) and not args.app:
        raise CliError(
            f"{args.command} are declared in the app: pass APP (module:attr)", EXIT_USAGE
        )
    app = load_app(args.app) if args.app else None
    url = url_from(args.url)
    store = resolve_shared_store(app, url)
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
        print_json(page_json(page, ctx.inspector.locate), ctx.out)
    else:
        _say(ctx, jobs_table(page, await ctx.inspector.now()))
    return EXIT_OK


async def _job(ctx: Context, args: argparse.Namespace) -> int:
    job = await ctx.inspector.job(args.job_id, queue=args.queue)
    notes = await ctx.inspector.notes(job)
    if ctx.json:
        print_json({**job_json(job, ctx.inspector.locate), **notes_json(notes)}, ctx.out)
    else:
        now = await ctx.inspector.now()
        _say(ctx, job_details(job, now, ctx.inspector.locate) + notes_lines(notes, now))
    return EXIT_OK


async def _batch(ctx: Context, args: argparse.Namespace) -> int:
    status = await ctx.inspector.batch(args.batch_id)
    if ctx.json:
        print_json(batch_json(status), ctx.out)
    else:
        _say(ctx, batch_lines(status))
    return EXIT_OK


async def _run_now(ctx: Context, args: argparse.Namespace) -> int:
    before = await ctx.inspector.job(args.job_id, queue=args.queue)
    job = await ctx.inspector.run_now(args.job_id, queue=args.queue)
    if ctx.json:
        print_json(
            {"previous_state": before.state.value, "job": job_json(job, ctx.inspector.locate)},
            ctx.out,
        )
    else:
        reset = "; attempts reset" if before.state is JobState.DEAD else ""
        _say(ctx, f"job {job.id} is {job.state.value} now (was {before.state.value}{reset})")
    return EXIT_OK


async def _delete(ctx: Context, args: argparse.Namespace) -> int:
    job = await ctx.inspector.delete(args.job_id, queue=args.queue)
    if ctx.json:
        print_json({"deleted": job_json(job, ctx.inspector.locate)}, ctx.out)
    else:
        _say(ctx, f"deleted job {job.id} ({job.kind}, {job.state.value}, queue {job.queue})")
    return EXIT_OK


async def _abort(ctx: Context, args: argparse.Namespace) -> int:
    before = await ctx.inspector.job(args.job_id, queue=args.queue)
    job = await ctx.inspector.abort(args.job_id, queue=args.queue, reason=args.reason)
    asked = job.state is JobState.LEASED
    if ctx.json:
        print_json(
            {
                "result": "flagged" if asked else "aborted",
                "previous_state": before.state.value,
                "job": job_json(job, ctx.inspector.locate),
            },
            ctx.out,
        )
    elif asked:
        _say(
            ctx,
            f"abort of job {job.id} asked: it is leased by {job.lease_owner or 'a worker'}, "
            "which cancels it at its next lease renewal (within one heartbeat) and "
            "records it aborted",
        )
    else:
        _say(ctx, f"job {job.id} is {job.state.value} now (was {before.state.value})")
    return EXIT_OK


async def _show_workflow(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.inspector.store
    if Capability.WORKFLOW_CONTROL not in capabilities_of(store):
        raise CliError(
            f"{type(store).__name__} keeps no workflow records: it cannot show or abort "
            "a workflow (MemoryStore, Redis, PostgreSQL and SQLite can)",
            EXIT_REFUSED,
        )
    if args.abort:
        done = await abort_workflow(store, args.workflow_id, args.reason)
        if not done.found:
            raise CliError(abort_text(done), EXIT_NOT_FOUND)
        if ctx.json:
            print_json(abort_json(done), ctx.out)
        else:
            _say(ctx, abort_text(done))
        return EXIT_OK
    view = await workflow_view(store, args.workflow_id)
    if view.root is None:
        raise CliError(workflow_text(view), EXIT_NOT_FOUND)
    if ctx.json:
        print_json(workflow_json(view), ctx.out)
    else:
        _say(ctx, workflow_text(view))
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


async def _purge(ctx: Context, args: argparse.Namespace) -> int:
    insp = ctx.inspector
    await insp.check_queue(args.queue)
    before = (await insp.queue(args.queue)).counts
    if purged_counts(before):
        summary = purge_summary(args.queue, before)
        await confirm(ctx, summary[0].upper() + summary[1:] + "?", f"purge queue {args.queue!r}")
        count = await insp.purge(args.queue)
    else:
        count = 0
    leased = (await insp.queue(args.queue)).counts.get(JobState.LEASED, 0)
    if ctx.json:
        print_json({"queue": args.queue, "deleted": count, "leased_left": leased}, ctx.out)
    else:
        text = f"purged queue {args.queue!r}: deleted {count} job(s)"
        _say(ctx, text + (f"; {leased} leased job(s) left to finish" if leased else ""))
    return EXIT_OK


async def _pause(ctx: Context, args: argparse.Namespace) -> int:
    return await _set_paused(ctx, args.queue, True)


async def _resume(ctx: Context, args: argparse.Namespace) -> int:
    return await _set_paused(ctx, args.queue, False)


async def _set_paused(ctx: Context, queue: str, paused: bool) -> int:
    known = await (ctx.inspector.pause if paused else ctx.inspector.resume)(queue)
    if ctx.json:
        print_json({"queue": queue, "paused": paused, "new_queue": not known}, ctx.out)
        return EXIT_OK
    if paused:
        said = f"queue {queue!r} paused: workers stop leasing from it (leased jobs finish)"
    else:
        said = f"queue {queue!r} resumed"
    if not known:
        others = [q for q in await ctx.inspector.queue_names() if q != queue]
        said += f"; it is a new queue (no job was ever in it){_close_queue(queue, others)}"
    _say(ctx, said)
    return EXIT_OK


def _close_queue(queue: str, known: list[str]) -> str:
    """ ", did you mean 'x'?" for a known queue close to ``queue``, else ""."""
    import difflib

    close = difflib.get_close_matches(queue, known, n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""


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


async def _limits(ctx: Context, args: argparse.Namespace) -> int:
    rows = await ctx.inspector.limits(args.queue)
    if ctx.json:
        print_json([limit_json(row) for row in rows], ctx.out)
    else:
        _say(ctx, limits_table(rows, await ctx.inspector.now()))
    return EXIT_OK


async def _schedules(ctx: Context, args: argparse.Namespace) -> int:
    rows = await ctx.inspector.schedules()
    if ctx.json:
        print_json([schedule_json(row) for row in rows], ctx.out)
    else:
        _say(ctx, schedules_table(rows, await ctx.inspector.now()))
    return EXIT_OK


async def _workers(ctx: Context, args: argparse.Namespace) -> int:
    rows = await ctx.inspector.workers()
    if ctx.json:
        print_json([worker_json(row) for row in rows], ctx.out)
    else:
        _say(ctx, workers_table(rows, await ctx.inspector.now()))
    return EXIT_OK


async def _check(ctx: Context, args: argparse.Namespace) -> int:
    report = await ctx.inspector.check(
        args.queue, repair=args.repair, batch=args.batch, lease_grace=args.lease_grace
    )
    if ctx.json:
        print_json(check_json(report, ctx.inspector.locate), ctx.out)
    else:
        _say(ctx, check_table(report, ctx.inspector.locate))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


__all__ = ["Context", "confirm", "handle", "run_command"]
