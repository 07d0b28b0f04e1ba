"""Rendering for the admin commands: aligned tables and JSON-ready dicts."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from ..app._inspector import (
    JobPage,
    LimitInfo,
    QueueInfo,
    next_run_at,
    payload_view,
    result_view,
)
from ..app._inspector import duration_text as duration
from ..app._inspector import relative_text as relative
from ..records._attempts import Attempt
from ..records._control import JobControl
from ..records._history import attempt_history
from ..records._jobs import FINISHED_STATES, Job, JobState
from ..records._placement import Placement
from ..records._unique import unique_key_of_slot
from ..records._workers import WorkerInfo
from ..records._workflow import WORKFLOW_KEEP, describe
from ..store import CheckReport, Finding, Problem, QueueTopology, Repair

#: Column order of job states in tables.
STATES = tuple(JobState)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    return _render(list(headers), [[_cell(v) for v in row] for row in rows])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _render(headers: list[str], cells: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    right = [
        any(_is_number(row[i]) for row in cells)
        and all(_is_number(row[i]) or row[i] == "-" for row in cells)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if right[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def _is_number(text: str) -> bool:
    return text.lstrip("-").isdigit()


def iso(ts: float | None) -> str | None:
    """Store-clock epoch seconds as ISO-8601 UTC with milliseconds."""
    if ts is None:
        return None
    when = dt.datetime.fromtimestamp(ts, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def when(ts: float | None, now: float) -> str:
    """``2025-01-31T12:00:00.000Z (in 4.2s)`` or ``-``."""
    return "-" if ts is None else f"{iso(ts)} ({relative(ts, now)})"


def first_line(text: str, width: int = 60) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


#: How long a workflow job is kept after it succeeds, said where it shows.
_KEPT = f" (a workflow job: kept {WORKFLOW_KEEP / 3600:g} h after it succeeds)"


def _then_json(text: str | None) -> Any:
    """A continuation as JSON for ``--json`` (its text when it is not JSON)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# -- JSON shapes ------------------------------------------------------------------
#: What output shows of a job's placement: its topology ``(version,
#: partition)``, or None (see ``Inspector.locate``).
Locate = Callable[[Placement | None], tuple[int, int] | None]


def no_location(placement: Placement | None) -> None:
    """:data:`Locate` of a store without topology: nothing to show."""
    return None


def job_json(job: Job, locate: Locate = no_location) -> dict[str, Any]:
    where = locate(job.placement)
    return {
        "id": job.id,
        "queue": job.queue,
        "kind": job.kind,
        "state": job.state.value,
        "attempts": job.attempts,
        "max_retries": job.max_retries,
        "retries_left": job.retries_left,
        "timeout": job.timeout,
        # where it lives in the queue's topology (None: the store has none)
        "queue_version": None if where is None else where[0],
        "partition": None if where is None else where[1],
        "created_at": iso(job.created_at or None),
        "run_at": iso(job.run_at),
        "next_run_at": iso(next_run_at(job)),
        "lease_owner": job.lease_owner or None,
        "lease_expires_at": iso(job.lease_expires_at),
        "finished_at": iso(job.finished_at),
        "last_error": job.last_error or None,
        "payload": payload_view(job),
        "headers": dict(job.headers),
        # a workflow job's continuation (what waits behind it), as stored
        "then": _then_json(job.then),
        # a succeeded job's stored result (None: none kept), and until when
        "result": result_view(job),
        "result_until": iso(job.result_until),
        # None for a sound record; else why the stored record could not be
        # read as it is (the fields it names show defaults)
        "damage": job.damage or None,
        # priority, expiry and limits (None: none)
        "control": control_json(job.control),
        # when a worker without a handler for its kind first sent it back
        # (None: never, or a run since; see unknown_kind_grace)
        "unclaimed_since": iso(job.unclaimed_since),
        # every attempt it still knows of, oldest first (records._attempts)
        "attempts_history": [attempt_json(a) for a in attempt_history(job)],
    }


def queue_json(info: QueueInfo) -> dict[str, Any]:
    return {
        "queue": info.name,
        "paused": info.paused,
        "counts": {state.value: info.counts.get(state, 0) for state in STATES},
        "total": info.total,
        "versions": [
            {
                "version": v.version,
                "state": v.state.value,
                "partitions": v.partitions,
                "jobs": v.jobs,
                "by_partition": {str(p): n for p, n in sorted(v.by_partition.items())},
            }
            for v in info.versions
        ],
    }


def topology_json(topology: QueueTopology) -> dict[str, Any]:
    return {
        "queue": topology.queue,
        "versions": [
            {"version": v.version, "partitions": v.partitions, "state": v.state.value}
            for v in topology.versions
        ],
    }


