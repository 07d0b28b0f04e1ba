"""The event seam: outcomes are published after the store applied them, and
user code (dead-letter hooks, other subscribers) runs in the notifier, never
on the settle path: a hook that never returns or one that raises cannot delay
or break unrelated jobs, and a backlog is bounded and counted."""

from __future__ import annotations

import logging

import pytest
import trio

from chronos_trio import App, Job, JobContext, JobState, MemoryStore, SkipRetry
from chronos_trio.runtime import (
    ActorRestarted,
    Event,
    EventBus,
    JobDead,
    JobRetried,
    JobsRecovered,
    JobSucceeded,
    LeaseLost,
)
from chronos_trio.store import QueueWeight
from chronos_trio.testing import FaultyStore
from tests._support import wait_for

FAST = {"poll_interval": 0.5, "lease_duration": 5.0}


def _app() -> tuple[App, list[str]]:
    app = App(MemoryStore())
    finished: list[str] = []

    @app.task("ok")
    async def ok(args: bytes, job: JobContext) -> None:
        await trio.sleep(0.01)
        finished.append(job.id)

    @app.task("doomed")
    async def doomed(args: bytes, job: JobContext) -> None:
        raise SkipRetry("no")

    return app, finished


async def test_a_hook_that_never_returns_delays_no_unrelated_job(autojump_clock: object) -> None:
    app, finished = _app()
    hook_calls: list[str] = []

    @app.on_dead_letter
    async def stuck(job: Job) -> None:
        hook_calls.append(job.id)
        await trio.sleep_forever()

    async with app.open_worker(concurrency=8, batch_size=8, **FAST) as worker:
        start = trio.current_time()
        for i in range(5):
            await app.enqueue("doomed", b"x", job_id=f"dead-{i}")
        ok_ids = [r.job_id for r in await app.tasks["ok"].enqueue_many([b"y"] * 40)]
        with trio.fail_after(60):
            await wait_for(lambda: len(finished) == 40)
            # Every unrelated job is settled (gone from the store) long before
            # a single hook's 10 s timeout, while all five hooks still hang.
            [stats] = await app.store.stats(["default"])
            while stats.counts[JobState.READY] or stats.counts[JobState.LEASED]:
                await trio.sleep(0.01)
                [stats] = await app.store.stats(["default"])
        settled_after = trio.current_time() - start
        assert [await app.store.get_job(i) for i in ok_ids] == [None] * 40
        assert settled_after < 1.0, settled_after
        assert stats.counts[JobState.DEAD] == 5
        # Leasing went on: a job enqueued now runs at once.
        late = await app.enqueue("ok", b"late")
        with trio.fail_after(60):
            await wait_for(lambda: late.job_id in finished)
        assert trio.current_time() - start < 2.0
        assert sorted(hook_calls) == [f"dead-{i}" for i in range(5)]
        assert worker.statistics().events_dropped == 0


