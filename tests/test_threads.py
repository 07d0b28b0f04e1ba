"""The plain handlers' threads (runtime._threads): a run called off gives its
slot back at once, an abandoned thread is counted until it really ends, and
with ``max_abandoned`` of them running no new thread starts."""

from __future__ import annotations

import threading
from typing import cast

import pytest
import trio

from chronos_trio import Job, JobState
from chronos_trio.runtime import HandlerThreads, ThreadRun


def job(n: int) -> Job:
    return Job(f"j{n}", "q", "k", b"", 0.0, JobState.LEASED)


async def _run_blocked(threads: HandlerThreads, run: ThreadRun, gate: threading.Event) -> None:
    """``run``'s thread blocks on ``gate``; called off when cancelled."""
    try:
        await trio.to_thread.run_sync(
            gate.wait, 10, limiter=cast(trio.CapacityLimiter, run), abandon_on_cancel=True
        )
    except trio.Cancelled:
        threads.call_off(run)
        raise


async def _until(predicate: object) -> None:
    with trio.fail_after(10):
        while not predicate():  # type: ignore[operator]
            await trio.sleep(0.005)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        HandlerThreads(0, 1)
    with pytest.raises(ValueError, match="must be >= 1"):
        HandlerThreads(1, 0)


async def test_a_run_called_off_before_its_thread_started_frees_its_slot() -> None:
    threads = HandlerThreads(1, 1)
    run = await threads.wait_slot(job(1))
    threads.call_off(run)
    assert threads.abandoned == 0
    with trio.fail_after(1):
        again = await threads.wait_slot(job(2))  # the slot is free
    threads.call_off(again)


async def test_an_abandoned_thread_frees_its_slot_at_once_and_is_counted_until_it_ends() -> None:
    threads = HandlerThreads(1, 5)
    gate = threading.Event()
    try:
        run = await threads.wait_slot(job(1))
        with trio.move_on_after(0.05):
            await _run_blocked(threads, run, gate)
        assert run.abandoned and threads.abandoned == 1
        with trio.fail_after(1):
            nxt = await threads.wait_slot(job(2))  # not held by the abandoned thread
        threads.call_off(nxt)
        gate.set()
        await _until(lambda: threads.abandoned == 0)
        assert run.ended
    finally:
        gate.set()


async def test_with_max_abandoned_threads_running_no_thread_starts_until_one_ends() -> None:
    threads = HandlerThreads(2, 1)
    gate = threading.Event()
    started: list[ThreadRun] = []
    try:
        first = await threads.wait_slot(job(1))
        with trio.move_on_after(0.05):
            await _run_blocked(threads, first, gate)
        assert threads.abandoned == 1

        async def waiter() -> None:
            started.append(await threads.wait_slot(job(2)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.1)
            assert started == []  # a slot is free, but the cap holds it back
            gate.set()  # the abandoned thread ends
        assert threads.abandoned == 0 and len(started) == 1
        threads.call_off(started[0])
    finally:
        gate.set()
