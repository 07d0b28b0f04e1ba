"""The worker end to end, on the MemoryStore under Trio's virtual clock and on
a real Redis with short real intervals (see tests/_backends.py)."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import pytest
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobState, MemoryStore, PayloadError, SkipRetry
from tests._backends import Backend
from tests._support import Recorder, Work, lose_lease, wait_for

FAST = {"poll_interval": 0.5, "lease_duration": 5.0}


def default_retry(backend: Backend) -> dict[str, chronos_trio.RetryPolicy]:
    """The worker's default retry policy (1 s, doubling) on memory; on Redis,
    a tenth of it: backoff times scale by ``backoff_scale(backend)``."""
    return backend.pick(memory={}, redis={"retry": chronos_trio.RetryPolicy(base=0.1)})


def backoff_scale(backend: Backend) -> float:
    return backend.pick(memory=1.0, redis=0.1)


async def test_jobs_run_once_each(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    n = backend.pick(memory=100, redis=40)
    async with rec.app.open_worker(
        concurrency=8, batch_size=16, **backend.timing(**FAST)
    ) as worker:
        results = await rec.work.enqueue_many([Work(i, sleep=0.1) for i in range(n)])
        with trio.fail_after(60):
            await worker.wait_idle()
        stats = worker.statistics()
    assert {r.job_id for r in results} == set(rec.finished)
    assert all(n == 1 for n in rec.finished.values())
    assert stats.succeeded == n and stats.dead == 0 and stats.in_flight == 0
    assert await rec.states() == {}


async def test_statistics_read_every_counter(autojump_clock: object) -> None:
    """``WorkerStatistics`` is the runtime's counters, field for field, plus
    the worker's own figures: a counter cannot be added without a statistic,
    and ``statistics()`` reads every one (none copied by hand goes stale)."""
    import attrs

    from chronos_trio.runtime._state import Counters

    own = {
        "worker_id",
        "in_flight",
        "running",
        "events_dropped",
        "restarts",
        "abandoned_threads",
        "recycled",
        "isolated_replaced",
    }
    counted = set(attrs.fields_dict(Counters))
    assert set(attrs.fields_dict(chronos_trio.WorkerStatistics)) == counted | own
    assert not counted & own
    app = App()
    async with app.open_worker() as worker:
        counters = worker.runtime.counters
        for n, name in enumerate(sorted(counted), 1):
            setattr(counters, name, 100 + n)
        stats = worker.statistics()
    assert {name: getattr(stats, name) for name in counted} == attrs.asdict(counters)
    assert len(set(attrs.asdict(counters).values())) == len(counted)


async def test_concurrency_is_bounded(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    n, sleep = backend.pick(memory=(40, 1.0), redis=(15, 0.2))
    async with rec.app.open_worker(concurrency=5, **backend.timing(**FAST)) as worker:
        await rec.work.enqueue_many([Work(i, sleep=sleep) for i in range(n)])
        with trio.fail_after(60):
            await worker.wait_idle()
    assert len(rec.finished) == n
    assert rec.peak == 5


async def test_delayed_job_starts_at_its_due_time(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    delay, at = backend.pick(memory=(42.0, 7.0), redis=(1.0, 0.5))
    async with rec.app.open_worker(**backend.timing(**FAST)) as worker:
        start = trio.current_time()
        await rec.work.enqueue(Work(1), delay=delay)
        # The store's own clock: on memory it is the virtual clock anchored to
        # the wall once, so the wall clock drifts from it by real time spent.
        now = await rec.store.now()
        when = dt.datetime.fromtimestamp(now, dt.UTC) + dt.timedelta(seconds=at)
        await rec.work.enqueue(Work(2), run_at=when)
        with trio.fail_after(100):
            await worker.wait_idle()
    times = sorted(t - start for _, _, t in rec.runs)
    assert times[0] == backend.around(at, abs=0.05)
    assert times[1] == backend.around(delay, abs=0.01)


async def test_jobs_due_within_a_short_wait_are_punctual(autojump_clock: object) -> None:
    # Memory only: sub-millisecond lateness is a promise of the virtual clock.
    # Due times closer than the promoter's SHORT_WAIT are slept until (no
    # blocking wait in the store): each job of a dense stream starts on time,
    # and one scheduled meanwhile, due before the job slept for, is late by
    # less than SHORT_WAIT.
    from chronos_trio.actors.promoter import SHORT_WAIT

    rec = Recorder(MemoryStore())
    async with rec.app.open_worker(**FAST) as worker:
        await trio.sleep(1)
        start = trio.current_time()
        dues = {}
        for i in range(20):
            res = await rec.work.enqueue(Work(i), delay=0.05 + i * 0.001)
            dues[res.job_id] = start + 0.05 + i * 0.001
        await trio.sleep(0.05 + 0.0005)  # the promoter now sleeps ~0.5 ms to the next
        late = await rec.work.enqueue(Work(99), delay=0.0002)
        dues[late.job_id] = trio.current_time() + 0.0002
        with trio.fail_after(30):
            await worker.wait_idle()
    starts = {job_id: t for job_id, _, t in rec.runs}
    lateness = {job_id: starts[job_id] - due for job_id, due in dues.items()}
    assert all(-1e-6 <= v < 0.001 for k, v in lateness.items() if k != late.job_id), lateness
    assert -1e-6 <= lateness[late.job_id] <= SHORT_WAIT


async def test_retry_backoff_doubles(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store(), max_retries=5)
    scale = backoff_scale(backend)
    async with rec.app.open_worker(**default_retry(backend), **backend.timing(**FAST)) as worker:
        [res] = [await rec.work.enqueue(Work(1, fail_times=4))]
        with trio.fail_after(100):
            await worker.wait_idle()
    times = [t for job_id, _, t in rec.runs if job_id == res.job_id]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == [backend.around(gap * scale, abs=0.02) for gap in (1.0, 2.0, 4.0, 8.0)]
    assert [a for _, a, _ in rec.runs] == [1, 2, 3, 4, 5]
    assert rec.finished[res.job_id] == 1


async def test_backoff_is_capped(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store(), max_retries=10)
    scale = backend.pick(memory=1.0, redis=0.02)
    policy = chronos_trio.RetryPolicy(base=10 * scale, max_delay=25 * scale)
    async with rec.app.open_worker(retry=policy, **backend.timing(**FAST)) as worker:
        await rec.work.enqueue(Work(1, fail_times=3))
        with trio.fail_after(200):
            await worker.wait_idle()
    times = [t for _, _, t in rec.runs]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == [backend.around(gap * scale, abs=0.02) for gap in (10.0, 20.0, 25.0)]


async def test_retries_exhausted_goes_dead_and_fires_hook(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store(), max_retries=2)
    async with rec.app.open_worker(**default_retry(backend), **backend.timing(**FAST)) as worker:
        res = await rec.work.enqueue(Work(1, fail_times=99))
        with trio.fail_after(100):
            await worker.wait_idle()
    assert len(rec.runs) == 3
    job = await rec.store.get_job(res.job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 3
    assert "retries exhausted after 3 attempt(s)" in job.last_error
    assert "planned failure 3" in job.last_error
    assert [j.id for j in rec.dead] == [res.job_id]


async def test_skip_retry_dead_letters_at_once(backend: Backend, clock: object) -> None:
    app = App(backend.store())
    dead: list[chronos_trio.Job] = []

    @app.task("charge", max_retries=5)
    async def charge(args: dict[str, int], job: JobContext) -> None:
        raise SkipRetry("card declined")

    app.on_dead_letter(lambda job: _append(dead, job))
    async with app.open_worker(**backend.timing(**FAST)) as worker:
        res = await charge.enqueue({"cents": 100})
        with trio.fail_after(30):
            await worker.wait_idle()
    job = await app.store.get_job(res.job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 1
    assert job.last_error.startswith("SkipRetry: card declined")
    assert [j.id for j in dead] == [res.job_id]


async def _append(items: list[chronos_trio.Job], job: chronos_trio.Job) -> None:
    items.append(job)


async def test_timeout_cancels_handler_and_counts_as_failure(
    backend: Backend, clock: object
) -> None:
    app = App(backend.store())
    cancelled: list[float] = []
    # A 3 s timeout and the default 1 s backoff; on Redis a tenth of each.
    scale = backoff_scale(backend)

    @app.task("slow", timeout=3.0 * scale, max_retries=1)
    async def slow(args: bytes, job: JobContext) -> None:
        try:
            await trio.sleep(1000)
        except trio.Cancelled:
            cancelled.append(trio.current_time())
            raise

    async with app.open_worker(**default_retry(backend), **backend.timing(**FAST)) as worker:
        start = trio.current_time()
        res = await slow.enqueue(b"")
        with trio.fail_after(60):
            await worker.wait_idle()
    # The retry runs its own full timeout after the backoff.
    expected = [backend.around(t * scale, abs=0.05) for t in (3.0, 7.0)]
    assert [t - start for t in cancelled] == expected
    job = await app.store.get_job(res.job_id)
    assert job is not None and job.state is JobState.DEAD
    assert f"exceeded its {3.0 * scale:g}s timeout" in job.last_error


async def test_each_handler_gets_its_own_timeout_on_a_shared_executor(
    backend: Backend, clock: object
) -> None:
    # One executor runs every job in turn: a short timeout started after a long
    # one is still enforced on time, an earlier job's deadline never cancels
    # a later job, and the executor keeps working after a timeout.
    app = App(backend.store())
    ended: dict[str, tuple[str, float]] = {}
    # Seconds: long's timeout, short's start and timeout, quick's sleep and
    # timeout, later's sleep (it outlives long's deadline) and timeout.
    long_t, short_at, short_t, quick, quick_t, later, later_t = backend.pick(
        memory=(100.0, 1.0, 2.0, 0.5, 1.0, 150.0, 200.0),
        redis=(1.0, 0.1, 0.2, 0.05, 0.5, 1.2, 3.0),
    )

    @app.task("sleepy", max_retries=0)
    async def sleepy(args: bytes, job: JobContext) -> None:
        name, seconds = args.decode().split(":")
        try:
            await trio.sleep(float(seconds))
        except trio.Cancelled:
            ended[name] = ("cancelled", trio.current_time() - start)
            raise
        ended[name] = ("done", trio.current_time() - start)

    async with app.open_worker(concurrency=2, **backend.timing(**FAST)) as worker:
        start = trio.current_time()
        await sleepy.enqueue(b"long:1000", timeout=long_t)
        await trio.sleep(short_at)
        await sleepy.enqueue(b"short:1000", timeout=short_t)  # due before the long one
        with trio.fail_after(300):
            await wait_for(lambda: "short" in ended, poll=backend.pick(memory=0.1, redis=0.01))
        # The executor that timed out runs a job that outlives both earlier
        # jobs' deadlines and finishes.
        short_ended = trio.current_time() - start
        await sleepy.enqueue(f"quick:{quick}".encode(), timeout=quick_t)
        await sleepy.enqueue(f"later:{later}".encode(), timeout=later_t)
        with trio.fail_after(400):
            await worker.wait_idle()
        stats = worker.statistics()
    assert (stats.dead, stats.succeeded) == (2, 2)
    assert ended["short"] == ("cancelled", backend.around(short_at + short_t, abs=0.05))
    assert ended["long"] == ("cancelled", backend.around(long_t, abs=0.05))
    assert ended["quick"][0] == "done"
    assert ended["later"] == ("done", backend.around(short_ended + quick + later, abs=0.1))


async def test_a_cancel_too_late_for_its_handler_spares_the_next_job(
    backend: Backend, clock: object
) -> None:
    # The lease of A is lost in the same instant A's handler is released to
    # return normally: the cancel misses A. B, already queued for the same
    # executor, must run in a fresh scope, not be cancelled as a "timeout".
    app = App(backend.store())
    gate = trio.Event()
    finished: list[str] = []

    @app.task("gated", max_retries=3)
    async def gated(args: bytes, job: JobContext) -> None:
        if args == b"A":
            await gate.wait()
        else:
            await trio.sleep(backend.pick(memory=1.0, redis=0.3))
        finished.append(args.decode())

    # Succeeded jobs are kept, so B's record shows how it ended.
    async with app.open_worker(
        concurrency=1, retain_succeeded=600, **backend.timing(**FAST)
    ) as worker:
        await gated.enqueue(b"A", job_id="A")
        b = await gated.enqueue(b"B", job_id="B")
        with trio.fail_after(30):
            await wait_for(lambda: worker.statistics().running == 1)
            gate.set()  # A is rescheduled with a value...
            lose_lease(worker, "A")  # ...so this cancel cannot reach it any more
            await worker.wait_idle()
        stats = worker.statistics()
    assert finished == ["A", "B"]
    job_b = await app.store.get_job(b.job_id)
    assert job_b is not None and job_b.state is JobState.SUCCEEDED
    assert job_b.attempts == 1 and not job_b.last_error
    assert (stats.succeeded, stats.retried, stats.dead) == (2, 0, 0)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"not json at all", "payload is not valid JSON"),
        (b'{"wrong": 1}', "payload does not structure as Work"),
        (b'{"n": "not a number"}', "payload does not structure as Work"),
    ],
)
async def test_bad_payload_is_dead_with_clear_error(
    payload: bytes, expected: str, backend: Backend, clock: object
) -> None:
    rec = Recorder(backend.store(), max_retries=3)
    async with rec.app.open_worker(**backend.timing(**FAST)) as worker:
        # A producer that does not share our types sends raw bytes.
        producer = App(rec.store)
        res = await producer.enqueue("work", payload)
        with trio.fail_after(30):
            await worker.wait_idle()
    job = await rec.store.get_job(res.job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 1
    # The error says what went wrong; the job's id and kind are in its record.
    assert job.last_error.startswith(expected) and res.job_id not in job.last_error
    assert rec.runs == [] and [j.id for j in rec.dead] == [res.job_id]


async def test_unknown_kind_is_dead_with_clear_error(backend: Backend, clock: object) -> None:
    # (with unknown_kind_grace=0: at once; see tests/test_unknown_kinds.py for the grace)
    rec = Recorder(backend.store())
    async with rec.app.open_worker(unknown_kind_grace=0, **backend.timing(**FAST)) as worker:
        res = await App(rec.store).enqueue("no.such.kind", {"x": 1})
        with trio.fail_after(30):
            await worker.wait_idle()
    job = await rec.store.get_job(res.job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 0
    assert "no worker registered kind 'no.such.kind' within 0s" in job.last_error
    assert [j.id for j in rec.dead] == [res.job_id]


async def test_enqueue_validates_input_and_loses_nothing(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    rec.app.max_payload_bytes = 1000
    with pytest.raises(PayloadError, match="over the 1000-byte limit"):
        await App.enqueue(rec.app, "work", b"x" * 1001)
    with pytest.raises(PayloadError, match="expected a Work payload"):
        await rec.work.enqueue({"n": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay must be a finite number of seconds >= 0"):
        await rec.work.enqueue(Work(1), delay=-1)
    for endless in (math.inf, math.nan):
        with pytest.raises(ValueError, match="delay must be a finite number"):
            await rec.work.enqueue(Work(1), delay=endless)
        with pytest.raises(ValueError, match="run_at must be an aware datetime or finite epoch"):
            await rec.work.enqueue(Work(1), run_at=endless)
    # Misspelled, empty and mistyped options (issue 23, item 5): on main the
    # first two were stored (dely ignored: the job ran at once; "" became
    # the task's queue) and the third was a bare "'>' not supported".
    with pytest.raises(TypeError, match=r"unknown enqueue option 'dely' \(did you mean 'delay'"):
        await rec.work.enqueue(Work(1), dely=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown enqueue option 'dely'"):
        await App.enqueue(rec.app, "work", Work(1), dely=5)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="queue must be a non-empty string, got ''"):
        await rec.work.enqueue(Work(1), queue="")
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0, got '5'"):
        await rec.work.enqueue(Work(1), timeout="5")  # type: ignore[arg-type]
    # A batch is checked whole before anything is sent: one bad payload, none stored.
    with pytest.raises(PayloadError, match="expected a Work payload"):
        await rec.work.enqueue_many([Work(1), Work(2), {"n": 3}])  # type: ignore[list-item]
    with pytest.raises(PayloadError, match="over the 1000-byte limit"):
        await rec.work.enqueue_many([Work(1), Work(2, fail_times=10**1100)])
    with pytest.raises(ValueError, match="either delay or run_at"):
        await rec.work.enqueue(Work(1), delay=1, run_at=5.0)
    with pytest.raises(ValueError, match="timezone-aware"):
        await rec.work.enqueue(Work(1), run_at=dt.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="max_retries"):
        await rec.work.enqueue(Work(1), max_retries=-2)
    assert await rec.store.queues() == []


async def test_explicit_job_id_is_idempotent(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    delay = backend.pick(memory=10.0, redis=0.3)
    first = await rec.work.enqueue(Work(1), job_id="order-42", delay=delay)
    second = await rec.work.enqueue(Work(2), job_id="order-42")
    assert first.created and not second.created
    async with rec.app.open_worker(**backend.timing(**FAST)) as worker:
        with trio.fail_after(30):
            await worker.wait_idle()
    assert rec.finished == {"order-42": 1}
    third = await rec.work.enqueue(Work(3), job_id="order-42")
    assert third.created, "once the job is gone the ID may be used again"


async def test_handler_can_enqueue_follow_up_jobs(backend: Backend, clock: object) -> None:
    app = App(backend.store())
    done: list[int] = []

    @app.task("countdown")
    async def countdown(n: int, job: JobContext) -> None:
        done.append(n)
        if n:
            await job.app.enqueue("countdown", n - 1)

    async with app.open_worker(**backend.timing(**FAST)) as worker:
        await countdown.enqueue(5)
        with trio.fail_after(30):
            await worker.wait_idle()
    assert done == [5, 4, 3, 2, 1, 0]


async def test_weighted_queues_prefer_heavier(backend: Backend, clock: object) -> None:
    app = App(backend.store())
    order: list[str] = []

    @app.task("q")
    async def q(args: str, job: JobContext) -> None:
        order.append(job.queue)
        await trio.sleep(0.01)

    await q.enqueue_many(["x"] * 40, queue="high")
    await q.enqueue_many(["x"] * 40, queue="low")
    async with app.open_worker(
        queues="high=4,low=1", concurrency=1, batch_size=5, **backend.timing(**FAST)
    ) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
    first = order[:40]
    assert first.count("high") > 2 * first.count("low") > 0
    assert order.count("low") == 40


async def test_paused_queue_waits_until_resumed(backend: Backend, clock: object) -> None:
    rec = Recorder(backend.store())
    await rec.store.set_paused("default", True)
    async with rec.app.open_worker(**backend.timing(**FAST)):
        await rec.work.enqueue_many([Work(i) for i in range(3)])
        await trio.sleep(backend.pick(memory=5.0, redis=0.5))
        assert rec.runs == []
        await rec.store.set_paused("default", False)
        with trio.fail_after(10):
            await wait_for(lambda: len(rec.finished) == 3)


async def test_retained_success_is_inspectable_then_trimmed(
    backend: Backend, clock: object
) -> None:
    rec = Recorder(backend.store())
    # Kept for `retain`, trimmed by a janitor pass every `every`, gone by `gone`.
    retain, every, gone = backend.pick(memory=(30.0, 10.0, 45.0), redis=(0.5, 0.2, 1.2))
    opts = backend.timing(**FAST)
    async with rec.app.open_worker(retain_succeeded=retain, janitor_interval=every, **opts):
        res = await rec.work.enqueue(Work(1))
        with trio.fail_after(10):
            await wait_for(lambda: len(rec.finished) == 1)
        await trio.sleep(0.1)
        job = await rec.store.get_job(res.job_id)
        assert job is not None and job.state is JobState.SUCCEEDED
        await trio.sleep(gone)
        assert await rec.store.get_job(res.job_id) is None


async def test_bad_worker_options_fail_clearly() -> None:
    app = App(MemoryStore())
    with pytest.raises(TypeError, match="unknown worker option"):
        async with app.open_worker(concurency=3):
            pass
    with pytest.raises(ValueError, match="must be shorter than lease_duration"):
        async with app.open_worker(lease_duration=1, heartbeat_interval=2):
            pass
    with pytest.raises(ValueError, match="expected name=INT"):
        async with app.open_worker(queues="a=x"):
            pass