async def test_a_hung_hook_is_cancelled_after_its_timeout(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    app, _ = _app()
    ended: list[float] = []

    @app.on_dead_letter
    async def stuck(job: Job) -> None:
        try:
            await trio.sleep_forever()
        finally:
            ended.append(trio.current_time())

    async with app.open_worker(hook_timeout=3.0, **FAST):
        start = trio.current_time()
        await app.enqueue("doomed", b"x")
        with trio.fail_after(60):
            await wait_for(lambda: ended)
    assert ended[0] - start == pytest.approx(3.0, abs=0.05)
    assert "event subscriber timed out subscriber=" in caplog.text
    assert "on=JobDead timeout=3.0" in caplog.text


async def test_a_crashing_hook_is_logged_and_the_worker_goes_on(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    app, finished = _app()
    seen: list[str] = []

    @app.on_dead_letter
    async def broken(job: Job) -> None:
        raise RuntimeError(f"hook bug for {job.id}")

    @app.on_dead_letter
    async def fine(job: Job) -> None:
        seen.append(job.id)

    with caplog.at_level(logging.ERROR, logger="chronos_trio.events"):
        async with app.open_worker(**FAST) as worker:
            for i in range(3):
                await app.enqueue("doomed", b"x", job_id=f"d{i}")
            await app.enqueue("ok", b"y", job_id="after")
            with trio.fail_after(60):
                await wait_for(lambda: len(seen) == 3 and "after" in finished)
                await worker.wait_idle()
            stats = worker.statistics()
    assert sorted(seen) == ["d0", "d1", "d2"]
    assert stats.restarts == {} and stats.dead == 3 and stats.succeeded == 1
    assert caplog.text.count("hook bug for d") == 3
    assert "'broken'" in caplog.text or "broken" in caplog.text


async def test_a_backlog_of_events_is_bounded_and_counted(autojump_clock: object) -> None:
    app, _ = _app()
    release = trio.Event()
    calls: list[str] = []

    @app.on_dead_letter
    async def slow(job: Job) -> None:
        calls.append(job.id)
        await release.wait()

    options = {**FAST, "event_buffer": 3, "hook_concurrency": 1, "hook_timeout": 600.0}
    async with app.open_worker(**options) as worker:
        for i in range(20):
            await app.enqueue("doomed", b"x", job_id=f"d{i:02}")
        with trio.fail_after(60):
            await wait_for(lambda: worker.statistics().dead == 20)
        stats = worker.statistics()
        # One hook runs, the notifier holds the next event for the one place,
        # three wait in the buffer, and the other fifteen were dropped.
        assert stats.events_dropped == 15
        assert worker.runtime.events.pending == 3
        release.set()
        with trio.fail_after(60):
            await wait_for(lambda: len(calls) == 5)
    # Delivered in publish order; which five depends on how the completer's
    # batches interleaved with the notifier, never more than 1 + 1 + buffer.
    assert calls[0] == "d00" and calls == sorted(calls) and len(set(calls)) == 5
    [s] = await app.store.stats(["default"])
    assert s.counts[JobState.DEAD] == 20  # every dead job is in the store all the same


async def test_outcome_events_carry_what_the_store_applied(autojump_clock: object) -> None:
    app = App(MemoryStore())

    @app.task("work", max_retries=1)
    async def work(args: bytes, job: JobContext) -> None:
        await trio.sleep(0.5)
        if args == b"fail" and job.attempt == 1:
            raise ValueError("first try fails")
        if args == b"dead":
            raise SkipRetry("never")

    events: list[Event] = []
    async with app.open_worker(**FAST) as worker:
        worker.runtime.events.subscribe(
            (JobSucceeded, JobRetried, JobDead, ActorRestarted), events.append
        )
        for payload in (b"ok", b"fail", b"dead"):
            await work.enqueue(payload, job_id=payload.decode())
        with trio.fail_after(60):
            await worker.wait_idle()
        worker.crash_actor("promoter", RuntimeError("injected"))
        with trio.fail_after(60):
            await wait_for(lambda: any(isinstance(e, ActorRestarted) for e in events))
    succeeded = [e for e in events if isinstance(e, JobSucceeded)]
    assert sorted(e.job.id for e in succeeded) == ["fail", "ok"]
    assert all(e.duration == pytest.approx(0.5, abs=0.01) for e in succeeded)
    [retried] = [e for e in events if isinstance(e, JobRetried)]
    assert retried.job.id == "fail" and retried.job.attempts == 1 and retried.delay == 1.0
    assert retried.error.startswith("ValueError: first try fails")
    [dead] = [e for e in events if isinstance(e, JobDead)]
    assert dead.job.id == "dead" and dead.job.state is JobState.DEAD and not dead.recovered
    assert dead.error.startswith("SkipRetry: never") and dead.job.last_error == dead.error
    assert dead.duration == pytest.approx(0.5, abs=0.01)
    [restarted] = [e for e in events if isinstance(e, ActorRestarted)]
    assert restarted.actor == "promoter" and restarted.restarts == 1
    assert "injected" in restarted.error


async def test_lease_loss_and_recovery_are_published(autojump_clock: object) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    app = App(store)
    lost_seen: list[bool] = []

    @app.task("slow")
    async def slow(args: bytes, job: JobContext) -> None:
        try:
            await trio.sleep(100)
        finally:
            lost_seen.append(job.lease_lost)

    events: list[Event] = []
    async with app.open_worker(lease_duration=3.0, poll_interval=0.5) as worker:
        worker.runtime.events.subscribe((LeaseLost, JobsRecovered), events.append)
        await slow.enqueue(b"x", job_id="s")
        with trio.fail_after(30):
            await wait_for(lambda: worker.statistics().running == 1)
        # Renewals cannot reach the store: the lease expires and is taken
        # back; once they get through again the store refuses them.
        store.break_ops("renew")
        with trio.fail_after(30):
            await wait_for(lambda: any(isinstance(e, JobsRecovered) for e in events))
        store.heal()
        with trio.fail_after(30):
            await wait_for(lambda: lost_seen)
        worker.stop()
    assert lost_seen[0] is True
    assert any(isinstance(e, JobsRecovered) and e.job_ids == ("s",) for e in events)
    assert any(isinstance(e, LeaseLost) and e.job.id == "s" for e in events)


async def test_publishing_an_event_nobody_wants_costs_nothing() -> None:
    bus = EventBus(capacity=1)
    bus.publish(JobsRecovered(("a",)))
    bus.publish(JobsRecovered(("b",)))
    assert bus.pending == 0 and bus.dropped == 0 and not bus.wants(JobsRecovered)
    seen: list[Event] = []
    bus.subscribe(JobsRecovered, seen.append)
    bus.publish(JobsRecovered(("c",)))
    bus.publish(JobsRecovered(("d",)))
    assert bus.pending == 1 and bus.dropped == 1
    with pytest.raises(TypeError, match="not an event type"):
        bus.subscribe(QueueWeight, seen.append)


async def test_a_lease_that_cannot_be_renewed_is_given_up_before_it_expires(
    autojump_clock: object,
) -> None:
    store = FaultyStore(MemoryStore())
    app = App(store)
    ended: list[tuple[float, bool]] = []

    @app.task("long")
    async def long(args: bytes, job: JobContext) -> None:
        try:
            await trio.sleep(100)
        finally:
            ended.append((trio.current_time(), job.lease_lost))

    async with app.open_worker(lease_duration=3.0, poll_interval=0.5) as worker:
        await long.enqueue(b"x")
        with trio.fail_after(30):
            await wait_for(lambda: worker.statistics().running == 1)
        started = trio.current_time()
        store.break_ops("renew")  # renewals no longer get through
        with trio.fail_after(30):
            await wait_for(lambda: ended)
        # Given up at the first heartbeat past 95% of the lease, while the
        # store still held it for this worker: no other worker could have
        # started the job yet, so it never runs twice at once.
        stopped_at, lost = ended[0]
        assert lost is True
        assert stopped_at - started <= 3.0 + 0.01
        store.heal()
        worker.stop()
