"""``search`` and ``bulk``: find jobs by kind, state, queue, error or payload
text, worker and time, and act on every job found (or on named ones).

``search [APP] [filters] [--cursor C] [--limit N] [--json]`` prints one
page and, when there is more, the ``--cursor`` to pass for the next (a page
that stopped at the scan bound before it was full says so: more may match).

``bulk ACTION [APP] [filters | --job QUEUE:ID ...] [--yes]`` runs ACTION
(requeue, run-now, delete, abort) on each job, in steps of ``--batch``,
printing progress; it states the count first and asks for confirmation
(``--yes`` is needed when stdin is not a terminal, as for requeue-dead).
Each job's action is the store's atomic admin operation: a job in a state
the action does not apply to, or that changed state meanwhile, is skipped
and counted.

Filters: ``--queue`` and ``--state`` (repeatable), ``--kind``, ``--error``,
``--payload``, ``--worker``, and ``--created-from/--created-to``,
``--finished-from/--finished-to``, ``--due-from/--due-to`` (epoch seconds,
ISO 8601, UTC unless zoned, or a span back from now: 15m, 2h, 7d).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..app._bulk import BULK_BATCH, BulkAction, BulkResult, count_matching
from ..app._inspector import relative_text as relative
from ..app._search_params import TEXT_FILTERS, TIME_FILTERS, describe, query_from_params
from ..store import JobQuery
from ..store._search import MAX_PAGE, SCAN_LIMIT
from ._admin_commands import Context, confirm, handle
from ._options import EXIT_OK, EXIT_USAGE, CliError, int_at_least
from ._output import first_line, job_json, print_json, table


def add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue", action="append", default=[], help="in this queue (repeatable)")
    p.add_argument("--state", action="append", default=[], help="in this state (repeatable)")
    p.add_argument("--kind", default="", help="of this kind (exactly)")
    p.add_argument("--error", default="", help="last error contains TEXT (ASCII case folded)")
    p.add_argument("--payload", default="", help="payload contains TEXT (case-sensitive)")
    p.add_argument("--worker", default="", help="leased by, or an attempt run by, WORKER id")
    for _, prefix, what in TIME_FILTERS:
        for side, word in (("from", "at or after"), ("to", "before")):
            p.add_argument(
                f"--{prefix}-{side}", default="", metavar="TIME", help=f"{what} {word} TIME"
            )


def add_commands(sub: Any, leaves: dict[tuple[str, ...], argparse.ArgumentParser]) -> None:
    """Add ``search`` and ``bulk`` to the ``sub`` subparsers action."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "app", nargs="?", metavar="APP", help="module:attribute of the App (optional with --url)"
    )
    common.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    text = "find jobs by queue, state, kind, error or payload text, worker and time"
    p = sub.add_parser("search", help=text, description=text, parents=[common])
    add_filters(p)
    p.add_argument("--cursor", help="go on from a page's cursor")
    p.add_argument(
        "--limit",
        type=int_at_least(1),
        default=50,
        help=f"page size (default 50, at most {MAX_PAGE})",
    )
    p.add_argument(
        "--scan-limit",
        type=int_at_least(1),
        default=SCAN_LIMIT,
        help=f"records one call reads at most (default {SCAN_LIMIT})",
    )
    p.set_defaults(handler=lambda args: handle(_search, args))
    leaves[("search",)] = p

    text = "requeue, run now, delete or abort every job a search finds (or --job ones)"
    p = sub.add_parser("bulk", help=text, description=text)
    p.add_argument(
        "action", metavar="ACTION", choices=["requeue", "run-now", "delete", "abort"],
        help="requeue (dead -> ready), run-now, delete or abort",
    )  # fmt: skip
    # ACTION before APP (a parent's arguments would come first)
    p.add_argument(
        "app", nargs="?", metavar="APP", help="module:attribute of the App (optional with --url)"
    )
    p.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_filters(p)
    p.add_argument(
        "--job", action="append", default=[], metavar="QUEUE:ID", help="only this job (repeatable)"
    )
    p.add_argument("--reason", default="", help="an abort's reason (kept in its last error)")
    p.add_argument(
        "--batch",
        type=int_at_least(1),
        default=BULK_BATCH,
        help=f"jobs per step (default {BULK_BATCH})",
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=lambda args: handle(_bulk, args))
    leaves[("bulk",)] = p


