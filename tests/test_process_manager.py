"""The process manager on stand-in children (tiny Python scripts): restarts
with backoff and intensity, fatal exit codes, hung children, graceful stop,
SIGKILL after the shutdown timeout, no orphans on cancellation."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

import pytest
import trio

from chronos_trio.cli._process_manager import (
    ChildCannotStart,
    ProcessManager,
    RestartIntensityExceeded,
)

# argv: heartbeat fd, mode. Modes:
#   ok        ready, beat every 0.1s, exit 0 on SIGTERM or stdin EOF
#   crash     ready, exit 1 after 0.2s
#   fatal     exit 3 at once
#   silent    never write a heartbeat
#   freeze    ready, then stop beating (a stuck event loop)
#   stubborn  like ok, but ignores SIGTERM
CHILD = r"""
import os, signal, sys, threading, time
fd, mode = int(sys.argv[1]), sys.argv[2]
if mode == "fatal":
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
def parent_watch():
    while sys.stdin.buffer.read(1):
        pass
    os._exit(0)
threading.Thread(target=parent_watch, daemon=True).start()
if mode == "silent":
    time.sleep(60)
os.write(fd, b"ready\n")
if mode == "crash":
    time.sleep(0.2)
    os._exit(1)
if mode == "freeze":
    time.sleep(60)
while True:
    time.sleep(0.1)
    os.write(fd, b"beat\n")
"""


def command(*modes: str) -> Callable[[int, int], Sequence[str]]:
    def argv(index: int, fd: int) -> Sequence[str]:
        return [sys.executable, "-c", CHILD, str(fd), modes[index % len(modes)]]

    return argv


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_ready(manager: ProcessManager) -> list[int]:
    while True:
        stats = manager.statistics()
        if all(c.ready for c in stats.children):
            return [c.pid for c in stats.children if c.pid is not None]
        await trio.sleep(0.02)


async def test_graceful_stop_terminates_every_child() -> None:
    manager = ProcessManager(command("ok"), processes=3, shutdown_timeout=5)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            pids = await wait_ready(manager)
            assert len(set(pids)) == 3
            start = trio.current_time()
            manager.stop()
        assert trio.current_time() - start < 2, "SIGTERM, not the SIGKILL timeout"
    assert not any(alive(pid) for pid in pids)
    stats = manager.statistics()
    assert stats.running == 0 and stats.restarts == 0 and stats.stopping


async def test_crashed_child_is_restarted_with_backoff_until_intensity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "chronos_trio.manager")
    manager = ProcessManager(
        command("crash", "ok"),
        processes=2,
        restart_intensity=3,
        restart_period=60,
        backoff_initial=0.1,
        shutdown_timeout=5,
    )
    start = trio.current_time()
    with trio.fail_after(15), pytest.raises(RestartIntensityExceeded):
        await manager.run()
    elapsed = trio.current_time() - start
    # 4 runs of >= 0.2s and backoff 0.1 + 0.2 + 0.4 between them.
    assert elapsed >= 4 * 0.2 + 0.7
    stats = manager.statistics()
    assert stats.children[0].restarts == 3 and stats.children[1].restarts == 0
    assert stats.running == 0, "the healthy child was stopped too"
    text = caplog.text
    assert "worker process exited index=0 pid=" in text and "code=1 status=failed" in text
    assert "restarting worker process index=0 delay=0.1 restart=1" in text
    assert "restarting worker process index=0 delay=0.4 restart=3" in text
    assert "restarted 4 times within 60s; giving up" in text


async def test_fatal_exit_code_gives_up_at_once() -> None:
    manager = ProcessManager(
        command("fatal"), processes=1, fatal_exit_codes=frozenset({3}), backoff_initial=5
    )
    with trio.fail_after(10), pytest.raises(ChildCannotStart) as info:
        await manager.run()
    assert info.value.returncode == 3 and manager.statistics().restarts == 0


@pytest.mark.parametrize(
    ("mode", "timeouts"),
    [
        # Ready, then silent: the liveness timeout applies (the start timeout is long).
        ("freeze", {"liveness_timeout": 0.5, "start_timeout": 30}),
        # Never a heartbeat: the start timeout applies.
        ("silent", {"liveness_timeout": 0.5, "start_timeout": 0.5}),
    ],
)
async def test_child_without_heartbeat_is_killed_and_restarted(
    mode: str, timeouts: dict[str, float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "chronos_trio.manager")
    manager = ProcessManager(
        command(mode),
        processes=1,
        restart_intensity=1,
        backoff_initial=0.05,
        liveness_timeout=timeouts["liveness_timeout"],
        start_timeout=timeouts["start_timeout"],
    )
    with trio.fail_after(10), pytest.raises(RestartIntensityExceeded):
        await manager.run()
    assert caplog.text.count("killing hung worker process index=0 pid=") == 2
    assert 'code=-9 status="killed by SIGKILL (hung: no heartbeat)"' in caplog.text


async def test_child_ignoring_sigterm_is_killed_after_the_shutdown_timeout() -> None:
    manager = ProcessManager(command("stubborn"), processes=2, shutdown_timeout=0.5)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            pids = await wait_ready(manager)
            start = trio.current_time()
            manager.stop()
        assert 0.5 <= trio.current_time() - start < 3
    assert not any(alive(pid) for pid in pids)


async def test_kill_stops_children_at_once() -> None:
    manager = ProcessManager(command("stubborn"), processes=2, shutdown_timeout=30)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            pids = await wait_ready(manager)
            manager.stop()
            await trio.sleep(0.2)
            manager.kill()
    assert not any(alive(pid) for pid in pids)


async def test_cancelling_the_manager_leaves_no_orphans() -> None:
    manager = ProcessManager(command("stubborn"), processes=2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            pids = await wait_ready(manager)
            nursery.cancel_scope.cancel()
    assert not any(alive(pid) for pid in pids)


def test_children_run_in_their_own_session() -> None:
    async def main() -> int:
        manager = ProcessManager(command("ok"), processes=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            [pid] = await wait_ready(manager)
            sid = os.getsid(pid)
            manager.stop()
        return sid

    assert trio.run(main) != os.getsid(0), "a terminal's Ctrl-C must reach only the manager"


def test_rejects_zero_processes() -> None:
    with pytest.raises(ValueError, match="processes must be >= 1"):
        ProcessManager(command("ok"), processes=0)


def test_signal_names_in_exit_descriptions() -> None:
    from chronos_trio.cli._process_manager import _describe_exit

    assert _describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert _describe_exit(0) == "exited" and _describe_exit(1) == "failed"
