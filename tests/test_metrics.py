"""The metrics seam (issue 16, item 1): ``App(metrics=...)`` is fed each
run's outcome with duration, lateness and pickup, leases lost, recoveries
and actor restarts, from the event seam; the figures of a drained run add
up. Memory store on Trio's virtual clock."""

from __future__ import annotations

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobMetric, Retry, SkipRetry
from chronos_trio.runtime._metrics import RoundTripTally


@attrs.frozen
class Work:
    n: int
    fail: str = ""  # "once": Retry on attempt 1; "dead": SkipRetry
    sleep: float = 0.5


class Recorder:
    """A metrics object (the protocol needs nothing else)."""

    def __init__(self) -> None:
        self.finished: list[JobMetric] = []
        self.lost: list[tuple[str, str]] = []
        self.recovered = 0
        self.restarts: list[str] = []

    def job_finished(self, metric: JobMetric) -> None:
        self.finished.append(metric)

    def lease_lost(self, queue: str, kind: str) -> None:
        self.lost.append((queue, kind))

    def jobs_recovered(self, count: int) -> None:
        self.recovered += count

    def actor_restarted(self, actor: str) -> None:
        self.restarts.append(actor)


def make_app(metrics: Recorder | None) -> App:
    app = App(metrics=metrics)

    @app.task("work", max_retries=2)
    async def work(w: Work, job: JobContext) -> None:
        await trio.sleep(w.sleep)
        if w.fail == "once" and job.attempt == 1:
            raise Retry(0.0, "again")
        if w.fail == "dead":
            raise SkipRetry("no")

    return app


async def test_a_drained_run_adds_up(autojump_clock: object) -> None:
    rec = Recorder()
    app = make_app(rec)
    work = app.tasks["work"]
    ok = await work.enqueue_many([Work(n) for n in range(20)])
    retried = await work.enqueue_many([Work(100 + n, fail="once") for n in range(5)])
    dead = await work.enqueue_many([Work(200 + n, fail="dead") for n in range(2)])
    await work.enqueue(Work(300), delay=10.0)  # due later: on time when it runs
    async with app.open_worker(concurrency=4, poll_interval=0.5) as worker:
        with trio.fail_after(120):
            await worker.wait_idle()
            while len(rec.finished) < 20 + 5 * 2 + 2 + 1:
                await trio.sleep(0.1)
        stats = worker.statistics()
    by_outcome: dict[str, int] = {}
    for m in rec.finished:
        by_outcome[m.outcome] = by_outcome.get(m.outcome, 0) + 1
    # every job processed is counted once per run, by what the store recorded
    assert by_outcome == {"succeeded": 20 + 5 + 1, "retried": 5, "dead": 2}
    assert by_outcome["succeeded"] == stats.succeeded and by_outcome["retried"] == stats.retried
    assert all(m.queue == "default" and m.kind == "work" for m in rec.finished)
    assert sorted(m.attempt for m in rec.finished if m.outcome == "retried") == [1] * 5
    assert len(ok) + len(retried) + len(dead) + 1 == 28
    for m in rec.finished:
        assert m.duration is not None and m.duration == pytest.approx(0.5, abs=0.01)
        assert m.lateness is not None and m.pickup is not None
        assert 0 <= m.pickup <= m.lateness + 1e-6, m
    # 27 jobs due at once, 4 at a time, 0.5 s each: the first starts on
    # time, the last of them about 3 s late
    first = sorted(m.lateness for m in rec.finished if m.attempt == 1 and m.lateness is not None)
    assert first[0] < 0.01 and 2.5 < first[-1] < 5.0, first
    assert rec.lost == [] and rec.restarts == []


async def test_no_metrics_object_builds_no_event(autojump_clock: object) -> None:
    app = make_app(None)
    await app.tasks["work"].enqueue_many([Work(n, sleep=0.01) for n in range(5)])
    async with app.open_worker(poll_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
        events = worker.runtime.events
        from chronos_trio.runtime import JobSucceeded

        assert not events.wants(JobSucceeded), "nothing subscribed: no event is made"


async def test_recoveries_and_lost_leases_are_counted(autojump_clock: object) -> None:
    from chronos_trio import MemoryStore, QueueWeight

    rec = Recorder()
    store = MemoryStore()
    app = make_app(rec)
    app.use_store(store)
    await app.tasks["work"].enqueue(Work(1, sleep=0.01))
    # a lease taken by a worker that died: recovered once it expires
    taken = (
        await store.lease([QueueWeight("default")], 1, worker_id="dead", lease_duration=1.0)
    ).jobs
    assert len(taken) == 1
    async with app.open_worker(poll_interval=0.5, recover_interval=0.5) as worker:
        with trio.fail_after(60):
            await worker.wait_idle()
            while not rec.finished:
                await trio.sleep(0.1)
    assert rec.recovered == 1
    assert [m.outcome for m in rec.finished] == ["succeeded"] and rec.finished[0].attempt == 2


def test_the_round_trip_tally_counts_by_operation_and_forgets_what_it_hands_on() -> None:
    tally = RoundTripTally()
    for operation, failed in [
        ("lease", False),
        ("settle", False),
        ("lease", True),
        ("lease", False),
    ]:
        tally(operation, failed)
    assert tally.take() == {"lease": (3, 1), "settle": (1, 0)}
    assert tally.take() == {}


class TripRecorder(Recorder):
    def __init__(self, *, fail: bool = False) -> None:
        super().__init__()
        self.trips: dict[str, list[int]] = {}
        self.fail = fail
        self.calls = 0

    def store_round_trips(self, operation: str, sent: int, failed: int) -> None:
        self.calls += 1
        if self.fail:
            raise RuntimeError("a broken metrics object")
        got = self.trips.setdefault(operation, [0, 0])
        got[0] += sent
        got[1] += failed


@pytest.mark.redis
@pytest.mark.parametrize("fail", [False, True], ids=["counts", "raising"])
async def test_store_round_trips_are_fed_off_the_store_path_and_all_at_stop(
    redis_url: str, fail: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Every batch the store sent reaches ``store_round_trips`` (the last
    ones when the worker stops), counted by the store's own adapter too; a
    metrics object that raises costs no job."""
    rec = TripRecorder(fail=fail)
    app = make_app(rec)
    app.use_store(redis_url)
    seen = 0
    with trio.fail_after(20):
        async with app.open_worker(concurrency=8, poll_interval=0.2) as worker:
            adapter = app.store._adapter  # type: ignore[attr-defined]
            tally = adapter.observer
            assert tally is not None, "the worker hands the store a tally"

            def spy(operation: str, failed: bool) -> None:
                nonlocal seen
                seen += 1
                tally(operation, failed)

            adapter.observer = spy
            await app.tasks["work"].enqueue_many([Work(i, sleep=0.0) for i in range(20)])
            await worker.wait_idle()
        assert adapter.observer is None, "a stopped worker leaves the store unobserved"
    assert worker.statistics().succeeded == 20
    assert rec.calls >= 1, "the counts reached the metrics object"
    if fail:
        assert any("store_round_trips raised" in r.getMessage() for r in caplog.records)
    else:
        assert rec.trips["lease"][0] >= 1 and rec.trips["settle"][0] >= 1
        assert all(failed == 0 for _, failed in rec.trips.values())
        # every batch the store reported reached the metrics, the last ones
        # (the final settles, the registry's goodbye) once the worker stopped
        assert sum(s for s, _ in rec.trips.values()) >= seen > 0
    await app.store.aclose()