def page_json(page: JobPage, locate: Locate = no_location) -> dict[str, Any]:
    return {
        "queue": page.queue,
        "state": page.state.value,
        "offset": page.offset,
        "limit": page.limit,
        "total": page.total,
        "next_offset": page.next_offset,
        "jobs": [job_json(job, locate) for job in page.jobs],
    }


def print_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


# -- tables -------------------------------------------------------------------------
def queues_table(infos: Sequence[QueueInfo]) -> str:
    if not infos:
        return "no queues yet"
    counts = table(
        ["QUEUE", "STATUS", *(s.value.upper() for s in STATES), "TOTAL"],
        [
            [
                i.name,
                "paused" if i.paused else "active",
                *(i.counts.get(s, 0) for s in STATES),
                i.total,
            ]
            for i in infos
        ],
    )
    parts = table(
        ["QUEUE", "VERSION", "ROUTING", "PARTITIONS", "JOBS", "JOBS BY PARTITION"],
        [
            [
                i.name,
                v.version,
                v.state.value,
                v.partitions,
                v.jobs,
                " ".join(f"p{p}={n}" for p, n in sorted(v.by_partition.items())),
            ]
            for i in infos
            for v in i.versions
        ],
    )
    return f"{counts}\n\n{parts}"


def jobs_table(page: JobPage, now: float) -> str:
    time_header = {
        JobState.LEASED: "LEASE EXPIRES",
        JobState.SUCCEEDED: "FINISHED",
        JobState.DEAD: "FINISHED",
        JobState.ABORTED: "FINISHED",
    }.get(page.state, "DUE")

    def time_of(job: Job) -> float | None:
        if page.state is JobState.LEASED:
            return job.lease_expires_at
        if page.state in FINISHED_STATES:
            return job.finished_at
        return job.run_at

    rows = [
        [
            job.id,
            job.kind,
            job.attempts,
            relative(time_of(job), now),
            job.lease_owner or None,
            first_line(job.last_error, 60) or None,
        ]
        for job in page.jobs
    ]
    header = ["ID", "KIND", "ATTEMPTS", time_header, "LEASE OWNER", "LAST ERROR"]
    if not rows:
        body = f"no {page.state.value} jobs in queue {page.queue!r}"
        if page.offset and page.total:
            body += f" at offset {page.offset}"
    else:
        body = table(header, rows)
    first = page.offset + 1 if page.jobs else page.offset
    footer = (
        f"{page.state.value} jobs {first}-{page.offset + len(page.jobs)} of {page.total} "
        f"in queue {page.queue!r}"
    )
    if page.next_offset is not None:
        footer += f" (next page: --offset {page.next_offset})"
    return f"{body}\n{footer}"


#: What the "unclaimed since" line of a job means.
_UNCLAIMED = " (workers without a handler for its kind sent it back since then)"


def queue_line(job: Job, locate: Locate) -> str:
    """A job's queue, with its topology version and partition when the
    store has them."""
    where = locate(job.placement)
    return job.queue if where is None else f"{job.queue} (version {where[0]}, partition {where[1]})"


def job_details(job: Job, now: float, locate: Locate = no_location) -> str:
    payload = json.dumps(payload_view(job), ensure_ascii=False)
    lease = "-"
    if job.state is JobState.LEASED:
        lease = f"held by {job.lease_owner or '?'}, expires {when(job.lease_expires_at, now)}"
    rows: list[tuple[str, str]] = [
        ("id", job.id),
        ("queue", queue_line(job, locate)),
        ("kind", job.kind),
        ("state", job.state.value),
        (
            "attempts",
            f"{job.attempts} of {job.max_retries + 1} (retries left: {job.retries_left})",
        ),
        ("timeout", f"{job.timeout:g}s"),
        ("created", when(job.created_at or None, now)),
        ("run at", when(job.run_at, now)),
        ("next run", when(next_run_at(job), now)),
        ("lease", lease),
        ("finished", when(job.finished_at, now)),
        ("payload", payload),
        ("headers", json.dumps(dict(job.headers), ensure_ascii=False) if job.headers else "-"),
        ("result", _result_line(job, now)),
        ("then", describe(job.then) + (_KEPT if job.then else "")),
        ("control", control_line(job.control, now)),
    ]
    if job.unclaimed_since is not None:
        rows.append(("unclaimed since", f"{when(job.unclaimed_since, now)}{_UNCLAIMED}"))
    width = max(len(k) for k, _ in [*rows, ("last error", "")]) + 2
    lines = [f"{key:<{width}}{value}" for key, value in rows]
    error = job.last_error.strip()
    if error:
        err_lines = error.splitlines()
        lines.append(f"{'last error':<{width}}{err_lines[0]}")
        lines.extend(" " * width + line for line in err_lines[1:])
    else:
        lines.append(f"{'last error':<{width}}-")
    if job.damage:
        # one line: the store's description of what it could not read
        lines.append(f"{'damage':<{width}}{' '.join(job.damage.split())}")
    history = [attempt_line(a, now) for a in attempt_history(job)]
    for n, line in enumerate(history or ["-"]):
        lines.append(f"{'history' if n == 0 else '':<{width}}{line}")
    return "\n".join(lines)