def _query(args: argparse.Namespace, now: float) -> JobQuery:
    given: dict[str, list[str]] = {"queue": args.queue, "state": args.state}
    for name in TEXT_FILTERS:
        given[name] = [getattr(args, name)]
    for _, prefix, _ in TIME_FILTERS:
        for side in ("from", "to"):
            given[f"{prefix}_{side}"] = [getattr(args, f"{prefix}_{side}")]
    try:
        return query_from_params(lambda name: given.get(name, []), now)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _filtered(query: JobQuery) -> bool:
    return query != JobQuery()


async def _search(ctx: Context, args: argparse.Namespace) -> int:
    insp = ctx.inspector
    now = await insp.now()
    query = _query(args, now)
    page = await insp.search(
        query, cursor=args.cursor, limit=args.limit, scan_limit=args.scan_limit
    )
    if ctx.json:
        print_json(
            {
                "jobs": [job_json(j, insp.locate) for j in page.jobs],
                "cursor": page.cursor,
                "scanned": page.scanned,
                "partial": page.partial,
            },
            ctx.out,
        )
        return EXIT_OK
    rows = [
        [
            j.queue,
            j.id,
            j.kind,
            j.state.value,
            j.attempts,
            relative(j.finished_at if j.finished_at is not None else j.run_at, now),
            first_line(j.last_error, 50) or None,
        ]
        for j in page.jobs
    ]
    lines = [table(["QUEUE", "ID", "KIND", "STATE", "ATTEMPTS", "WHEN", "LAST ERROR"], rows)]
    if not page.jobs:
        lines = ["no job found" + (" yet" if page.partial else "")]
    if page.cursor is not None:
        why = "the scan bound stopped this page: more may match" if page.partial else "more"
        lines.append(f"({why}; {page.scanned} records read) next page: --cursor {page.cursor}")
    ctx.out.write("\n".join(lines) + "\n")
    return EXIT_OK


def _refs(texts: list[str]) -> list[tuple[str, str]]:
    refs = []
    for text in texts:
        queue, sep, job_id = text.partition(":")
        if not sep or not queue or not job_id:
            raise CliError(f"--job takes QUEUE:ID, got {text!r}", EXIT_USAGE)
        refs.append((queue, job_id))
    return refs


async def _bulk(ctx: Context, args: argparse.Namespace) -> int:
    insp = ctx.inspector
    action = BulkAction.parse(args.action)
    query = _query(args, await insp.now())
    refs = _refs(args.job)
    if refs and _filtered(query):
        raise CliError("give either --job or filters, not both", EXIT_USAGE)
    if refs:
        await confirm(
            ctx, f"{action.label} {len(refs)} job(s)?", f"{action.label} {len(refs)} job(s)"
        )
        total = await insp.bulk(action, refs, reason=args.reason)
        _report(ctx, action, total, len(refs))
        return EXIT_OK
    for name in query.queues:
        await insp.check_queue(name)
    count, exact = await count_matching(insp.store, action, query)
    stated = f"{count}" if exact else f"at least {count}"
    await confirm(
        ctx,
        f"{action.label} {stated} job(s) matching: {describe(query)}?",
        f"{action.label} {stated} job(s)",
    )
    total, cursor = BulkResult(), None
    while True:
        progress = await insp.bulk_matching(
            action, query, cursor=cursor, batch=args.batch, reason=args.reason
        )
        total += progress.result
        if not ctx.json:
            ctx.err.write(f"{action.label}: {total.done} done, {total.skipped} skipped so far\n")
        if progress.finished:
            break
        cursor = progress.cursor
    _report(ctx, action, total, count)
    return EXIT_OK


def _report(ctx: Context, action: BulkAction, total: BulkResult, stated: int) -> None:
    if ctx.json:
        print_json(
            {
                "action": action.value,
                "stated": stated,
                "done": total.done,
                "skipped": total.skipped,
                "missing": total.missing,
                "flagged": total.flagged,
            },
            ctx.out,
        )
        return
    said = f"{action.label}: {total.done} done, {total.skipped} skipped, {total.missing} gone"
    if total.flagged:
        said += f" ({total.flagged} leased: flagged, their workers abort them)"
    ctx.out.write(said + "\n")


__all__ = ["add_commands", "add_filters"]
