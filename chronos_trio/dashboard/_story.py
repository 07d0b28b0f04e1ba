"""A job's whole story for its page: one timeline of what happened to it
(created, each attempt's start and end with its worker, outcome and error,
its progress and log lines, its finish) and its place in a workflow (the
workflow's ID, the step's path, the steps and groups that wait behind it).

Pure functions of what the store returned (the job, its attempt history,
its notes): no I/O, never raises on a damaged continuation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from ..records._attempts import Attempt, AttemptOutcome
from ..records._jobs import Job, JobState
from ..records._notes import JobNotes

#: How an attempt's end reads in the timeline, by outcome.
_ENDED = {
    AttemptOutcome.SUCCEEDED: "succeeded",
    AttemptOutcome.RETRIED: "failed; retried later",
    AttemptOutcome.DEAD: "failed for good (dead)",
    AttemptOutcome.DISCARDED: "failed for good (discarded)",
    AttemptOutcome.EXPIRED: "its lease expired (worker lost); taken back",
    AttemptOutcome.ABORTED: "aborted",
    AttemptOutcome.RELEASED: "handed back unfinished (not counted)",
    AttemptOutcome.DEFERRED: "deferred by a rate limit (not counted)",
    AttemptOutcome.UNCLAIMED: "sent back: its worker had no handler for the kind (not counted)",
}


@attrs.frozen
class StoryEvent:
    """One line of the timeline: when (store clock; None: not known, listed
    where it happened), what (a short title), ``detail`` (text, maybe
    several lines: an error), the attempt it belongs to (None: the job's),
    and ``tone`` (``ok``, ``bad``, ``info``, ``log``: its style)."""

    at: float | None
    what: str
    detail: str = ""
    attempt: int | None = None
    tone: str = "info"


def timeline(job: Job, attempts: Sequence[Attempt], notes: JobNotes | None) -> list[StoryEvent]:
    """The job's story, oldest first: its creation, each attempt's start and
    end (``attempts``: ``records._history.attempt_history``), its progress
    and log lines (``notes``), and where it stands now (due, running,
    finished). Events without a time keep their place among their
    attempt's."""
    events: list[tuple[float, int, StoryEvent]] = []
    order = 0

    def add(at: float | None, event: StoryEvent, after: float) -> None:
        nonlocal order
        order += 1
        events.append((at if at is not None else after, order, event))

    if job.created_at:
        add(job.created_at, StoryEvent(job.created_at, "enqueued", f"into queue {job.queue}"), 0.0)
    last = job.created_at or 0.0
    for a in attempts:
        who = f"on {a.worker}" if a.worker else "worker not known"
        if a.outcome is AttemptOutcome.RUNNING:
            started = a.started  # None: when its lease began is not kept
            detail = who
            if job.lease_expires_at is not None:
                detail += "; its lease is renewed while it runs"
            add(started, StoryEvent(started, f"attempt {a.number} running", detail, a.number), last)
            continue
        if a.started is not None:
            add(
                a.started, StoryEvent(a.started, f"attempt {a.number} started", who, a.number), last
            )
            last = a.started
        took = ""
        if a.started is not None and a.ended is not None:
            took = f" after {a.ended - a.started:.3g} s"
        tone = "ok" if a.outcome is AttemptOutcome.SUCCEEDED else "bad"
        if a.outcome in (AttemptOutcome.RELEASED, AttemptOutcome.DEFERRED):
            tone = "info"
        title = f"attempt {a.number} {_ENDED.get(a.outcome, a.outcome.value)}{took}"
        if a.started is None and a.worker:  # no start line names its worker
            title += f" (on {a.worker})"
        add(a.ended, StoryEvent(a.ended, title, a.error, a.number, tone), last)
        last = a.ended if a.ended is not None else last
    if notes is not None:
        for line in notes.lines:
            add(line.at, StoryEvent(line.at, "log", line.text, line.attempt, "log"), last)
        p = notes.progress
        if p is not None:
            text = f"{p.fraction * 100:.0f}%" + (f" {p.message}" if p.message else "")
            add(p.at, StoryEvent(p.at, "progress", text, p.attempt, "log"), last)
    if job.state in (JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT):
        what = {
            JobState.SCHEDULED: "due",
            JobState.READY: "ready: waiting for a worker since",
            JobState.RETRY_WAIT: "retry due",
        }[job.state]
        add(job.run_at, StoryEvent(job.run_at, what, "", None, "info"), last)
    events.sort(key=lambda e: (e[0], e[1]))
    return [e for _, _, e in events]


@attrs.frozen
class Step:
    """A step of the workflow that waits behind this job: its job ID (None
    for a group, which is no job) and how it reads."""

    job_id: str | None
    text: str


@attrs.frozen
class Position:
    """Where a job stands in its workflow: the workflow's ID (None: not
    known), the step's path in it (``0.1``: the second member of the group
    that is the first link), the steps that wait behind it, in order, the
    groups it belongs to (``member 0 of group W.1 (2 in all)``), and
    whether it is the workflow's last step (no continuation)."""

    workflow_id: str | None
    path: str | None
    behind: tuple[Step, ...]
    groups: tuple[str, ...]
    last: bool = False
    damaged: bool = False
    #: The workflow ID was read off group IDs alone (no later step's job ID
    #: in the continuation): a group that is a chain's last link reads as
    #: a workflow of its own, so the ID may name that group instead.
    inferred: bool = False


_STEP_INDEX = re.compile(r"^(.+)\.(\d+)$")


def position(job: Job, *, first_step_exists: bool = False) -> Position | None:
    """``job``'s place in its workflow, read from its continuation
    (``job.then``); None when it is no workflow's job. A job without a
    continuation whose ID ends in ``.<n>`` is the last step of workflow
    ``<prefix>`` only if ``first_step_exists`` (the caller found the job
    ``<prefix>.0``); otherwise it is treated as a plain job."""
    if not job.then:
        m = _STEP_INDEX.match(job.id)
        if m and first_step_exists:
            return Position(m.group(1), m.group(2), (), (), last=True)
        return None
    try:
        after = json.loads(job.then)
        behind: list[Step] = []
        groups: list[str] = []
        ids: list[str] = []
        _walk(after, behind, groups, ids)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return Position(None, None, (), (), damaged=True)
    workflow = _common_prefix([job.id, *ids])
    path = job.id[len(workflow) + 1 :] if workflow and job.id != workflow else None
    inferred = all(step.job_id is None for step in behind)
    return Position(workflow or None, path, tuple(behind), tuple(groups), inferred=inferred)


def first_step_id(job: Job) -> str | None:
    """The ID of the first step of the workflow ``job`` would end, when it
    has no continuation and its ID looks like a step's (``W.<n>``, n > 0):
    ``W.0``, for the caller to look up (see :func:`position`)."""
    if job.then:
        return None
    m = _STEP_INDEX.match(job.id)
    return f"{m.group(1)}.0" if m and m.group(2) != "0" else None


def _walk(after: Any, behind: list[Step], groups: list[str], ids: list[str]) -> None:
    while after is not None:
        if "seq" in after:
            for node in after["seq"]:
                _node(node, behind, ids)
        elif "dag" in after:  # a graph's step: the steps after it, in the order added
            dag = after["dag"]
            graph = str(dag["id"])
            ids.append(graph)
            here = str(after.get("done", after.get("run")))
            groups.append(f"step {here} of graph {graph}")
            for step in dag["steps"]:
                if "node" in step and str(step["name"]) != here:
                    inputs = [str(n) for n in step["after"]]
                    if len(inputs) > 1:
                        behind.append(
                            Step(None, f"once {', '.join(inputs)} are in (graph {graph}):")
                        )
                    _node(step["node"], behind, ids)
        else:
            group = str(after["grp"])
            ids.append(group)
            groups.append(f"member {int(after['i'])} of group {group} ({int(after['n'])} in all)")
            behind.append(Step(None, f"group {group} completes (all {int(after['n'])} members)"))
        after = after.get("after")


def _node(node: dict[str, Any], behind: list[Step], ids: list[str]) -> None:
    if "job" in node:
        job_id = str(node["job"]["id"])
        ids.append(job_id)
        behind.append(Step(job_id, f"{node['job']['kind']} ({job_id})"))
    elif "chain" in node:
        for link in node["chain"]:
            _node(link, behind, ids)
    elif "dag" in node:
        graph = str(node["dag"]["id"])
        ids.append(graph)
        behind.append(Step(None, f"graph {graph} of {len(node['dag']['steps'])} steps:"))
        for step in node["dag"]["steps"]:
            _node(step["node"], behind, ids)
    else:
        group = str(node["id"])
        ids.append(group)
        behind.append(Step(None, f"group {group} of {len(node['group'])}, all at once:"))
        for member in node["group"]:
            _node(member, behind, ids)


def _common_prefix(ids: Sequence[str]) -> str:
    """The longest dot-separated prefix every ID shares (step IDs are
    ``<workflow>.<path>``; a workflow ID may hold dots itself)."""
    split = [i.split(".") for i in ids]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


__all__ = ["Position", "Step", "StoryEvent", "first_step_id", "position", "timeline"]