def attempt_line(attempt: Attempt, now: float) -> str:
    """One attempt on one line: number, outcome, worker, when it ended (or
    started), how long it took when both ends are known, its error's first line."""
    parts = [f"#{attempt.number}", f"{attempt.outcome.value:<9}", attempt.worker or "?"]
    at = attempt.ended if attempt.ended is not None else attempt.started
    if at is not None:
        parts.append(when(at, now))
    if attempt.started is not None and attempt.ended is not None:
        parts.append(f"took {duration(attempt.ended - attempt.started)}")
    if attempt.error:
        parts.append(first_line(attempt.error))
    return "  ".join(parts)


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "outcome": attempt.outcome.value,
        "worker": attempt.worker or None,
        "started": iso(attempt.started),
        "ended": iso(attempt.ended),
        "error": attempt.error or None,
    }


def control_line(control: JobControl | None, now: float) -> str:
    """A job's priority, expiry and limits on one line (``-``: none)."""
    if control is None:
        return "-"
    parts = []
    if control.priority:
        parts.append(f"priority {control.priority}")
    if control.expires_at is not None:
        parts.append(f"expires {when(control.expires_at, now)}")
    parts += [
        f"rate {count}/{per:g}s burst {burst} key {key!r}"
        for key, count, per, burst in control.rates
    ]
    for key, limit in control.caps:
        unique = unique_key_of_slot(key)
        if unique is None:
            parts.append(f"concurrency {limit} key {key!r}")
        else:
            parts.append(f"one run at a time (unique key {unique!r})")
    return "; ".join(parts) or "-"


def control_json(control: JobControl | None) -> dict[str, Any] | None:
    if control is None:
        return None
    return {
        "priority": control.priority,
        "expires_at": iso(control.expires_at),
        "rate_limits": [
            {"key": key, "count": count, "per": per, "burst": burst}
            for key, count, per, burst in control.rates
        ],
        "concurrency_limits": [{"key": key, "limit": limit} for key, limit in control.caps],
    }


def _result_line(job: Job, now: float) -> str:
    if job.result is None:
        return "-"
    shown = json.dumps(result_view(job), ensure_ascii=False)
    if job.result_until is not None and job.result_until <= now:
        return f"{shown} (expired {relative(job.result_until, now)})"
    return f"{shown} (kept until {when(job.result_until, now)})"


def topology_table(topology: QueueTopology) -> str:
    return table(
        ["QUEUE", "VERSION", "PARTITIONS", "ROUTING"],
        [[topology.queue, v.version, v.partitions, v.state.value] for v in topology.versions],
    )


def limit_json(row: LimitInfo) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "key": row.key,
        "kind": row.kind,
        "in_use": row.in_use,
        "booked_until": iso(row.booked_until),
        "declared": row.declared or None,
    }


def limits_table(rows: Sequence[LimitInfo], now: float) -> str:
    if not rows:
        return "no rate or concurrency limits"
    return table(
        ["QUEUE", "KIND", "KEY", "LIMIT", "IN USE", "PERMITS BOOKED"],
        [
            [
                r.queue,
                r.kind,
                r.key,
                r.declared or None,
                r.in_use if r.kind == "concurrency" else None,
                None
                if r.kind != "rate"
                else ("none" if r.booked_until is None or r.booked_until <= now
                      else "until " + relative(r.booked_until, now)),
            ]
            for r in rows
        ],
    )  # fmt: skip


# -- workers ---------------------------------------------------------------------------
def worker_json(w: WorkerInfo) -> dict[str, Any]:
    """The fields of :class:`~chronos_trio.WorkerInfo` as they are (times as
    epoch seconds on the store's clock; ``kinds`` null when the worker does
    not report them)."""
    return {
        "worker_id": w.worker_id,
        "host": w.host,
        "pid": w.pid,
        "queues": list(w.queues),
        "concurrency": w.concurrency,
        "started_at": w.started_at,
        "last_beat": w.last_beat,
        "running": w.running,
        "running_job_ids": list(w.running_job_ids),
        "kinds": None if w.kinds is None else list(w.kinds),
    }


