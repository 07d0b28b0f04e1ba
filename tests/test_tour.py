"""The tour (``python -m chronos_trio tour``): every chapter keeps its
promises on the virtual clock, a broken promise fails the tour, and the
command line runs it."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import trio

from chronos_trio.cli import _tour
from chronos_trio.cli._tour import CHAPTERS, Chapter, run_tour


async def test_every_chapter_keeps_its_promises(autojump_clock: object) -> None:
    out = io.StringIO()
    with trio.fail_after(600):
        assert await run_tour(out=out) == 0, out.getvalue()
    text = out.getvalue()
    assert text.count("  -> ok") == len(CHAPTERS)
    assert "UNEXPECTED" not in text
    assert "every promise kept" in text
    # what each chapter shows happening, in order
    assert text.index("ran 'at once'") < text.index("ran 'after 1.5 s'")
    assert "attempt 3 succeeds" in text and "dead letter: image.resize" in text
    assert text.index("report urgent") < text.index("report daily") < text.index("report weekly")
    assert "abort the running export: FLAGGED" in text and "raises JobAborted" in text
    assert "while it runs: 50% '500 of 1000 rows'" in text
    assert "leader: w2 (epoch 2)" in text or "leader: w1 (epoch 2)" in text
    assert "each ran once across the hand-over" in text
    assert "total of [500, 499]: 999" in text and "its result: 999" in text
    assert "publish ['cat.png@1024', 'cat.png@64']" in text
    assert "abort: 1 running step aborted, 1 step never to be made" in text
    assert "the workflow is now cancelled" in text
    assert "on_failure: order.charge (order-8.0) failed after 2 attempts" in text


async def test_a_broken_promise_fails_the_tour(
    autojump_clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(ch: Chapter) -> None:
        ch.expect(1 + 1 == 3, "arithmetic holds")

    monkeypatch.setattr(_tour, "CHAPTERS", (("A chapter that breaks", broken),))
    out = io.StringIO()
    assert await run_tour(out=out) == 1
    assert "UNEXPECTED: arithmetic holds" in out.getvalue()
    assert "1 UNEXPECTED" in out.getvalue()


async def test_only_picks_chapters_and_refuses_an_unknown_one(autojump_clock: object) -> None:
    out = io.StringIO()
    assert await run_tour(out=out, only="UNIQUE") == 0
    assert "== 1. Unique jobs" in out.getvalue() and "== 2." not in out.getvalue()
    with pytest.raises(ValueError, match="no chapter of the tour matches 'nothing'"):
        await run_tour(out=io.StringIO(), only="nothing")


def test_tour_runs_from_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "chronos_trio", "tour", "--only", "priorities"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "report urgent (priority 9)" in proc.stdout and "every promise kept" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "chronos_trio", "tour", "--only", "nothing"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no chapter of the tour matches" in bad.stderr
    assert "Traceback" not in bad.stderr
