"""Admin commands, in-process through ``main(argv)``, on both stores: the
in-memory store (reached through ``APP``) and a test Redis (reached through
``--url`` alone). Every command is checked as a table and as ``--json``."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import redis
import trio

from chronos_trio import JobState, MemoryStore, QueueWeight
from chronos_trio.cli import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    main,
)
from chronos_trio.store import SettleKind, Settlement, Store
from chronos_trio.store.redis import RedisStore
from tests import tests_app
from tests.tests_app import Note, Record, make_app

OWNER = "testhost:4242:0"


@attrs.frozen
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def populate(store: Store) -> None:
    """Jobs in every state of queue ``default`` plus one in ``critical``:
    ``leased-1``, ``retry-1`` (retry_wait), ``done-1`` (succeeded, retained),
    ``dead-1``/``dead-2``, ``ready-1``, ``scheduled-1``, and ``note-1``."""
    app = make_app(None)
    app.use_store(store)
    record = app.tasks["tests.record"]
    for job_id in ("leased-1", "retry-1", "done-1", "dead-1", "dead-2"):
        await record.enqueue(Record("k"), job_id=job_id)
        await trio.sleep(0.002)  # distinct due times: lease order is enqueue order
    leased = {
        lj.job.id: lj
        for lj in (
            await store.lease([QueueWeight("default")], 5, worker_id=OWNER, lease_duration=600)
        ).jobs
    }
    assert set(leased) == {"leased-1", "retry-1", "done-1", "dead-1", "dead-2"}
    await store.settle(
        [
            Settlement(leased["retry-1"].ref, SettleKind.RETRY, "boom", retry_delay=3600),
            Settlement(
                leased["done-1"].ref,
                SettleKind.SUCCEEDED,
                retain_for=3600,
                result=b'{"total": 5}',
                result_ttl=1800,
            ),
            Settlement(leased["dead-1"].ref, SettleKind.DEAD, "PayloadError: bad\ntrace line"),
            Settlement(leased["dead-2"].ref, SettleKind.DEAD, "SkipRetry: no"),
        ]
    )
    await record.enqueue(Record("k", sleep=1.5), job_id="ready-1")
    await record.enqueue(Record("k"), job_id="scheduled-1", delay=3600)
    await app.tasks["tests.note"].enqueue(Note("hi"), job_id="note-1")


class Cli:
    """Runs ``main`` in-process against one store; ``target`` selects it."""

    def __init__(self, target: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        self.target = target
        self.capsys = capsys

    def __call__(self, *words: str, args: tuple[str, ...] = (), stdin: Any = None) -> Result:
        self.capsys.readouterr()
        argv = [*words, *self.target, *args]
        if stdin is not None:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("sys.stdin", stdin)
                code = main(argv)
        else:
            code = main(argv)
        captured = self.capsys.readouterr()
        result = Result(code, captured.out, captured.err)
        if code != EXIT_OK:
            assert len(result.err.strip().splitlines()) == 1, result.err
            assert "Traceback" not in result.err
        return result


@pytest.fixture(params=["memory", "redis"])
def cli(
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cli]:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    if request.param == "memory":
        store: Store = MemoryStore()
        trio.run(populate, store)
        monkeypatch.setattr(tests_app.app, "_store", store)
        monkeypatch.setattr(tests_app.app, "_store_url", None)
        yield Cli(["tests.tests_app:app"], capsys)
    else:
        url: str = request.getfixturevalue("redis_url")

        async def fill() -> None:
            store = RedisStore.from_url(url)
            try:
                await populate(store)
            finally:
                await store.aclose()

        trio.run(fill)
        yield Cli(["--url", url], capsys)


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


def test_queues(cli: Cli) -> None:
    table = cli("queues")
    assert table.code == EXIT_OK
    lines = rows(table.out)
    assert lines[0][:10] == [
        "QUEUE",
        "STATUS",
        "SCHEDULED",
        "READY",
        "LEASED",
        "RETRY_WAIT",
        "SUCCEEDED",
        "DEAD",
        "ABORTED",
        "TOTAL",
    ]
    assert ["critical", "active", "0", "1", "0", "0", "0", "0", "0", "1"] in lines
    assert ["default", "active", "1", "1", "1", "1", "1", "2", "0", "7"] in lines
    assert ["default", "1", "active", "1", "7", "p0=7"] in lines, "per version/partition"

    data = cli("queues", args=("--json",)).json()
    default = next(q for q in data if q["queue"] == "default")
    assert default["counts"] == {
        "scheduled": 1,
        "ready": 1,
        "leased": 1,
        "retry_wait": 1,
        "succeeded": 1,
        "dead": 2,
        "aborted": 0,
    }
    assert default["total"] == 7 and default["paused"] is False
    assert default["versions"] == [
        {"version": 1, "state": "active", "partitions": 1, "jobs": 7, "by_partition": {"0": 7}}
    ]
    only = cli("queues", args=("--queue", "critical", "--json")).json()
    assert [q["queue"] for q in only] == ["critical"]


def test_jobs_pages_through_a_state(cli: Cli) -> None:
    first = cli("jobs", args=("--queue", "default", "--state", "dead", "--limit", "1"))
    assert first.code == EXIT_OK
    lines = first.out.strip().splitlines()
    assert lines[0].split()[:4] == ["ID", "KIND", "ATTEMPTS", "FINISHED"]
    assert len(lines) == 3
    assert "dead jobs 1-1 of 2 in queue 'default' (next page: --offset 1)" in first.out

    page = cli(
        "jobs", args=("--queue", "default", "--state", "dead", "--limit", "1", "--json")
    ).json()
    assert page["total"] == 2 and page["next_offset"] == 1 and len(page["jobs"]) == 1
    second = cli(
        "jobs",
        args=("--queue", "default", "--state", "DEAD", "--offset", "1", "--limit", "1", "--json"),
    ).json()
    assert second["next_offset"] is None
    assert {page["jobs"][0]["id"], second["jobs"][0]["id"]} == {"dead-1", "dead-2"}

    leased = cli("jobs", args=("--queue", "default", "--state", "leased"))
    assert "LEASE EXPIRES" in leased.out and OWNER in leased.out and "leased-1" in leased.out
    empty = cli("jobs", args=("--queue", "critical", "--state", "dead"))
    assert empty.code == EXIT_OK and "no dead jobs in queue 'critical'" in empty.out


def test_job_shows_everything(cli: Cli) -> None:
    shown = cli("job", args=("leased-1",))
    assert shown.code == EXIT_OK
    assert "state       leased" in shown.out
    assert f"held by {OWNER}, expires 20" in shown.out
    assert '"key": "k"' in shown.out

    data = cli("job", args=("leased-1", "--json")).json()
    assert data["state"] == "leased" and data["lease_owner"] == OWNER
    assert data["attempts"] == 1 and data["lease_expires_at"].endswith("Z")
    assert data["payload"] == {"key": "k", "sleep": 0.0, "fail": False, "block_first": 0.0}

    dead = cli("job", args=("dead-1", "--queue", "default"))
    assert "last error  PayloadError: bad" in dead.out and "trace line" in dead.out
    waiting = cli("job", args=("retry-1", "--json")).json()
    assert waiting["state"] == "retry_wait" and waiting["last_error"] == "boom"
    assert waiting["next_run_at"] is not None
    scheduled = cli("job", args=("scheduled-1",))
    assert "next run    20" in scheduled.out and "(in 59m" in scheduled.out
    assert "result      -" in scheduled.out

    done = cli("job", args=("done-1",))
    assert 'result      {"total": 5} (kept until 20' in done.out and "(in 29m" in done.out
    done_json = cli("job", args=("done-1", "--json")).json()
    assert done_json["result"] == {"total": 5} and done_json["result_until"].endswith("Z")
    assert done_json["state"] == "succeeded"
    # it keeps the due time it ran for (not its end of retention: issue 11)
    assert done_json["run_at"] < done_json["finished_at"]


def test_run_now(cli: Cli) -> None:
    done = cli("run-now", args=("scheduled-1",))
    assert done.code == EXIT_OK
    assert done.out.strip() == "job scheduled-1 is ready now (was scheduled)"
    data = cli("run-now", args=("dead-1", "--json")).json()
    assert data["previous_state"] == "dead"
    assert data["job"]["state"] == "ready" and data["job"]["attempts"] == 0
    refused = cli("run-now", args=("ready-1",))
    assert refused.code == EXIT_REFUSED
    assert "job ready-1 is ready: run-now applies to scheduled, retry_wait and dead" in refused.err


def test_delete(cli: Cli) -> None:
    deleted = cli("delete", args=("ready-1",))
    assert deleted.code == EXIT_OK
    assert deleted.out.strip() == "deleted job ready-1 (tests.record, ready, queue default)"
    assert cli("job", args=("ready-1",)).code == EXIT_NOT_FOUND
    data = cli("delete", args=("dead-2", "--json")).json()
    assert data["deleted"]["id"] == "dead-2" and data["deleted"]["state"] == "dead"
    leased = cli("delete", args=("leased-1",))
    assert leased.code == EXIT_REFUSED
    assert f"job leased-1 is leased by {OWNER}: a running job cannot be deleted" in leased.err


def test_abort(cli: Cli) -> None:
    waiting = cli("abort", args=("scheduled-1",))
    assert waiting.code == EXIT_OK, waiting.err
    assert waiting.out.strip() == "job scheduled-1 is aborted now (was scheduled)"
    running = cli("abort", args=("leased-1", "--queue", "default", "--reason", "ops", "--json"))
    data = running.json()
    assert data["result"] == "flagged" and data["previous_state"] == "leased"
    assert data["job"]["state"] == "leased", "its worker settles the abort"
    told = cli("abort", args=("retry-1", "--reason", "not needed"))
    assert told.code == EXIT_OK and "is aborted now (was retry_wait)" in told.out
    text = cli("abort", args=("leased-1",))
    assert text.code == EXIT_OK and f"it is leased by {OWNER}, which cancels it" in text.out
    finished = cli("abort", args=("dead-1",))
    assert finished.code == EXIT_REFUSED
    assert "job dead-1 is dead: it has finished, nothing to abort" in finished.err
    again = cli("abort", args=("scheduled-1",))
    assert again.code == EXIT_REFUSED and "is aborted: it has finished" in again.err
    assert cli("abort", args=("nope",)).code == EXIT_NOT_FOUND
    assert cli("abort", args=("ready-1", "--queue", "nope")).code == EXIT_NOT_FOUND

    shown = cli("job", args=("retry-1",))
    assert "state       aborted" in shown.out and "last error  aborted: not needed" in shown.out
    listed = cli("jobs", args=("--queue", "default", "--state", "aborted"))
    assert listed.code == EXIT_OK and "FINISHED" in listed.out
    assert "aborted jobs 1-2 of 2 in queue 'default'" in listed.out
    assert {"scheduled-1", "retry-1"} <= set(listed.out.split())
    dead = cli("jobs", args=("--queue", "default", "--state", "dead", "--json")).json()
    assert dead["total"] == 2 and {j["id"] for j in dead["jobs"]} == {"dead-1", "dead-2"}
    assert ["default", "active", "0", "1", "1", "0", "1", "2", "2", "7"] in rows(cli("queues").out)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_requeue_dead(cli: Cli) -> None:
    one = cli("requeue-dead", args=("--queue", "default", "--job", "dead-1"))
    assert one.code == EXIT_OK, one.err
    assert "requeued 1 dead job(s) of queue 'default'" in one.out
    not_dead = cli("requeue-dead", args=("--queue", "default", "--job", "ready-1"))
    assert not_dead.code == EXIT_REFUSED and "job ready-1 is ready, not dead" in not_dead.err

    # Bulk: confirmation needed; without a terminal it refuses, one line.
    piped = cli("requeue-dead", args=("--queue", "default"), stdin=io.StringIO("y\n"))
    assert piped.code == EXIT_REFUSED
    assert "refusing to requeue 1 dead job(s) without confirmation" in piped.err
    declined = cli("requeue-dead", args=("--queue", "default"), stdin=FakeTerminal("n\n"))
    assert declined.code == EXIT_REFUSED and "[y/N]" in declined.err
    assert cli("job", args=("dead-2", "--json")).json()["state"] == "dead"
    accepted = cli("requeue-dead", args=("--queue", "default"), stdin=FakeTerminal("y\n"))
    assert accepted.code == EXIT_OK and "requeued 1 dead job(s)" in accepted.out
    assert cli("job", args=("dead-2", "--json")).json()["state"] == "ready"

    none_left = cli("requeue-dead", args=("--queue", "default", "--yes", "--json")).json()
    assert none_left == {"queue": "default", "job": None, "requeued": 0}
    assert "no dead jobs" in cli("requeue-dead", args=("--queue", "critical", "--yes")).out


def test_pause_and_resume(cli: Cli) -> None:
    paused = cli("pause", args=("default",))
    assert paused.code == EXIT_OK and "queue 'default' paused" in paused.out
    assert ["default", "paused"] == rows(cli("queues").out)[2][:2]
    assert next(q for q in cli("queues", args=("--json",)).json() if q["queue"] == "default")[
        "paused"
    ]
    assert cli("resume", args=("default", "--json")).json() == {
        "queue": "default",
        "paused": False,
        "new_queue": False,
    }
    assert ["default", "active"] == rows(cli("queues").out)[2][:2]
    assert cli("pause", args=("critical", "--json")).json() == {
        "queue": "critical",
        "paused": True,
        "new_queue": False,
    }


def test_a_queue_that_never_held_a_job_can_be_paused(cli: Cli) -> None:
    """Memory and Redis (issue 23, item 11: on main, exit 6 "unknown
    queue"). The output says the queue is new, with a close known name:
    a misspelling shows at once."""
    paused = cli("pause", args=("defualt",))
    assert paused.code == EXIT_OK, paused.err
    assert "queue 'defualt' paused" in paused.out
    assert "it is a new queue (no job was ever in it): did you mean 'default'?" in paused.out
    assert ["defualt", "paused"] in [r[:2] for r in rows(cli("queues").out)]
    assert cli("pause", args=("defualt", "--json")).json() == {
        "queue": "defualt",
        "paused": True,
        "new_queue": False,
    }
    fresh = cli("resume", args=("bulk", "--json")).json()
    assert fresh == {"queue": "bulk", "paused": False, "new_queue": True}


def test_errors_under_json_are_a_json_object_too(cli: Cli) -> None:
    """Under ``--json`` a failed command prints one JSON object on stdout
    (its one line on stderr stays), with the exit code (on main: plain
    text only)."""
    missing = cli("job", args=("missing", "--json"))
    assert missing.code == EXIT_NOT_FOUND
    assert missing.json() == {
        "error": {
            "message": missing.err.strip().removeprefix("error: "),
            "exit_code": EXIT_NOT_FOUND,
            "reason": "not_found",
        }
    }
    assert "no job with id 'missing'" in missing.json()["error"]["message"]
    usage = cli("jobs", args=("--queue", "default", "--state", "sleeping", "--json"))
    assert usage.code == EXIT_USAGE
    assert usage.json()["error"]["reason"] == "usage"
    assert "unknown job state 'sleeping'" in usage.json()["error"]["message"]
    assert cli("job", args=("missing",)).out == "", "no JSON without --json"


def test_topology(cli: Cli) -> None:
    shown = cli("topology", "show", args=("critical",))
    assert rows(shown.out) == [
        ["QUEUE", "VERSION", "PARTITIONS", "ROUTING"],
        ["critical", "1", "1", "active"],
    ]
    promoted = cli("topology", "promote", args=("critical", "--partitions", "4", "--json")).json()
    assert promoted["versions"] == [
        {"version": 1, "partitions": 1, "state": "draining"},
        {"version": 2, "partitions": 4, "state": "active"},
    ]
    refused = cli("topology", "complete", args=("critical",))
    assert refused.code == EXIT_REFUSED and "still holds" in refused.err
    assert cli("delete", args=("note-1",)).code == EXIT_OK
    completed = cli("topology", "complete", args=("critical",))
    assert completed.code == EXIT_OK, completed.err
    assert "drained version removed" in completed.out
    assert rows(completed.out)[-1] == ["critical", "2", "4", "active"]
    assert cli("topology", "show", args=("critical", "--json")).json() == {
        "queue": "critical",
        "versions": [{"version": 2, "partitions": 4, "state": "active"}],
    }
    again = cli("topology", "promote", args=("critical", "--partitions", "2", "--version", "2"))
    assert again.code == EXIT_REFUSED
    nothing = cli("topology", "complete", args=("critical",))
    assert nothing.code == EXIT_REFUSED and "no draining version" in nothing.err


@pytest.mark.parametrize(
    ("words", "args", "code", "message"),
    [
        (
            ("jobs",),
            ("--queue", "nope", "--state", "ready"),
            EXIT_NOT_FOUND,
            "unknown queue 'nope'",
        ),
        (("jobs",), ("--queue", "default", "--state", "done"), EXIT_USAGE, "unknown job state"),
        (
            ("jobs",),
            ("--queue", "default", "--state", "ready", "--limit", "0"),
            EXIT_USAGE,
            "--limit",
        ),
        (("job",), ("missing",), EXIT_NOT_FOUND, "no job with id 'missing'"),
        (("job",), ("ready-1", "--queue", "critical"), EXIT_NOT_FOUND, "in queue 'critical'"),
        (("run-now",), ("missing",), EXIT_NOT_FOUND, "no job with id"),
        (("delete",), ("missing",), EXIT_NOT_FOUND, "no job with id"),
        (("jobs",), ("--queue", "nope", "--state", "ready"), EXIT_NOT_FOUND, "known queues"),
        (("requeue-dead",), ("--queue", "nope", "--yes"), EXIT_NOT_FOUND, "unknown queue"),
        (("topology", "show"), ("nope",), EXIT_NOT_FOUND, "unknown queue"),
        (("topology", "promote"), ("default",), EXIT_USAGE, "--partitions"),
        (("topology", "promote"), ("default", "--partitions", "x"), EXIT_USAGE, "integer >= 1"),
        (("queues",), ("--queue", "nope"), EXIT_NOT_FOUND, "unknown queue"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(
    cli: Cli, words: tuple[str, ...], args: tuple[str, ...], code: int, message: str
) -> None:
    result = cli(*words, args=args)
    assert result.code == code, result.err
    assert message in result.err and result.out == ""


def test_schedules_need_the_app(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    monkeypatch.setattr(tests_app.app, "_store", MemoryStore())
    assert main(["schedules", "tests.tests_app:app"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "no schedules"
    monkeypatch.setattr(tests_app.app.registry, "schedules", [])
    tests_app.app.cron("0 3 * * *", Note("nightly"), task="tests.note", schedule_id="nightly")
    assert main(["schedules", "tests.tests_app:app"]) == EXIT_OK
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:4] == ["ID", "KIND", "SPEC", "TZ"]
    assert "nightly" in table and "0 3 * * *" in table and "critical" in table
    assert main(["schedules", "tests.tests_app:app", "--json"]) == EXIT_OK
    [row] = json.loads(capsys.readouterr().out)
    assert row["id"] == "nightly" and row["kind"] == "tests.note" and row["next_run"].endswith("Z")
    assert row["leader"] is None
    assert main(["schedules", "--url", "redis://127.0.0.1:1/0"]) == EXIT_USAGE
    assert "schedules are declared in the app" in capsys.readouterr().err


def test_admin_without_a_store_or_with_a_memory_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    assert main(["queues"]) == EXIT_USAGE
    assert "no store given: pass APP (module:attr) or --url" in capsys.readouterr().err
    assert main(["queues", "--url", "memory://"]) == 4
    assert "cannot be inspected from another" in capsys.readouterr().err
    assert main(["queues", "--url", "ftp://x"]) == 4
    assert "unsupported store URL" in capsys.readouterr().err


def test_env_url_is_used_when_no_flag(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHRONOS_URL", redis_url)
    assert main(["queues", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == []
    monkeypatch.setenv("CHRONOS_URL", "redis://127.0.0.1:1/0")
    assert main(["queues"]) == 5
    err = capsys.readouterr().err
    assert "Connection refused" in err and len(err.strip().splitlines()) == 1
    # The flag beats the environment.
    assert main(["queues", "--url", redis_url]) == EXIT_OK


def test_job_and_app_positionals_mix_with_options(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    # APP first, then an option, then the id: argparse alone would reject this.
    assert main(["job", "tests.tests_app:app", "--url", redis_url, "nope"]) == EXIT_NOT_FOUND
    assert "no job with id 'nope'" in capsys.readouterr().err
    assert main(["job", "--url", redis_url, "nope", "--json"]) == EXIT_NOT_FOUND


def test_help_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == EXIT_OK
    assert "requeue-dead" in capsys.readouterr().out
    assert main(["frobnicate"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "invalid choice: 'frobnicate'" in err and len(err.strip().splitlines()) == 1
    assert main(["topology"]) == EXIT_USAGE
    assert main([]) == EXIT_USAGE


def test_state_names_parse_like_the_job_model() -> None:
    assert JobState.parse(" Retry_Wait ") is JobState.RETRY_WAIT


def test_job_with_a_damaged_field_shows_its_damage(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: this printed ``invalid literal for int()`` and exited 2."""
    monkeypatch.delenv("CHRONOS_URL", raising=False)

    async def fill() -> None:
        store = RedisStore.from_url(redis_url)
        try:
            await populate(store)
        finally:
            await store.aclose()

    trio.run(fill)
    client = redis.Redis.from_url(redis_url)
    [key] = client.keys("*:j:dead-1")
    client.hset(key, mapping={"attempts": "x", "timeout": "soon"})
    cli = Cli(["--url", redis_url], capsys)
    shown = cli("job", args=("dead-1",))
    assert shown.code == EXIT_OK
    damage = [line for line in shown.out.splitlines() if line.startswith("damage")]
    assert damage == [
        "damage      field 'attempts' holds b'x', not an integer >= 0; "
        "field 'timeout' holds b'soon', not a number"
    ]
    assert "state       dead" in shown.out and "attempts    0 of 4" in shown.out
    data = cli("job", args=("dead-1", "--json")).json()
    assert data["damage"].startswith("field 'attempts' holds b'x'")
    assert cli("job", args=("dead-2", "--json")).json()["damage"] is None
    assert "damage" not in cli("job", args=("dead-2",)).out


def test_workflow_view_and_abort(cli: Cli) -> None:
    """``workflow ID`` shows the flow's steps as a tree; ``--abort`` cancels it."""
    from chronos_trio import App, JobContext, chain, group

    async def start() -> None:
        remote = cli.target[0] == "--url"
        store = RedisStore.from_url(cli.target[1]) if remote else tests_app.app.store
        app = App(store)

        @app.task("wf.add")
        async def add(payload: int, job: JobContext) -> int:
            return payload + 1

        @app.task("wf.sum")
        async def total(payload: list[int], job: JobContext) -> int:
            return sum(payload)

        try:
            flow = chain(group(add.s(1), add.s(2)), total.s())
            await app.enqueue_workflow(flow, workflow_id="wf-cli")
        finally:
            if remote:
                await store.aclose()

    trio.run(start)
    shown = cli("workflow", args=("wf-cli",))
    assert shown.code == EXIT_OK, shown.err
    lines = shown.out.splitlines()
    assert lines[0] == "workflow wf-cli: running"
    assert "group wf-cli.0 (2):" in shown.out
    assert "  - wf.add wf-cli.0.0: ready, attempts 0" in shown.out
    assert "- wf.sum wf-cli.1: not made yet" in shown.out
    data = cli("workflow", args=("wf-cli", "--json")).json()
    assert data["state"] == "running" and data["tree"]["type"] == "chain"
    members = data["tree"]["children"][0]["children"]
    assert [m["id"] for m in members] == ["wf-cli.0.0", "wf-cli.0.1"]
    assert members[0]["state"] == "ready" and data["tree"]["children"][1]["state"] is None

    aborted = cli("workflow", args=("wf-cli", "--abort", "--json"))
    assert aborted.code == EXIT_OK, aborted.err
    got = aborted.json()
    assert got["dropped"] == ["wf-cli.0.0", "wf-cli.0.1"] and got["not_created"] == ["wf-cli.1"]
    again = cli("workflow", args=("wf-cli", "--abort"))
    assert again.code == EXIT_OK and "cancelled before" in again.out
    assert cli("workflow", args=("wf-cli",)).out.startswith("workflow wf-cli: cancelled")
    missing = cli("workflow", args=("nope", "--abort"))
    assert missing.code == EXIT_NOT_FOUND and "no record of it" in missing.err
    assert cli("workflow", args=("nope",)).code == EXIT_NOT_FOUND
