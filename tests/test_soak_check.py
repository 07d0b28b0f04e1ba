"""The soak's invariant checker on made-up records: a clean history passes with
its duplicates classified, and each broken invariant is reported with the
offending job id. (The soak itself cannot show that the checker would catch
anything; these can.)"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from chronos_trio import Job, JobState
from tests._soak_check import (
    Expected,
    Fault,
    Report,
    Run,
    WorkerLogs,
    check,
    read_runs,
    read_worker_logs,
)

T0 = 1_000_000.0
TIMEOUTS = {"soak.work": 10.0, "soak.poison": 10.0, "soak.tick": 10.0}
TICK = "sched:soak.tick:1000005000"  # fires at T0 + 5


def run(job: str, attempt: int, start: float, end: float | None, outcome: str | None = "ok",
        *, lease_lost: bool = False, pid: int = 1, run_at: float = T0, kind: str = "soak.work"
        ) -> Run:  # fmt: skip
    return Run(job, attempt, f"h:{pid}:0", pid, kind, "default", run_at, T0 + start,
               None if end is None else T0 + end, outcome, lease_lost)  # fmt: skip


def expected(job: str, label: str = "immediate", *, run_at: float = T0, retries: int = 12
             ) -> Expected:  # fmt: skip
    kind = (
        "soak.poison" if label.startswith("poison") and label != "poison_payload" else "soak.work"
    )
    return Expected(job, label, kind, retries, run_at)


def stored(job: str, state: JobState = JobState.SUCCEEDED, *, attempts: int = 1,
           error: str = "", queue: str = "default") -> Job:  # fmt: skip
    return Job(id=job, queue=queue, kind="soak.work", payload=b"{}", run_at=T0,
               state=state, attempts=attempts, last_error=error)  # fmt: skip


def checked(
    exp: list[Expected],
    final: list[Job],
    runs: list[Run],
    *,
    fired: dict[str, int] | None = None,
    acked: dict[str, int] | None = None,
    faults: list[Fault] | None = None,
) -> Report:
    by_job: dict[str, list[Run]] = collections.defaultdict(list)
    for r in sorted(runs, key=lambda r: r.start):
        by_job[r.job].append(r)
    return check(
        expected={e.job_id: e for e in exp},
        final={j.id: j for j in final},
        runs=by_job,
        logs=WorkerLogs(collections.Counter(fired or {}), acked or {}),
        timeouts=TIMEOUTS,
        faults=faults or [],
        lease_duration=3.0,
    )


def test_a_clean_history_passes_and_names_each_duplicate_cause() -> None:
    exp = [
        expected("retried"),
        expected("killed"),
        expected("unacked"),
        expected("overlap"),
        expected("released"),
        expected("cancelled"),
        expected("stale"),
        expected("p", "poison", retries=2),
        expected("pp", "poison_payload"),
        expected("late", "delayed", run_at=T0 + 50),
    ]
    final = [
        stored("retried", attempts=2),
        stored("killed", attempts=2),
        stored("unacked", attempts=3),
        stored("overlap", attempts=2),
        stored("released", attempts=1),
        stored("cancelled", attempts=2),
        stored("stale", attempts=2),
        stored("p", JobState.DEAD, attempts=3, error="PlannedFailure: poison"),
        stored("pp", JobState.DEAD, error="PayloadError: payload does not decode"),
        stored("late"),
        stored(TICK, queue="ticks"),
    ]
    runs = [
        run("retried", 1, 0, 0.1, "fail"),
        run("retried", 2, 1, 1.1),
        run("killed", 1, 0, None, None, pid=7),
        run("killed", 2, 5, 5.1, pid=8),
        run("unacked", 1, 0, 0.1, pid=7),
        run("unacked", 3, 5, 5.1, pid=8),  # attempt 2 was leased and lost before it ran
        run("overlap", 1, 0, 9.0, pid=7),
        run("overlap", 2, 5, 5.1, pid=8),
        run("released", 1, 0, 0.5, "cancelled"),
        run("released", 1, 2, 2.1),
        run("cancelled", 1, 0, 0.5, "cancelled", lease_lost=True),
        run("cancelled", 2, 4, 4.1),
        run("stale", 2, 4, 4.1, pid=8),
        run("stale", 1, 6, 6.1, pid=7),  # leased first, paused, started after attempt 2
        run("p", 1, 0, 0.1, "fail", kind="soak.poison"),
        run("p", 2, 1, 1.1, "fail", kind="soak.poison"),
        run("p", 3, 2, 2.1, "fail", kind="soak.poison"),
        run("late", 1, 50, 50.1, run_at=T0 + 50),
        run(TICK, 1, 5.001, 5.1, run_at=T0 + 5, kind="soak.tick"),
    ]
    faults = [Fault("kill -9 worker", T0 + 1, T0 + 1, frozenset({7}))]
    report = checked(exp, final, runs, fired={TICK: 1}, acked={"retried": 2}, faults=faults)
    assert report.violations() == {}
    assert report.duplicates == {
        "cut short (worker killed mid-run), run again": 1,
        "finished, success not acknowledged (lease lost first), run again": 1,
        "still running when run again (paused past its lease)": 1,
        "called off at shutdown, attempt given back, run again": 1,
        "lease lost mid-run (handler cancelled), run again": 1,
        "started on a lease already lost (a later lease ran first)": 1,
    }
    assert report.duplicates_by_fault == {"kill -9 worker": 4, "none found": 1}
    assert report.retries == 3 and report.leases_lost_unrun == 1
    assert report.by_kind["poison"] == {"dead": 1} and report.by_kind["tick"] == {"succeeded": 1}
    assert report.triggers_fired == report.triggers_ran == 1
    text = "\n".join(report.lines())
    assert "lost: 0" in text and "early: 0" in text and "double-fired triggers: 0" in text


def test_lost_jobs_are_named() -> None:
    report = checked(
        [expected("gone"), expected("no-reason"), expected("phantom"), expected("ok")],
        [
            stored("no-reason", JobState.DEAD, attempts=13),
            stored("phantom"),
            stored("ok"),
        ],
        [run("phantom", 1, 0, None, None), run("ok", 1, 0, 0.1)],
        fired={TICK: 1},
    )
    lost = report.violations()["lost"]
    assert [item.split(" ")[0].rstrip(":") for item in lost] == [
        "gone",
        "no-reason",
        "phantom",
        TICK,
    ]
    assert "succeeded, but no run of it ended ok" in lost[2]


def test_stuck_early_and_unknown_runs() -> None:
    report = checked(
        [expected("waiting"), expected("early", run_at=T0 + 10), expected("close", run_at=T0 + 10)],
        [stored("waiting", JobState.READY), stored("early"), stored("close"), stored("stray")],
        [
            run("early", 1, 9.5, 9.6, run_at=T0 + 10),
            run("close", 1, 9.995, 10.1, run_at=T0 + 9),  # within the 10 ms tolerance
            run("stray", 1, 0, 0.1),
        ],
    )
    v = report.violations()
    assert [x.split(":")[0] for x in v["stuck"]] == ["waiting"]
    assert [x.split(":")[0] for x in v["early"]] == ["early"]
    assert "0.500s before its due time" in v["early"][0]
    assert [x.split(":")[0] for x in v["unknown runs"]] == ["stray"]


def test_a_trigger_job_run_early_or_twice_is_caught() -> None:
    report = checked(
        [],
        [stored(TICK, queue="ticks", attempts=1)],
        [
            run(TICK, 1, 4.0, 4.1, run_at=T0 + 4, kind="soak.tick"),  # before its fire time
            run(TICK, 1, 6.0, 6.1, run_at=T0 + 5, kind="soak.tick"),  # same attempt again
        ],
        fired={TICK: 2},
    )
    v = report.violations()
    assert len(v["double-fired triggers"]) == 2  # logged twice, and run twice on one lease
    assert all(x.startswith(TICK) for x in v["double-fired triggers"])
    assert [x.split(": attempt")[0] for x in v["early"]] == [TICK]


def test_unexplained_duplicates_and_regressions() -> None:
    report = checked(
        [expected("twice"), expected("backwards"), expected("acked"), expected("regressed")],
        [
            stored("twice"),
            stored("backwards", attempts=3),
            stored("acked", attempts=2),
            stored("regressed", attempts=1),
        ],
        [
            run("twice", 1, 0, 0.1),
            run("twice", 1, 1, 1.1),  # same lease, not called off: no lease was lost
            run("backwards", 1, 0, None, None),
            run("backwards", 1, 5, 5.1),  # a kill -9 never gives the attempt back
            run("acked", 1, 0, 0.1),
            run("acked", 2, 5, 5.1),
            run("regressed", 1, 0, None, None),
            run("regressed", 2, 5, 5.1),
        ],
        acked={"acked": 1},
    )
    v = report.violations()
    assert [x.split(":")[0] for x in v["unexplained duplicates"]] == ["twice", "backwards"]
    assert [x.split(":")[0] for x in v["ran after acknowledged success"]] == ["acked"]
    assert [x.split(":")[0] for x in v["attempts regressed"]] == ["regressed"]


def test_unexpected_outcomes() -> None:
    report = checked(
        [
            expected("p", "poison", retries=2),
            expected("pp", "poison_payload"),
            expected("died"),
            expected("exhausted"),
        ],
        [
            stored("p"),
            stored("pp", JobState.DEAD, error="PayloadError: bad payload"),
            stored("died", JobState.DEAD, attempts=2, error="boom"),
            stored("exhausted", JobState.DEAD, attempts=13, error="lease expired 13 times"),
        ],
        [run("p", 1, 0, 0.1, kind="soak.poison"), run("pp", 1, 0, 0.1)],
    )
    v = report.violations()
    assert [x.split(" ")[0] for x in v["unexpected outcome"]] == ["p", "pp", "died"]
    assert "exhausted" not in str(v)
    assert set(v) == {"unexpected outcome"}  # "exhausted" used up its attempts: explained


def test_run_and_worker_logs_are_read_from_files(tmp_path: Path) -> None:
    lines = [
        {"ev": "start", "job": "a", "attempt": 1, "worker": "h:1:0", "pid": 1, "kind": "k",
         "queue": "q", "run_at": T0, "t": T0 + 1},
        {"ev": "start", "job": "b", "attempt": 1, "worker": "h:1:0", "pid": 1, "kind": "k",
         "queue": "q", "run_at": T0, "t": T0 + 2},
        {"ev": "end", "job": "a", "attempt": 1, "worker": "h:1:0", "pid": 1, "t": T0 + 3,
         "outcome": "ok", "lease_lost": False},
    ]  # fmt: skip
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"ev": "end", "job": "b", "att'
    (tmp_path / "runs-1.jsonl").write_text(text)
    runs, bad = read_runs(tmp_path)
    assert runs["a"][0].end == T0 + 3 and runs["a"][0].outcome == "ok"
    assert runs["b"][0].end is None  # the torn line is b's end: b counts as cut short
    assert len(bad) == 1 and "runs-1.jsonl" in bad[0]
    log = tmp_path / "w.log"
    log.write_text(
        "\n".join(
            [
                json.dumps({"event": "succeeded", "job": "a", "attempt": 2, "msg": "..."}),
                json.dumps({"event": "succeeded", "job": "a", "attempt": 1, "msg": "..."}),
                json.dumps({"event": "fired", "job": TICK, "schedule": "soak.tick",
                            "msg": f"fired job={TICK} schedule=soak.tick spec=..."}),
                "Traceback (most recent call last):",
            ]
        )
    )  # fmt: skip
    logs = read_worker_logs([log])
    assert logs.acked == {"a": 1} and logs.fired == {TICK: 1}