def workers_table(rows: Sequence[WorkerInfo], now: float) -> str:
    if not rows:
        return "no live workers"
    return table(
        ["WORKER", "HOST", "PID", "QUEUES", "CONCURRENCY", "RUNNING", "UP", "LAST BEAT", "JOBS"],
        [
            [
                w.worker_id,
                w.host,
                w.pid,
                ",".join(w.queues),
                w.concurrency,
                w.running,
                duration(now - w.started_at),
                relative(w.last_beat, now),
                _job_ids(w),
            ]
            for w in rows
        ],
    )


def _job_ids(w: WorkerInfo, shown: int = 3) -> str | None:
    """The first running job IDs, and how many more run."""
    if not w.running:
        return None
    ids = list(w.running_job_ids[:shown])
    more = w.running - len(ids)
    return ",".join(ids) + (f" (+{more})" if more > 0 else "")


# -- the store checker ------------------------------------------------------------------
def finding_json(f: Finding, locate: Locate = no_location) -> dict[str, Any]:
    where = locate(f.placement)
    return {
        "problem": f.problem.value,
        "job_id": f.job_id,
        "queue": f.queue,
        "queue_version": None if where is None else where[0],
        "partition": None if where is None else where[1],
        "state": f.state or None,
        "indexes": list(f.indexes),
        "record_format": f.record_format,
        "detail": f.detail,
        "repair": f.repair.value,
        "repair_detail": f.repair_detail or None,
    }


def check_json(report: CheckReport, locate: Locate = no_location) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "repair": report.repair,
        "queues": list(report.queues),
        "checked_at": iso(report.now),
        "lease_grace": report.lease_grace,
        "partitions": report.partitions,
        "records": report.records,
        "index_entries": report.index_entries,
        "skipped_keys": report.skipped_keys,
        "problems": len(report.problems),
        "unresolved": len(report.unresolved),
        "findings": [finding_json(f, locate) for f in report.findings],
    }


def check_table(report: CheckReport, locate: Locate = no_location) -> str:
    """The findings (if any), then what was walked and what it adds up to."""
    header = ["PROBLEM", "QUEUE", "VERSION", "PARTITION", "JOB", "STATE", "INDEXES", "DETAIL"]
    if report.repair:
        header.append("REPAIR")
    rows = []
    for f in report.findings:
        where = locate(f.placement) or (None, None)
        row: list[object] = [
            f.problem.value,
            f.queue,
            *where,
            f.job_id,
            f.state or None,
            ",".join(f.indexes) or None,
            first_line(f.detail, 70),
        ]
        if report.repair:
            done = f"{f.repair.value}: {f.repair_detail}" if f.repair_detail else f.repair.value
            row.append(first_line(done, 70) if f.repair is not Repair.NONE else None)
        rows.append(row)
    names = ", ".join(repr(q) for q in report.queues) or "none"
    lines = [table(header, rows), ""] if rows else []
    lines.append(
        f"checked queues {names}: {report.partitions} partition(s), {report.records} "
        f"record(s), {report.index_entries} index entries"
    )
    problems, unresolved = len(report.problems), len(report.unresolved)
    if not problems:
        lines.append("no problems found")
    elif not report.repair:
        lines.append(f"{problems} problem(s) found: --repair fixes them")
    else:
        fixed = problems - unresolved
        line = f"{problems} problem(s) found, {fixed} repaired"
        if unresolved:
            line += f", {unresolved} left alone (the job changed meanwhile: check again)"
        lines.append(line)
    newer = sum(1 for f in report.findings if f.problem is Problem.NEWER_FORMAT)
    if newer:
        lines.append(f"{newer} record(s) of a newer format left alone, for a newer version")
    held = sum(1 for f in report.findings if f.problem is Problem.QUARANTINED)
    if held:
        lines.append(
            f"{held} quarantined index entr{'y' if held == 1 else 'ies'} (already set aside)"
        )
    if report.skipped_keys:
        lines.append(f"{report.skipped_keys} job key(s) outside the checked partitions left alone")
    return "\n".join(lines)


__all__ = [
    "check_json",
    "check_table",
    "finding_json",
    "job_details",
    "job_json",
    "jobs_table",
    "limit_json",
    "limits_table",
    "page_json",
    "print_json",
    "queue_json",
    "queues_table",
    "table",
    "topology_json",
    "topology_table",
    "worker_json",
    "workers_table",
]
