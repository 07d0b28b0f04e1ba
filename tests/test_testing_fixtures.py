"""The pytest fixtures of ``chronos_trio.testing.pytest_plugin``, used by a
project's own test suite (opted in from its conftest.py, its App given by
overriding ``chronos_app``), run by pytest in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """
import pytest
import chronos_trio

pytest_plugins = ["chronos_trio.testing.pytest_plugin"]

# the project's app: its real store is never reached by these tests
app = chronos_trio.App("redis://127.0.0.1:1/0")
sent: list[tuple[str, float]] = []


@app.task("email.send", max_retries=2)
async def send(to: str, job: chronos_trio.JobContext) -> str:
    if job.attempt == 1:
        raise ConnectionError("smtp is down")
    sent.append((to, job.attempt))
    return f"sent to {to}"


@pytest.fixture
def chronos_app() -> chronos_trio.App:
    sent.clear()
    return app


@pytest.fixture
def chronos_worker_options() -> dict:
    return {"concurrency": 3}
"""

TESTS = """
import trio
import chronos_trio
from chronos_trio.testing import run_until_idle
from conftest import app, send, sent


async def test_worker_runs_delayed_jobs_in_virtual_time(chronos_worker, autojump_clock):
    start = trio.current_time()
    with trio.fail_after(600):
        handle = await send.enqueue("a@example.com", delay=120)
        await chronos_worker.wait_idle()
        assert await handle.result(timeout=0) == "sent to a@example.com"
    assert sent == [("a@example.com", 2)]
    assert trio.current_time() - start >= 121      # the delay, then the backoff
    assert chronos_worker.statistics().retried == 1
    assert chronos_worker.config.concurrency == 3


async def test_run_until_idle(chronos_memory_app, autojump_clock):
    await send.enqueue("b@example.com")
    worker = await run_until_idle(chronos_memory_app, timeout=600)
    assert worker.statistics().succeeded == 1
    assert sent == [("b@example.com", 2)]


async def test_eager(chronos_eager):
    handle = await send.enqueue("c@example.com", delay=3600)
    assert sent == [("c@example.com", 2)]
    assert await handle.result(timeout=0) == "sent to c@example.com"
    assert [r.attempt for r in chronos_eager.runs] == [1, 2]


async def test_memory_app_needs_the_virtual_clock(chronos_memory_app):
    pass


def test_the_app_has_its_own_store_back():
    assert app.store_url == "redis://127.0.0.1:1/0"
    assert app._store is None
"""


def test_a_project_uses_the_fixtures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_jobs=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", timeout=120)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_memory_app_needs_the_virtual_clock*",
            "*chronos_memory_app runs on the virtual clock: add pytest-trio's autojump_clock*",
        ]
    )
