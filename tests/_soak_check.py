"""The fault soak's invariant checker: what the producer was told, what the
handlers recorded, what the workers logged and what the store holds at the
end, held against the library's promises.

Inputs, each independent of the code under test where it can be:

* :class:`Expected` -- one per ``EnqueueResult`` the producer got;
* runs -- the handlers' own records (``tests/soak_app.py``: append-only
  files per process, so they survive kill -9 and Redis restarts), read by
  :func:`read_runs`;
* worker logs -- ``fired job=...`` (a trigger the store accepted) and, at
  debug level, ``succeeded job=... attempt=...`` (a success the store
  acknowledged), read by :func:`read_worker_logs`;
* the final store -- every job record of the soak's queues once the workers
  drained.

Invariants (:meth:`Report.violations`, each a list of offending job ids with
what is wrong):

* **lost**: every expected job is in the store, succeeded (after a run that
  ended ``ok``) or dead with a reason; every trigger a worker logged as fired
  has its job in the store.
* **stuck**: no job of any queue is scheduled, ready, leased or retry_wait.
* **early**: no run started before its due time: the ``run_at`` of the
  producer's ``EnqueueResult``, the one in the record it was leased with,
  and a trigger's fire time, less ``tolerance`` seconds.
* **double-fired triggers**: no trigger logged as fired twice, and no
  trigger job run twice on one lease (next rule).
* **unexplained duplicates**: each lease (attempt number: every new lease
  counts one) runs once. The same attempt may run again only after its run
  was called off at shutdown and ended (the worker gives the attempt back).
  Runs on different leases follow a lost lease unless the earlier one
  failed: each such duplicate's cause is named from the earlier lease's run
  (cut short by kill -9, cancelled on a lost lease, finished but not
  acknowledged, still running when the next began, or started only after
  the next lease had begun: its worker was paused between lease and run).
* **ran after acknowledged success**: no run with an attempt above the one
  whose success the store acknowledged.
* **unexpected outcome**: poison jobs end dead (an undecodable payload without
  ever running a handler); other jobs succeed, or are dead only once their
  attempts are used up (lost leases count attempts too).
* **attempts regressed**: the store's attempt count is never below the
  highest attempt a handler saw.
* **unknown runs**: no handler ran a job that nobody enqueued or fired.
"""

from __future__ import annotations

import collections
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from chronos_trio import Job, JobState
from chronos_trio.records import PENDING_STATES

#: A trigger's job id: ``sched:<schedule id>:<fire time in ms>``.
TRIGGER_ID = re.compile(r"^sched:(?P<schedule>.+):(?P<ms>\d+)$")

#: Job kinds meant to die, and how.
POISON_KINDS = frozenset({"poison", "poison_skip", "poison_payload"})


@attrs.frozen
class Expected:
    """A job the producer was told about (one ``EnqueueResult``)."""

    job_id: str
    label: str  # immediate, delayed, flaky, slow, slow_sync, poison, ...
    task: str  # the task kind it was enqueued under
    max_retries: int
    #: As the EnqueueResult said, None when the ID existed (``created``
    #: False: an earlier try whose reply was lost stored it). Then it is the
    #: record's due time at that moment, which may already be a later
    #: attempt's (the first ran and was retried): no bound for the first.
    run_at: float | None


@attrs.define
class Run:
    """One handler run, from its start line and (unless cut short) end line."""

    job: str
    attempt: int
    worker: str
    pid: int
    kind: str
    queue: str
    run_at: float
    start: float
    end: float | None = None
    outcome: str | None = None
    lease_lost: bool | None = None

    def describe(self) -> str:
        end = "no end (cut short)" if self.end is None else f"{self.outcome}@{self.end:.3f}"
        return f"attempt {self.attempt} pid {self.pid} {self.start:.3f}..{end}"


@attrs.frozen
class Fault:
    """A fault as injected: ``pids`` it hit (None: every worker)."""

    kind: str
    start: float
    end: float
    pids: frozenset[int] | None = None


@attrs.frozen
class WorkerLogs:
    fired: collections.Counter[str]
    acked: dict[str, int]  # job id -> attempt whose success the store acknowledged


