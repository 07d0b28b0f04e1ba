"""Admin commands on the :class:`~chronos_trio.Inspector`: queues, jobs, job,
run-now, delete, abort, requeue-dead, purge, pause, resume, topology, limits, schedules,
workers, check.

Each takes ``[APP]`` and/or ``--url`` (a URL alone is enough, except for
``schedules``, which lives in the app), prints a table or ``--json``, and
maps every expected failure to a one-line :class:`CliError`.

This module holds their command lines; what they do is in
``_admin_commands``, imported when one runs (a worker never needs it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..records._jobs import JobState
from ..store import LEASE_GRACE
from ._options import int_at_least, seconds


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
        words: tuple[str, ...], fn: str, help: str, parent: Any = sub
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(
            words[-1], help=help, description=help, parents=[common]
        )
        parser.set_defaults(handler=_handler(fn))
        leaves[words] = parser
        return parser

    p = command(("queues",), "_queues", "queues with job counts per state, version and partition")
    p.add_argument("--queue", action="append", help="only this queue (repeatable)")

    p = command(("jobs",), "_jobs", "list a queue's jobs in one state, a page at a time")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--state", required=True, type=_state, help="job state: " + _state_names())
    p.add_argument("--offset", type=int_at_least(0), default=0, help="skip this many (default 0)")
    p.add_argument("--limit", type=int_at_least(1), default=50, help="page size (default 50)")

    for words, fn, text in (
        (("job",), "_job", "show one job: payload, attempts, last error, lease, next run"),
        (("run-now",), "_run_now", "make a scheduled, retry_wait or dead job ready now"),
        (("delete",), "_delete", "delete one job (not while it is leased)"),
    ):
        p = command(words, fn, text)
        p.add_argument("job_id", metavar="ID", help="job id")
        p.add_argument("--queue", help="the job's queue (faster lookup, and a check)")

    p = command(
        ("abort",),
        "_abort",
        "abort one job: a waiting one at once; a running one is cancelled by its worker "
        "at its next lease renewal (within one heartbeat)",
    )
    p.add_argument("job_id", metavar="ID", help="job id")
    p.add_argument("--queue", help="the job's queue (faster lookup, and a check)")
    p.add_argument("--reason", default="", help="kept in the job's last error ('aborted: TEXT')")

    p = command(
        ("workflow",),
        "_show_workflow",
        "show a workflow's steps as a tree (state, attempts, times) and its overall state; "
        "--abort cancels it: running steps are aborted, waiting ones dropped, later ones "
        "never made",
    )
    p.add_argument("workflow_id", metavar="ID", help="workflow id")
    p.add_argument("--abort", action="store_true", help="cancel the whole workflow")
    p.add_argument("--reason", default="", help="with --abort: kept in each aborted step's error")

    p = command(
        ("batch",), "_batch", "show a batch's live counts: succeeded, failed, pending, callback"
    )
    p.add_argument("batch_id", metavar="ID", help="batch id (App.enqueue_batch)")

    p = command(("requeue-dead",), "_requeue_dead", "make dead jobs ready again (attempts reset)")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--job", metavar="ID", help="only this dead job (no confirmation needed)")
    p.add_argument("--limit", type=int_at_least(1), help="at most this many")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    p = command(
        ("purge",),
        "_purge",
        "delete every job of a queue but the leased ones (those finish first)",
    )
    p.add_argument("queue", metavar="QUEUE", help="queue name")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    for words, fn, text in (
        (("pause",), "_pause", "stop workers leasing from a queue (at their next lease)"),
        (("resume",), "_resume", "let workers lease from a paused queue again"),
    ):
        p = command(words, fn, text)
        p.add_argument("queue", metavar="QUEUE", help="queue name")

    topology = sub.add_parser(
        "topology", help="show, promote or complete a queue's versioned routing"
    )
    topo_sub = topology.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = command(("topology", "show"), "_topology_show", "show a queue's versions", topo_sub)
    p.add_argument("queue", metavar="QUEUE")
    p = command(
        ("topology", "promote"),
        "_topology_promote",
        "route new jobs to a new version (the old one drains)",
        topo_sub,
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--partitions", type=int_at_least(1), required=True)
    p.add_argument("--version", type=int_at_least(1), help="default: one above the highest")
    p = command(
        ("topology", "complete"),
        "_topology_complete",
        "remove a drained version (refused while it holds jobs)",
        topo_sub,
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--version", type=int_at_least(1), help="default: the only draining one")

    p = command(
        ("limits",),
        "_limits",
        "rate and concurrency limits per queue: their keys, use now and declared limits",
    )
    p.add_argument("--queue", help="only this queue")

    command(
        ("workers",),
        "_workers",
        "live worker processes: host, pid, queues, concurrency, uptime, last beat and "
        "running jobs (a worker that died drops out within three heartbeats)",
    )

    p = command(
        ("schedules",),
        "_schedules",
        "the app's cron and interval schedules, declared in code and stored, with their "
        "next fires in their time zones beside UTC (schedules add|change|pause|resume|"
        "remove|list: edit the stored ones)",
    )
    p.set_defaults(needs_app=True)
    _add_schedule_commands(common, leaves)

    p = command(
        ("check",),
        "_check",
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


def _add_schedule_commands(
    common: argparse.ArgumentParser, leaves: dict[tuple[str, ...], argparse.ArgumentParser]
) -> None:
    """``schedules ACTION``: leaves of their own (``schedules APP`` lists)."""
    from ._options import Parser

    def leaf(action: str, help: str) -> argparse.ArgumentParser:
        parser = Parser(
            prog=f"python -m chronos_trio schedules {action}",
            description=help,
            parents=[common],
        )
        parser.set_defaults(handler=_handler(f"_schedules_{action}", "_schedule_commands"))
        parser.set_defaults(needs_app=action == "list")
        leaves[("schedules", action)] = parser
        return parser

    leaf("list", "the app's schedules (as `schedules APP`)")
    for action, text in (
        ("add", "store a new schedule (validated as a code schedule; APP needed)"),
        ("change", "replace a stored schedule's definition (its id and last fire stay)"),
    ):
        p = leaf(action, text)
        p.add_argument("schedule_id", metavar="ID", help="the schedule's id")
        p.add_argument("payload", metavar="PAYLOAD", help="the payload as JSON ('-': stdin)")
        p.add_argument("--task", required=True, help="the task kind it enqueues")
        when = p.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", help="5-field cron spec (or @hourly, @daily, ...)")
        when.add_argument("--every", type=seconds(), help="interval, seconds (>= 1)")
        p.add_argument("--tz", default="UTC", help="IANA time zone of --cron (default UTC)")
        p.add_argument("--misfire", default="skip", help="skip (default) or fire_once")
        p.add_argument("--queue", help="queue of its jobs (default: the task's)")
        p.add_argument("--max-retries", type=int_at_least(0), help="default: the task's")
        p.add_argument("--timeout", type=seconds(), help="default: the task's")
        p.add_argument(
            "--external",
            action="store_true",
            help="the task is registered by another program sharing the store",
        )
    for action, text in (
        ("pause", "stop firing a stored schedule (from the leader's next round)"),
        ("resume", "fire a paused stored schedule again"),
        ("remove", "forget a stored schedule (asks unless --yes)"),
    ):
        p = leaf(action, text)
        p.add_argument("schedule_id", metavar="ID", help="the schedule's id")
        if action == "remove":
            p.add_argument("--yes", "-y", action="store_true", help="do not ask")


def _state_names() -> str:
    return ", ".join(s.value for s in JobState)


def _handler(name: str, module: str = "_admin_commands") -> Callable[[argparse.Namespace], int]:
    """Run the command ``<module>.<name>`` (a module of this package) for
    the parsed ``args``."""

    def handle(args: argparse.Namespace) -> int:
        import importlib

        from . import _admin_commands

        fn = getattr(importlib.import_module(f".{module}", __package__), name)
        return _admin_commands.handle(fn, args)

    return handle


__all__ = ["add_commands"]
