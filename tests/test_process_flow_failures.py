"""kill -9 around a workflow's failure handling (issue 29 item 2), end to
end: ``python -m chronos_trio worker tests.tests_app:app --processes 2``
against a test Redis. The failure callback runs exactly once when a worker
dies in the continuer holding the failed step's outbox entry, when one dies
on the failing step's last attempt (the recovery dead-letters it), and
when one is killed while many flows fail across both processes."""

from __future__ import annotations

import collections
import os
import signal
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import chain, group
from chronos_trio.cli import EXIT_OK
from tests.test_process_e2e import DUPLICATE_WINDOW, Manager, leased_by
from tests.tests_app import make_app

pytestmark = pytest.mark.redis


async def run_failing_flows(
    redis_url: str, tmp_path: Path, flows: int, *, kill_victim_at: int | None = None
) -> tuple[collections.Counter[str], str, redis.Redis]:
    """``flows`` workflows ``chain(wf_fail(1), group(wf_fail(2), wf_fail(-1)),
    wf_fail(0))`` with ``on_failure=wf_on_failure``, ids ``ff<i>``, through a
    two-process manager until every callback ran (and a duplicate's window
    more); with ``kill_victim_at``, child 0 is killed with kill -9 once that
    many callbacks ran and it holds leases. The callbacks recorded (callback
    job ID and failed job ID), the manager's log."""
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    inspector = producer.inspector()
    client = redis.Redis.from_url(redis_url)
    step, callback = producer.tasks["tests.wf_fail"], producer.tasks["tests.wf_on_failure"]
    flow = chain(step.s(1), group(step.s(2), step.s(-1)), step.s(0))
    try:
        with trio.fail_after(180):
            children = await manager.wait_ready()
            for i in range(flows):
                await producer.enqueue_workflow(flow, workflow_id=f"ff{i}", on_failure=callback.s())
            if kill_victim_at is not None:
                victim = children[0]
                while True:  # kill it mid-flight: some callbacks done, leases held
                    held = await leased_by(inspector, victim)
                    if held and client.llen("wf:failures") >= kill_victim_at:
                        break
                    if called(client) >= flows:
                        break  # all done already (a slow machine): kill it anyway
                    await trio.sleep(0.005)
                os.kill(victim, signal.SIGKILL)
            while called(client) < flows:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    fired = collections.Counter(x.decode() for x in client.lrange("wf:failures", 0, -1))
    return fired, manager.log(), client


async def test_kill_9_in_the_continuer_holding_a_failed_step_s_entry(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed step's dead settle wrote its outbox entry; the process
    dies (kill -9 from inside its continuer, deterministic) before the
    callback is enqueued: the other's sweep finds the entry; one callback."""
    monkeypatch.setenv("WF_KILL_IN_CONTINUER", "ff0.1.1")
    monkeypatch.setenv("WF_KILL_MARK", str(tmp_path / "killed"))
    fired, log, client = await run_failing_flows(redis_url, tmp_path, 1)
    assert list(fired) == ["ff0.on_failure ff0.1.1 1"]
    assert (tmp_path / "killed").exists() and "code=-9" in log
    assert client.llen("wf:failures") == 1


async def test_kill_9_on_the_failing_step_s_last_attempt(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failing step's process dies while it runs its only attempt: the
    lease expires, the recovery dead-letters it and puts it in the outbox
    in the same step; one callback, naming the lost lease."""
    monkeypatch.setenv("WF_FAIL_KILL", "ff0.1.1")
    fired, log, _ = await run_failing_flows(redis_url, tmp_path, 1)
    # its sibling 1.0 may have run in the killed process too (then it failed
    # as well, by the same recovery): one callback, for either
    once_per_flow(fired, 1)
    assert "code=-9" in log


async def test_kill_9_while_many_flows_fail_calls_each_callback_once(
    redis_url: str, tmp_path: Path
) -> None:
    """Forty failing flows across two processes, one killed with kill -9
    while it holds leases: every flow's callback exactly once."""
    fired, log, _ = await run_failing_flows(redis_url, tmp_path, 40, kill_victim_at=1)
    once_per_flow(fired, 40)
    assert "code=-9" in log


def called(client: redis.Redis) -> int:
    """How many flows' callbacks ran (once or more)."""
    return len({x.split()[0] for x in client.lrange("wf:failures", 0, -1)})


def once_per_flow(fired: collections.Counter[str], flows: int) -> None:
    """One callback job per flow, naming one of its steps that failed (a
    step whose only attempt a killed process held fails too, its lease lost:
    whichever failure the continuer meets first names the flow's callback).
    A callback run again is its own job's next attempt (a killed process
    held it: at-least-once delivery), never a second job: no attempt number
    twice per flow, every run with the same payload."""
    runs: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for line in fired.elements():
        callback_id, failed_id, attempt = line.split()
        runs[callback_id].append((failed_id, int(attempt)))
    assert sorted(runs) == sorted(f"ff{i}.on_failure" for i in range(flows))
    for callback_id, seen in runs.items():
        flow_id = callback_id.removesuffix(".on_failure")
        assert len({failed for failed, _ in seen}) == 1, (callback_id, seen)
        attempts = [a for _, a in seen]
        assert len(set(attempts)) == len(attempts), (callback_id, seen)
        assert seen[0][0] in {f"{flow_id}.{path}" for path in ("0", "1.0", "1.1")}, seen