def read_runs(directory: Path) -> tuple[dict[str, list[Run]], list[str]]:
    """Every run recorded under ``directory``, by job id in start order, and
    the lines that could not be read (a torn last line, say)."""
    runs: dict[str, list[Run]] = collections.defaultdict(list)
    bad: list[str] = []
    open_runs: dict[tuple[int, str, int], collections.deque[Run]] = collections.defaultdict(
        collections.deque
    )
    for path in sorted(directory.glob("runs-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                key = (int(rec["pid"]), str(rec["job"]), int(rec["attempt"]))
                if rec["ev"] == "start":
                    run = Run(
                        job=key[1],
                        attempt=key[2],
                        worker=str(rec["worker"]),
                        pid=key[0],
                        kind=str(rec["kind"]),
                        queue=str(rec["queue"]),
                        run_at=float(rec["run_at"]),
                        start=float(rec["t"]),
                    )
                    runs[run.job].append(run)
                    open_runs[key].append(run)
                elif rec["ev"] == "end":
                    run = open_runs[key].popleft()
                    run.end = float(rec["t"])
                    run.outcome = str(rec["outcome"])
                    run.lease_lost = bool(rec["lease_lost"])
                else:
                    bad.append(f"{path.name}: {line}")
            except (ValueError, KeyError, IndexError, TypeError):
                bad.append(f"{path.name}: {line}")
    for job_runs in runs.values():
        job_runs.sort(key=lambda r: r.start)
    return dict(runs), bad


def read_worker_logs(paths: Iterable[Path]) -> WorkerLogs:
    """Fired triggers and acknowledged successes from JSON-line worker logs
    (other lines, e.g. a traceback, are skipped)."""
    fired: collections.Counter[str] = collections.Counter()
    acked: dict[str, int] = {}
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "succeeded" and "job" in rec:
                job_id, attempt = str(rec["job"]), int(rec["attempt"])
                acked[job_id] = min(attempt, acked.get(job_id, attempt))
            elif rec.get("event") == "fired" and "job" in rec:
                fired[str(rec["job"])] += 1
    return WorkerLogs(fired, acked)


def fire_time(job_id: str) -> float | None:
    match = TRIGGER_ID.match(job_id)
    return int(match.group("ms")) / 1000 if match else None


@attrs.define
class Report:
    """The checker's findings; :meth:`violations` is what fails the soak."""

    by_kind: dict[str, collections.Counter[str]] = attrs.Factory(dict)
    runs: int = 0
    retries: int = 0
    duplicates: collections.Counter[str] = attrs.Factory(collections.Counter)
    duplicates_by_fault: collections.Counter[str] = attrs.Factory(collections.Counter)
    leases_lost_unrun: int = 0
    handler_errors: int = 0
    triggers_fired: int = 0
    triggers_ran: int = 0
    triggers_missed: int = 0  # between the first and the last fired (misfires skipped)
    bad_lines: list[str] = attrs.Factory(list)
    problems: dict[str, list[str]] = attrs.Factory(dict)

    def problem(self, invariant: str, detail: str) -> None:
        self.problems.setdefault(invariant, []).append(detail)

    def violations(self) -> dict[str, list[str]]:
        return {k: v for k, v in self.problems.items() if v}

    def count(self, invariant: str) -> int:
        return len(self.problems.get(invariant, []))

    def lines(self) -> list[str]:
        """The figures, for printing."""
        out = ["jobs by kind and outcome:"]
        for kind in sorted(self.by_kind):
            outcomes = self.by_kind[kind]
            total = sum(outcomes.values())
            parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            out.append(f"  {kind:<15} {total:>6}  ({parts})")
        out.append(
            f"handler runs: {self.runs} (retries after a failure or timeout: {self.retries}, "
            f"handler errors: {self.handler_errors})"
        )
        dup_total = sum(self.duplicates.values())
        out.append(f"duplicate runs: {dup_total}")
        for cause, n in self.duplicates.most_common():
            out.append(f"  {cause}: {n}")
        if self.duplicates_by_fault:
            out.append("duplicate runs by the fault that overlapped the earlier run:")
            for fault, n in self.duplicates_by_fault.most_common():
                out.append(f"  {fault}: {n}")
        out.append(
            f"leases lost before their handler ran (attempt numbers skipped): "
            f"{self.leases_lost_unrun}"
        )
        out.append(
            f"triggers fired: {self.triggers_fired}, trigger jobs run: {self.triggers_ran}, "
            f"missed (no leader in time, skipped by the misfire policy): {self.triggers_missed}"
        )
        for name in (
            "lost",
            "stuck",
            "early",
            "double-fired triggers",
            "unexplained duplicates",
            "ran after acknowledged success",
            "unexpected outcome",
            "attempts regressed",
            "unknown runs",
            "unclean stops",
        ):
            out.append(f"{name}: {self.count(name)}")
        if self.bad_lines:
            out.append(f"unreadable run-log lines: {len(self.bad_lines)}")
        return out


def check(
    *,
    expected: Mapping[str, Expected],
    final: Mapping[str, Job],
    runs: Mapping[str, Sequence[Run]],
    logs: WorkerLogs,
    timeouts: Mapping[str, float],
    faults: Sequence[Fault] = (),
    lease_duration: float = 0.0,
    tolerance: float = 0.01,
    bad_lines: Sequence[str] = (),
    trigger_interval: float = 1.0,
) -> Report:
    """Hold the soak's records against its invariants (see the module doc).

    ``final`` is every job record of the soak's queues after the drain;
    ``timeouts`` each task kind's timeout (to tell a timeout from a
    release); ``faults`` and ``lease_duration`` only name the fault behind
    each duplicate, and ``trigger_interval`` (the schedule's) only counts the
    triggers missed: figures, not invariants."""
    report = Report(bad_lines=list(bad_lines))
    _check_outcomes(report, expected, final, runs)
    _check_stuck(report, final)
    _check_triggers(report, final, runs, logs, trigger_interval)
    for job_id, job_runs in runs.items():
        report.runs += len(job_runs)
        want = expected.get(job_id)
        if want is None and fire_time(job_id) is None:
            report.problem("unknown runs", f"{job_id}: ran but nobody enqueued or fired it")
        _check_early(report, job_id, job_runs, want, tolerance)
        _check_sequence(report, job_id, job_runs, timeouts, faults, lease_duration)
        acked = logs.acked.get(job_id)
        if acked is not None:
            late = [r for r in job_runs if r.attempt > acked]
            if late:
                report.problem(
                    "ran after acknowledged success",
                    f"{job_id}: success of attempt {acked} acknowledged, then ran "
                    + "; ".join(r.describe() for r in late),
                )
        job = final.get(job_id)
        top = max(r.attempt for r in job_runs)
        if job is not None and job.attempts < top:
            report.problem(
                "attempts regressed",
                f"{job_id}: the store counts {job.attempts} attempts, a handler ran attempt {top}",
            )
    return report


def _check_outcomes(
    report: Report,
    expected: Mapping[str, Expected],
    final: Mapping[str, Job],
    runs: Mapping[str, Sequence[Run]],
) -> None:
    for job_id, want in expected.items():
        job = final.get(job_id)
        outcome = "missing" if job is None else str(job.state)
        report.by_kind.setdefault(want.label, collections.Counter())[outcome] += 1
        job_runs = runs.get(job_id, ())
        if job is None:
            report.problem("lost", f"{job_id} ({want.label}): no record in the store")
            continue
        if job.state in PENDING_STATES:
            continue  # reported as stuck
        if job.state is JobState.DEAD and not job.last_error:
            report.problem("lost", f"{job_id} ({want.label}): dead without a reason")
        if job.state is JobState.SUCCEEDED and not any(r.outcome == "ok" for r in job_runs):
            report.problem(
                "lost",
                f"{job_id} ({want.label}): succeeded, but no run of it ended ok: "
                + ("; ".join(r.describe() for r in job_runs) or "it never ran"),
            )
        if want.label in POISON_KINDS:
            if job.state is not JobState.DEAD:
                report.problem("unexpected outcome", f"{job_id} ({want.label}): {job.state}")
            elif want.label == "poison_payload" and (
                job_runs or "payload" not in job.last_error.lower()
            ):
                report.problem(
                    "unexpected outcome",
                    f"{job_id} (poison_payload): ran {len(job_runs)} time(s), "
                    f"error {job.last_error[:120]!r}",
                )
        elif job.state is JobState.DEAD and job.attempts < want.max_retries + 1:
            report.problem(
                "unexpected outcome",
                f"{job_id} ({want.label}): dead after {job.attempts} of "
                f"{want.max_retries + 1} attempts: {job.last_error[:200]!r}",
            )


def _check_stuck(report: Report, final: Mapping[str, Job]) -> None:
    for job_id, job in final.items():
        if job.state in PENDING_STATES:
            report.problem(
                "stuck",
                f"{job_id}: {job.state} (run_at {job.run_at:.3f}, attempts {job.attempts}, "
                f"lease owner {job.lease_owner or '-'})",
            )


def _check_triggers(
    report: Report,
    final: Mapping[str, Job],
    runs: Mapping[str, Sequence[Run]],
    logs: WorkerLogs,
    trigger_interval: float,
) -> None:
    report.triggers_fired = len(logs.fired)
    report.triggers_ran = sum(1 for job_id in runs if fire_time(job_id) is not None)
    times = sorted(t for t in map(fire_time, logs.fired) if t is not None)
    if times:
        report.triggers_missed = round((times[-1] - times[0]) / trigger_interval) + 1 - len(times)
    for job_id, n in logs.fired.items():
        if n > 1:
            report.problem("double-fired triggers", f"{job_id}: logged as fired {n} times")
        if job_id not in final:
            report.problem("lost", f"{job_id}: trigger fired, but its job is not in the store")
    for job_id, job in final.items():
        if fire_time(job_id) is not None:
            outcome = str(job.state)
            report.by_kind.setdefault("tick", collections.Counter())[outcome] += 1
            if job.state is JobState.DEAD:
                report.problem("unexpected outcome", f"{job_id} (tick): dead {job.last_error!r}")


def _check_early(
    report: Report, job_id: str, job_runs: Sequence[Run], want: Expected | None, tolerance: float
) -> None:
    due = want.run_at if want is not None else fire_time(job_id)
    for run in job_runs:
        limits = [run.run_at] + ([due] if due is not None else [])
        worst = max(limits)
        if run.start < worst - tolerance:
            report.problem(
                "early",
                f"{job_id}: attempt {run.attempt} started at {run.start:.3f}, "
                f"{worst - run.start:.3f}s before its due time {worst:.3f}",
            )


def _timed_out(run: Run, timeouts: Mapping[str, float]) -> bool:
    timeout = timeouts.get(run.kind)
    return (
        run.outcome == "cancelled"
        and not run.lease_lost
        and run.end is not None
        and timeout is not None
        and run.end - run.start >= timeout * 0.95
    )


def _called_off(run: Run, timeouts: Mapping[str, float]) -> bool:
    """Cancelled with its lease still held and before its timeout: a shutdown
    past the grace or a restarted executor; the worker gave the attempt back."""
    return run.outcome == "cancelled" and not run.lease_lost and not _timed_out(run, timeouts)


def _check_sequence(
    report: Report,
    job_id: str,
    job_runs: Sequence[Run],
    timeouts: Mapping[str, float],
    faults: Sequence[Fault],
    lease_duration: float,
) -> None:
    """Runs in lease order (attempt, then start): each lease runs once,
    unless a run was called off and its attempt given back."""
    trigger = fire_time(job_id) is not None
    report.handler_errors += sum(1 for r in job_runs if r.outcome == "error")
    ordered = sorted(job_runs, key=lambda r: (r.attempt, r.start))
    report.leases_lost_unrun += ordered[0].attempt - 1
    for prev, run in itertools.pairwise(ordered):
        if run.attempt == prev.attempt:
            if _called_off(prev, timeouts) and prev.end is not None and prev.end <= run.start:
                report.duplicates["called off at shutdown, attempt given back, run again"] += 1
            else:
                where = "double-fired triggers" if trigger else "unexplained duplicates"
                report.problem(
                    where,
                    f"{job_id}: {run.describe()} after {prev.describe()}: two runs on one lease",
                )
            continue
        report.leases_lost_unrun += run.attempt - prev.attempt - 1
        if run.start < prev.start:
            # The later lease began first: ``prev``'s worker started a lease
            # that had been lost meanwhile (it was paused between lease and run).
            cause = "started on a lease already lost (a later lease ran first)"
        elif prev.outcome in ("fail", "error") or _timed_out(prev, timeouts):
            report.retries += 1
            continue
        elif prev.end is None:
            cause = "cut short (worker killed mid-run), run again"
        elif prev.outcome == "cancelled" and prev.lease_lost:
            cause = "lease lost mid-run (handler cancelled), run again"
        elif prev.outcome == "cancelled":
            cause = "called off, then its lease expired, run again"
        elif prev.end > run.start:
            cause = "still running when run again (paused past its lease)"
        else:
            cause = "finished, success not acknowledged (lease lost first), run again"
        report.duplicates[cause] += 1
        report.duplicates_by_fault[_fault_behind(prev, run, faults, lease_duration)] += 1


def _fault_behind(prev: Run, run: Run, faults: Sequence[Fault], lease_duration: float) -> str:
    """The injected faults that hit ``prev``'s worker while it held the lease
    that was lost: from a lease before the earlier of the two starts to the
    later one."""
    since = min(prev.start, run.start) - lease_duration
    until = max(prev.start, run.start)
    hits = {
        f.kind
        for f in faults
        if (f.pids is None or prev.pid in f.pids) and f.start <= until and f.end >= since
    }
    return "+".join(sorted(hits)) if hits else "none found"
