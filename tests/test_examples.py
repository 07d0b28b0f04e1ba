"""The runnable examples stay runnable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_example(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def run_embedded(script: str) -> subprocess.CompletedProcess[str]:
    """Run an example on the embedded store (no CHRONOS_URL in its environment)."""
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    return subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )


def test_quickstart_on_the_embedded_store() -> None:
    proc = run_embedded("examples/quickstart.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("attempt 1: mail to") == 7
    assert "succeeded=7" in proc.stdout


@pytest.mark.redis
def test_quickstart_on_redis(redis_url: str) -> None:
    proc = run_example("examples/quickstart.py", env={"CHRONOS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    assert "succeeded=7" in proc.stdout


@pytest.mark.redis
def test_redis_demo_logs_version_and_partition(redis_url: str) -> None:
    proc = run_example(
        "examples/redis_demo.py", f"{redis_url}?partitions=4", "--jobs", "40", "--delay", "0.5"
    )
    assert proc.returncode == 0, proc.stderr
    runs = [line for line in proc.stdout.splitlines() if " ran " in line]
    assert len(runs) == 41
    assert {line.split(" v1 p")[1][0] for line in runs} == {"0", "1", "2", "3"}


@pytest.mark.redis
@pytest.mark.parametrize("example", ["producer_sync.py", "producer_asyncio.py"])
def test_the_producer_examples_round_trip_through_a_worker_process(
    redis_url: str, example: str
) -> None:
    """The README's Flask/Django-style and FastAPI-style programs: orders
    enqueued outside Trio, run by a worker process, receipts (typed) and
    failures read back; bulk thumbnails; one subscription for every wait."""
    proc = run_example(f"examples/{example}", env={"CHRONOS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for n in range(12):
        if n % 4:
            assert f"'order': 'order-{n}', 'total_cents': {250 * (n % 4)}" in out, out
        else:
            assert f"SkipRetry: order order-{n} is empty" in out, out
    assert "thumbnails 20 b'image-0-'" in out
    assert "status {'state': 'succeeded', 'attempts': 1}" in out
    assert "unknown" in out and "'error': 'no such order'" in out and "404" in out, out
    assert "waited through 1 subscription" in out


def test_results_example_on_the_embedded_store() -> None:
    proc = run_embedded("examples/results.py")
    assert proc.returncode == 0, proc.stderr
    assert "resizing https://img/cat.png for req-42" in proc.stdout
    assert "thumbnail: Thumbnail(url='https://img/cat.png?w=64', bytes_=640)" in proc.stdout
    assert "status: succeeded, same result: True" in proc.stdout
    assert "failed after 1 attempt(s): retries exhausted" in proc.stdout


@pytest.mark.redis
def test_results_example_on_redis(redis_url: str) -> None:
    proc = run_example("examples/results.py", env={"CHRONOS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    assert "status: succeeded, same result: True" in proc.stdout
    assert "ConnectionError: https://down.example is unreachable" in proc.stdout


def test_workflow_example_on_the_embedded_store() -> None:
    proc = run_embedded("examples/workflow.py")
    assert proc.returncode == 0, proc.stderr
    assert "subtotal, shipping, discount (member order): [300, 500, -50]" in proc.stdout
    assert proc.stdout.count("invoice for 750 cents") == 1, "the second start is the same run"
    assert "workflow order-7: INV-750" in proc.stdout
    assert "unique: second stored=False, same job=True" in proc.stdout


@pytest.mark.redis
def test_workflow_example_on_redis(redis_url: str) -> None:
    proc = run_example("examples/workflow.py", env={"CHRONOS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    assert "workflow order-7: INV-750" in proc.stdout
    assert proc.stdout.count("invoice for 750 cents") == 1


def _check_flow_control_output(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "reports by priority: ['urgent', 'daily', 'weekly']" in proc.stdout
    assert "dead: report expired: not started by" in proc.stdout
    lookups = re.search(r"lookups: (\d+) in ([\d.]+)s", proc.stdout)
    assert lookups is not None and int(lookups[1]) == 10
    # 2 at once, then 7 more 1/20 s apart, and a 0.3 s hold after the 429
    assert 0.6 <= float(lookups[2]) < 2.0, lookups[2]
    assert "exports at once per tenant: {'acme': 2, 'globex': 2}" in proc.stdout


def test_flow_control_example_on_the_embedded_store() -> None:
    _check_flow_control_output(run_embedded("examples/flow_control.py"))


@pytest.mark.redis
def test_flow_control_example_on_redis(redis_url: str) -> None:
    _check_flow_control_output(
        run_example("examples/flow_control.py", env={"CHRONOS_URL": redis_url})
    )


def test_graph_example_on_the_embedded_store() -> None:
    proc = run_embedded("examples/graph.py")
    assert proc.returncode == 0, proc.stderr
    assert "publish (resize, thumbnail): ['7-1200.jpg', '7-200.jpg']" in proc.stdout
    assert proc.stdout.count("index (metadata, publish)") == 1, "the second start is the same run"
    assert "graph photo-7: 4000px https://photos.example/7-1200.jpg" in proc.stdout


@pytest.mark.redis
def test_graph_example_on_redis(redis_url: str) -> None:
    proc = run_example("examples/graph.py", env={"CHRONOS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    assert "graph photo-7: 4000px https://photos.example/7-1200.jpg" in proc.stdout
    assert proc.stdout.count("index (metadata, publish)") == 1
