"""``schedules add|change|pause|resume|remove|list`` on the command line
(in-process, on the memory store and a SQLite file): edits validated
through the app, one-line errors with exit codes that store nothing, and
``schedules`` showing next fires in each schedule's zone beside UTC,
across a DST change."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest

from chronos_trio import MemoryStore
from chronos_trio.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, main
from tests import tests_app

APP = "tests.tests_app:app"


@pytest.fixture(params=["memory", pytest.param("sqlite", marks=pytest.mark.sqlite)])
def store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> Iterator[None]:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    monkeypatch.setattr(tests_app.app.registry, "schedules", [])
    monkeypatch.setattr(tests_app.app, "_store", MemoryStore())
    monkeypatch.setattr(tests_app.app, "_store_url", None)
    if request.param == "sqlite":  # each command opens (and closes) the file
        monkeypatch.setenv("CHRONOS_URL", f"sqlite:///{tmp_path}/cli.db")
    yield


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    if code != EXIT_OK:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return code, out, err


def test_edit_commands(store: None, capsys: pytest.CaptureFixture[str]) -> None:
    add = ("schedules", "add", APP, "nightly", '{"text": "hi"}', "--task", "tests.note")
    code, out, _ = run(capsys, *add, "--cron", "0 9 * * *", "--tz", "Europe/Paris")
    assert code == EXIT_OK and "schedule 'nightly' added" in out
    code, _, err = run(capsys, *add, "--every", "60")
    assert code == EXIT_REFUSED and "already stored" in err
    code, out, _ = run(capsys, "schedules", "change", APP, "nightly", '{"text": "x"}',
                       "--task", "tests.note", "--every", "90", "--queue", "q9")  # fmt: skip
    assert code == EXIT_OK and "changed" in out
    assert run(capsys, "schedules", "pause", APP, "nightly")[0] == EXIT_OK
    code, out, _ = run(capsys, "schedules", "list", APP, "--json")
    [row] = json.loads(out)
    assert (row["id"], row["spec"], row["queue"]) == ("nightly", "every 90s", "q9")
    assert (row["source"], row["state"], row["next_runs"]) == ("stored", "paused", [])
    assert run(capsys, "schedules", "resume", APP, "nightly")[0] == EXIT_OK
    code, out, _ = run(capsys, "schedules", APP, "--json")
    [row] = json.loads(out)
    assert row["state"] == "active" and len(row["next_runs"]) == 3
    code, _, err = run(capsys, "schedules", "remove", APP, "nightly")  # stdin is no terminal
    assert code == EXIT_REFUSED and "--yes" in err
    assert run(capsys, "schedules", "remove", APP, "nightly", "--yes")[0] == EXIT_OK
    code, out, _ = run(capsys, "schedules", APP)
    assert out.strip() == "no schedules"
    for words in (("pause",), ("resume",), ("remove", "--yes")):
        code, _, err = run(capsys, "schedules", words[0], APP, "nightly", *words[1:])
        assert code == EXIT_NOT_FOUND and "no stored schedule 'nightly'" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cron", "0 25 * * *"), "bad cron spec"),
        (("--cron", "0 9 * * *", "--tz", "Mars/Olympus"), "unknown timezone"),
        (("--every", "0.5"), "at least 1"),
        (("--every", "60", "--misfire", "twice"), "unknown misfire policy"),
        (("--every", "60", "--task", "tests.nope"), "no task 'tests.nope'"),
        (("--every", "60", "--payload-is", "ignored"), "unrecognized arguments"),
        ((), "one of the arguments --cron --every is required"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    store: None, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    argv = ["schedules", "add", APP, "s", '{"text": "a"}', "--task", "tests.note", *args]
    if "--task" in args:
        argv[5:7] = []
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE and message in err, err
    assert run(capsys, "schedules", APP)[1].strip() == "no schedules"


def test_a_code_schedules_id_is_refused(store: None, capsys: pytest.CaptureFixture[str]) -> None:
    tests_app.app.every(60, tests_app.Note("c"), task="tests.note", schedule_id="code")
    code, _, err = run(capsys, "schedules", "add", APP, "code", '{"text": "a"}',
                       "--task", "tests.note", "--every", "30")  # fmt: skip
    assert code == EXIT_USAGE and "declared in the app's code" in err


def test_next_fires_in_the_zone_beside_utc_across_dst(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Europe/Paris at 02:30, around the night its clocks go back
    (2026-10-25 03:00 CEST -> 02:00 CET): the offset changes between fires."""
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    monkeypatch.setattr(tests_app.app.registry, "schedules", [])
    now = dt.datetime(2026, 10, 23, 12, 0, tzinfo=dt.UTC).timestamp()
    monkeypatch.setattr(tests_app.app, "_store", MemoryStore(clock=lambda: now))
    monkeypatch.setattr(tests_app.app, "_store_url", None)
    tests_app.app.cron("30 2 * * *", tests_app.Note("p"), task="tests.note", tz="Europe/Paris",
                       schedule_id="paris")  # fmt: skip
    tests_app.app.every(3600, tests_app.Note("u"), task="tests.note", schedule_id="hourly")
    code, out, _ = run(capsys, "schedules", APP)
    assert code == EXIT_OK
    assert out.splitlines()[0].split()[:4] == ["ID", "KIND", "SPEC", "TZ"]
    assert "2026-10-24 02:30 Europe/Paris (00:30 UTC)" in out  # CEST, UTC+2
    # 02:30 comes twice that night: a fixed-hour spec fires on the first pass (CEST)
    assert "2026-10-25 02:30 Europe/Paris (00:30 UTC)" in out
    assert "2026-10-26 02:30 Europe/Paris (01:30 UTC)" in out  # CET, UTC+1
    assert "2026-10-23 13:00 UTC" in out  # a UTC schedule: just UTC
    code, out, _ = run(capsys, "schedules", APP, "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows["paris"]["next_runs"][2] == {
        "utc": "2026-10-26T01:30:00.000Z",
        "local": "2026-10-26 02:30 Europe/Paris (01:30 UTC)",
    }


def test_a_payload_the_task_cannot_take_stores_nothing(
    store: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "schedules", "add", APP, "s", '{"txt": 1}', "--task", "tests.note",
                       "--every", "60")  # fmt: skip
    assert code == EXIT_USAGE and err.startswith("error: nothing stored: payload") and "Note" in err
    code, _, err = run(capsys, "schedules", "add", APP, "s", "{not json", "--task", "tests.note",
                       "--every", "60", "--external")  # fmt: skip
    assert code == EXIT_USAGE and "not valid JSON" in err
    assert run(capsys, "schedules", APP)[1].strip() == "no schedules"
