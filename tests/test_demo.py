"""The main job on the embedded default: ``python -m chronos_trio demo``."""

from __future__ import annotations

import io
import subprocess
import sys

from chronos_trio.cli._demo import run_demo


async def test_demo_accounts_for_every_job(autojump_clock: object) -> None:
    out = io.StringIO()
    assert await run_demo(jobs=40, out=out, live=False) == 0
    text = out.getvalue()
    assert "all jobs accounted for" in text
    assert "dead       3" in text
    assert "payload does not structure as ResizeImage" in text
    assert "SkipRetry" in text and "retries exhausted" in text


def test_demo_runs_from_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "chronos_trio", "demo", "--jobs", "20", "--no-live"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "all jobs accounted for" in proc.stdout


def test_cli_rejects_bad_demo_option() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "chronos_trio", "demo", "--jobs", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--jobs must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr
