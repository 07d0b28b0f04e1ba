"""The command line on a SQLite file: ``demo --url sqlite:///...`` (twice on
one file: the second run finds what the first left), and the admin
commands on the file (``check`` with ``--repair``, ``queues``, ``jobs``,
``job``): the demo and ``check`` in their own processes as a user runs
them, the others in this one (``cli.main``, as ``python -m`` calls it)."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from chronos_trio.cli import EXIT_OK, EXIT_PROBLEMS, main
from chronos_trio.cli._demo import DIGEST_ID, DIGEST_QUEUE, run_demo
from chronos_trio.records._jobs import JobState
from chronos_trio.store.sqlite import SqliteStore

pytestmark = pytest.mark.sqlite

ROOT = Path(__file__).resolve().parent.parent


def cli(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "chronos_trio", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


async def test_a_second_demo_run_finds_what_the_first_left(sqlite_url: str) -> None:
    runs = []
    for _ in range(2):
        out = io.StringIO()
        with trio.fail_after(120):
            code = await run_demo(jobs=20, out=out, live=False, url=sqlite_url)
        runs.append(out.getvalue())
        assert code == 0, runs[-1]
        assert "all jobs accounted for" in runs[-1] and "dead       3" in runs[-1]
    first, second = runs
    assert "the store holds no job of the demo's queues (a first run)" in first
    assert f"left for the next run: the weekly digest {DIGEST_ID} (scheduled" in first
    found = next(line for line in second.splitlines() if line.startswith("found on the store"))
    assert "default: " in found and "3 dead" in found, found
    assert f"{DIGEST_QUEUE}: 1 scheduled" in found, found
    assert f"the weekly digest {DIGEST_ID} an earlier run left is still there" in second
    assert "earlier " not in second.split("summary:")[1], "the first run left nothing pending"
    store = SqliteStore.from_url(sqlite_url)
    try:
        digest = await store.get_job(DIGEST_ID)
        assert digest is not None and digest.state is JobState.SCHEDULED
        [default] = await store.stats(["default"])
        assert default.counts[JobState.DEAD] == 6, "both runs' dead letters are kept"
        assert (await store.check()).findings == ()
    finally:
        await store.aclose()


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """A command run in this process (as ``python -m chronos_trio`` runs it)."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_demo_and_admin_commands_on_a_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.db"
    url = f"sqlite:///{path}"
    code, out, err = cli("demo", "--jobs", "20", "--no-live", "--url", url)
    assert code == EXIT_OK, err
    assert "a first run" in out and "all jobs accounted for" in out

    code, out, err = cli("check", "--url", url)
    assert code == EXIT_OK and "no problems found" in out, (out, err)
    assert "checked queues 'critical', 'default', 'digests', 'reports'" in out

    code, out, err = run_main(capsys, "queues", "--url", url, "--json")
    assert code == EXIT_OK, err
    counts = {q["queue"]: q["counts"] for q in json.loads(out)}
    assert counts[DIGEST_QUEUE]["scheduled"] == 1 and counts["default"]["dead"] == 3, counts
    code, out, err = run_main(
        capsys, "jobs", "--url", url, "--queue", DIGEST_QUEUE, "--state", "scheduled"
    )
    assert code == EXIT_OK and DIGEST_ID in out and "digest.weekly" in out, (out, err)

    # a lease nobody recovered, written behind the store's back: found, repaired
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE jobs SET state = 'leased', lease_token = 't', lease_owner = 'lost-worker',"
            " lease_expires_at = 1.0, attempts = 1 WHERE id = ?",
            (DIGEST_ID,),
        )
    conn.close()
    code, out, err = run_main(capsys, "check", "--url", url, "--json")
    assert code == EXIT_PROBLEMS, (out, err)
    [finding] = json.loads(out)["findings"]
    assert finding["job_id"] == DIGEST_ID and finding["problem"] == "expired_lease", finding
    code, out, err = cli("check", "--url", url, "--repair")
    assert code == EXIT_OK and "recovered" in out, (out, err)
    code, out, err = run_main(capsys, "job", "--url", url, DIGEST_ID, "--json")
    assert code == EXIT_OK and json.loads(out)["state"] == "ready", (out, err)
