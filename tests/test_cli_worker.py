"""``python -m chronos_trio worker`` as a subprocess: start-up errors are one
line with their exit code (never a traceback); a single-process worker runs
jobs, logs JSON lines, and shuts down gracefully on SIGTERM and SIGINT. And,
in-process, its ``--help`` states the defaults the worker really uses."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from chronos_trio.cli import (
    EXIT_BAD_URL,
    EXIT_NO_APP,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from chronos_trio.cli._worker_command import _OPTIONS, add_arguments, build_config
from chronos_trio.runtime import WorkerConfig, parse_queues
from chronos_trio.store.redis import RedisStore
from chronos_trio.testing.redis_server import free_port
from tests.tests_app import Record, make_app

ROOT = Path(__file__).resolve().parent.parent


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "chronos_trio", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=environment,
    )


APP = "tests.tests_app:app"
BAD_INPUT = [
    (["worker", "no_such_module:app"], EXIT_NO_APP, "cannot import app module 'no_such_module'"),
    (["worker", "tests.tests_app:missing"], EXIT_NO_APP, "has no attribute 'missing'"),
    (["worker", "tests.tests_app:not_an_app"], EXIT_NO_APP, "is not a chronos_trio.App"),
    (["worker", "tests.tests_app:Record"], EXIT_NO_APP, "is not a chronos_trio.App"),
    (["worker", "not a module"], EXIT_NO_APP, "bad APP"),
    (["worker", APP, "--url", "ftp://x"], EXIT_BAD_URL, "unsupported store URL 'ftp://x'"),
    (["worker", APP, "--url", "redis://127.0.0.1:abc/0"], EXIT_BAD_URL, "bad store URL"),
    (["worker", APP, "--queues", "critical=x"], EXIT_USAGE, "argument --queues: bad queue weight"),
    (["worker", APP, "--queues", "a=1,a=2"], EXIT_USAGE, "queue listed twice"),
    (["worker", APP, "--queues", "low=0"], EXIT_USAGE, "weights >= 1"),
    (["worker", APP, "--concurrency", "0"], EXIT_USAGE, "--concurrency: expected an integer >= 1"),
    (["worker", APP, "--lease-duration", "-1"], EXIT_USAGE, "--lease-duration: expected seconds"),
    (["worker", APP, "--batch-size", "many"], EXIT_USAGE, "--batch-size"),
    (
        ["worker", APP, "--lease-duration", "3", "--heartbeat-interval", "5"],
        EXIT_USAGE,
        "--heartbeat-interval (5.0s) must be shorter than --lease-duration (3.0s)",
    ),
    (["worker", APP, "--log-level", "loud"], EXIT_USAGE, "argument --log-level: invalid choice"),
    (["worker", APP, "--log-format", "xml"], EXIT_USAGE, "argument --log-format"),
    (["worker", APP, "--nonsense"], EXIT_USAGE, "unrecognized arguments: --nonsense"),
    (
        ["worker", APP, "--processes", "2"],
        EXIT_USAGE,
        "the in-memory store (memory://) cannot be shared across processes; use a redis:// URL",
    ),
    (["worker"], EXIT_USAGE, "the following arguments are required: APP"),
]


def _worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _config(*options: str) -> WorkerConfig:
    """The config the CLI builds for ``worker APP *options``."""
    args = _worker_parser().parse_args([APP, *options])
    return build_config(args, "testhost:1:0")


def test_worker_help_states_the_real_defaults() -> None:
    """Every worker option's help ends with its default in parentheses: a
    number, ``lease/N``, ``lease/N, at most M``, or a queue spec. Each is
    checked against the config the CLI really builds, at three lease
    durations, so a default or rule that changes in WorkerConfig fails here."""
    helps = {action.dest: action.help or "" for action in _worker_parser()._actions}
    default = _config()
    checked = set()
    for dest, field in _OPTIONS.items():
        match = re.search(r"\(([^()]*)\)$", helps[dest])
        assert match, f"--{dest} help states no default: {helps[dest]!r}"
        stated = match.group(1)
        for lease in (default.lease_duration, 12.0, 90.0):
            actual = getattr(_config("--lease-duration", f"{lease:g}"), field)
            if number := re.fullmatch(r"(\d+(?:\.\d+)?)(?:: .*)?", stated):
                expected = getattr(default, field)
                assert float(number.group(1)) == expected, (dest, stated, expected)
                if field != "lease_duration":
                    assert actual == expected, (dest, lease)
            elif share := re.fullmatch(r"lease/(\d+)", stated):
                assert actual == lease / int(share.group(1)), (dest, stated, lease, actual)
            elif capped := re.fullmatch(r"lease/(\d+), at most (\d+)", stated):
                expected = min(float(capped.group(2)), lease / int(capped.group(1)))
                assert actual == expected, (dest, stated, lease, actual)
            elif stated == "concurrency or CPUs, the fewer":
                assert actual == min(default.concurrency, os.cpu_count() or 1), (dest, actual)
            elif stated.startswith("off: "):
                assert actual is False, (dest, stated, actual)
            elif stated == "never":  # recycling is off unless asked for
                assert actual is None, (dest, stated, actual)
            else:
                assert dest == "queues", f"--{dest}: cannot read the default {stated!r}"
                assert parse_queues(stated) == actual, (dest, stated, actual)
        checked.add(dest)
    assert {"poll_interval", "recover_interval"} <= checked


def test_isolation_options_reach_the_worker_config() -> None:
    config = _config("--isolate-processes", "3", "--hard-limit-grace", "0")
    assert (config.isolate_processes, config.hard_limit_grace) == (3, 0.0)


def test_strict_reaches_the_worker_config() -> None:
    assert _config().strict_priority is False
    config = _config("--queues", "high=1,low=1000", "--strict")
    assert config.strict_priority is True
    assert [q.name for q in config.queues] == ["high", "low"]


@pytest.mark.parametrize(("args", "code", "message"), BAD_INPUT)
def test_bad_worker_input_is_one_line_and_an_exit_code(
    args: list[str], code: int, message: str
) -> None:
    proc = run_cli(*args)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_broken_app_modules_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "raises_app.py").write_text("raise RuntimeError('no config file')\n")
    (tmp_path / "syntax_app.py").write_text("def broken(:\n")
    (tmp_path / "imports_app.py").write_text("import not_installed_dependency\n")
    for module, message in [
        ("raises_app", "importing 'raises_app' failed: RuntimeError: no config file"),
        ("syntax_app", "importing 'syntax_app' failed: SyntaxError: "),
        ("imports_app", "ModuleNotFoundError: No module named 'not_installed_dependency'"),
    ]:
        proc = run_cli("worker", module, cwd=tmp_path)
        assert proc.returncode == EXIT_NO_APP, proc.stderr
        assert message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_schedule_of_an_unknown_task_stops_the_worker_before_it_starts(
    tmp_path: Path,
) -> None:
    """One line and EXIT_NO_APP (fatal to a managed child: no restart loop),
    before any store is touched (issue 23, item 6)."""
    (tmp_path / "typo_app.py").write_text(
        "import chronos_trio\n"
        "app = chronos_trio.App()\n"
        "@app.task('report.daily')\n"
        "async def report(day: str) -> None: ...\n"
        "app.every(60, 'mon', task='reprot.daily')\n"
    )
    proc = run_cli("worker", "typo_app", cwd=tmp_path)
    assert proc.returncode == EXIT_NO_APP, proc.stderr
    assert "names task 'reprot.daily', which this app does not register" in proc.stderr
    assert "did you mean 'report.daily'?" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_unreachable_redis_is_one_line() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["worker", APP, "--url", url], ["worker", APP, "--processes", "2"]):
        start = time.monotonic()
        proc = run_cli(*args, env={"CHRONOS_URL": url})
        assert proc.returncode == EXIT_UNAVAILABLE, proc.stderr
        assert "cannot reach the store" in proc.stderr and "Connection refused" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert time.monotonic() - start < 15


def test_admin_errors_from_a_real_process() -> None:
    proc = run_cli("jobs", "--url", "redis://127.0.0.1:1/0", "--queue", "q", "--state", "nah")
    assert proc.returncode == EXIT_USAGE and "unknown job state 'nah'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("queues", "no_such_module:app")
    assert proc.returncode == EXIT_NO_APP and "Traceback" not in proc.stderr


def spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("w") as log_file:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_single_process_worker_runs_jobs_and_stops_on_signal(
    redis_url: str, tmp_path: Path, signum: int
) -> None:
    log_path = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    argv = [sys.executable, "-m", "chronos_trio", "worker", APP, "--url", redis_url]
    argv += ["--log-format", "json", "--log-level", "debug", "--shutdown-grace", "5"]
    argv += ["--poll-interval", "0.2", "--queues", "default=3,critical=1"]
    producer = make_app(redis_url)
    proc = spawn(argv, env, log_path)
    try:
        with trio.fail_after(30):
            await producer.tasks["tests.record"].enqueue_many([Record("single") for _ in range(20)])
            [slow] = await producer.tasks["tests.record"].enqueue_many([Record("slow", sleep=1.0)])
            store = producer.store
            assert isinstance(store, RedisStore)

            async def running_slow() -> bool:
                job = await store.get_job(slow.job_id)
                return job is not None and job.state.value == "leased"

            while not await running_slow():
                await trio.sleep(0.05)
            await trio.sleep(0.2)
            sent = time.monotonic()
            proc.send_signal(signum)
            while proc.poll() is None:
                await trio.sleep(0.05)
            elapsed = time.monotonic() - sent
        assert proc.returncode == EXIT_OK
        assert elapsed < 5, "exits once the running handler is done"
        [stats] = await store.stats(["default"])
        assert stats.total == 0, "every job ran; the slow one finished during the grace"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await producer.aclose()

    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    succeeded = [e for e in lines if e["event"] == "succeeded"]
    assert len(succeeded) == 21
    first = succeeded[0]
    assert first["level"] == "debug" and first["logger"] == "chronos_trio.worker"
    assert first["kind"] == "tests.record" and first["queue"] == "default"
    assert first["attempt"] == 1 and isinstance(first["job"], str)
    assert first["process"].endswith(":0") and first["process"].count(":") == 2
    assert any(e["event"] == "leased" for e in lines)
    shutdown = [e for e in lines if e["event"] == "shutting down gracefully"]
    assert shutdown and shutdown[0]["signal"] == signal.Signals(signum).name


def test_leader_ttl_is_a_worker_option() -> None:
    # A killed leader's interval schedules miss triggers until another worker
    # takes over: a deployment that cares sets a shorter lease.
    assert _config("--leader-ttl", "3").leader_ttl == 3.0
    assert _config().leader_ttl == WorkerConfig().leader_ttl
