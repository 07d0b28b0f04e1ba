"""``schedules add|change|pause|resume|remove`` (and ``schedules list``,
the same as ``schedules``): schedules kept in the store, edited at run
time through ``app.dynamic_schedules`` (see ``app._dynamic_schedules``).

Every edit needs APP (the task registry validates it as a code schedule
is validated); a refused or bad edit is one line with an exit code and
stores nothing: a usage error (2) for bad input or an id declared in code,
6 for an id that is not stored (pause, resume, remove, change), 7 for an
id already stored (add) or a removal not confirmed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..records._errors import (
    PayloadError,
    ScheduleAlreadyStored,
    ScheduleNotStored,
    UnknownTask,
)
from ..store import MissingCapability
from ._admin_commands import Context, confirm
from ._enqueue_command import _payload
from ._options import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError, one_line
from ._output import print_json
from ._output_schedules import schedule_json, schedules_table


def _app(ctx: Context) -> Any:
    if ctx.app is None:
        raise CliError("stored schedules are edited through the app: pass APP", EXIT_USAGE)
    return ctx.app


async def _edit(ctx: Context, args: argparse.Namespace, action: str) -> int:
    app = _app(ctx)
    schedules = app.dynamic_schedules
    try:
        if action in ("add", "change"):
            text = sys.stdin.read() if args.payload == "-" else args.payload
            # with external=True the app does not run the task: the payload goes as JSON
            payload = _payload(
                None if args.external else app, args.task, text.encode(), nothing="nothing stored"
            )
            options = {
                k: v
                for k, v in (
                    ("queue", args.queue),
                    ("max_retries", args.max_retries),
                    ("timeout", args.timeout),
                )
                if v is not None
            }
            fn = schedules.add if action == "add" else schedules.change
            await fn(
                args.schedule_id,
                payload,
                task=args.task,
                cron=args.cron,
                every=args.every,
                tz=args.tz,
                misfire=args.misfire,
                external=args.external,
                **options,
            )
        elif action == "remove":
            await confirm(ctx, f"remove stored schedule {args.schedule_id!r}?", "remove it")
            await schedules.remove(args.schedule_id)
        else:
            await getattr(schedules, action)(args.schedule_id)
    except MissingCapability as exc:
        raise CliError(one_line(str(exc)), EXIT_USAGE) from None
    except (UnknownTask, PayloadError, TypeError) as exc:
        raise CliError(f"nothing stored: {one_line(str(exc))}", EXIT_USAGE) from None
    except ScheduleNotStored as exc:
        raise CliError(str(exc), EXIT_NOT_FOUND) from None
    except ScheduleAlreadyStored as exc:
        raise CliError(str(exc), EXIT_REFUSED) from None
    except ValueError as exc:
        raise CliError(f"nothing stored: {one_line(str(exc))}", EXIT_USAGE) from None
    done = {"add": "added", "change": "changed", "pause": "paused", "resume": "resumed"}
    word = done.get(action, "removed")
    if ctx.json:
        print_json({"id": args.schedule_id, "done": word}, ctx.out)
    else:
        ctx.out.write(f"schedule {args.schedule_id!r} {word}\n")
    return EXIT_OK


async def _schedules_list(ctx: Context, args: argparse.Namespace) -> int:
    rows = await ctx.inspector.schedules()
    if ctx.json:
        print_json([schedule_json(row) for row in rows], ctx.out)
    else:
        ctx.out.write(schedules_table(rows, await ctx.inspector.now()) + "\n")
    return EXIT_OK


async def _schedules_add(ctx: Context, args: argparse.Namespace) -> int:
    return await _edit(ctx, args, "add")


async def _schedules_change(ctx: Context, args: argparse.Namespace) -> int:
    return await _edit(ctx, args, "change")


async def _schedules_pause(ctx: Context, args: argparse.Namespace) -> int:
    return await _edit(ctx, args, "pause")


async def _schedules_resume(ctx: Context, args: argparse.Namespace) -> int:
    return await _edit(ctx, args, "resume")


async def _schedules_remove(ctx: Context, args: argparse.Namespace) -> int:
    return await _edit(ctx, args, "remove")
