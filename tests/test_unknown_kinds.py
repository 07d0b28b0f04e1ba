"""A job of a kind a worker has no handler for goes back for a worker that
has one (issue 23, item 2): a mixed-version fleet (a rolling deploy adding a
task) or two apps sharing a queue must not dead-letter each other's work.
Only once no worker took it within ``unknown_kind_grace`` is it dead, with a
reason that says so. On the MemoryStore under Trio's virtual clock and on a
real Redis (see tests/_backends.py); the store's side is held to the
conformance suite (chronos_trio/testing/_conformance_unclaimed.py)."""

from __future__ import annotations

import argparse
import logging

import httpx
import pytest
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobState, NewJob, WorkerConfig
from chronos_trio.cli._output import iso, job_details, job_json
from chronos_trio.cli._worker_command import add_arguments, build_config
from chronos_trio.dashboard import dashboard_app
from chronos_trio.dashboard._render import iso as dashboard_iso
from chronos_trio.runtime._unknown_kinds import UnknownKinds, shown
from chronos_trio.store import QueueWeight, SettleKind, Settlement, Store
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.testing.damage import redis_client
from tests._backends import Backend

FAST = {"poll_interval": 0.5, "lease_duration": 5.0}
NEW = "v2.only"


class Fleet:
    """Two apps on one store, one queue: an old one that knows only
    ``v1.task`` and a new one that also knows ``v2.only``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.old = App(store)
        self.new = App(store)
        #: (job id, attempt, worker id) of every run of the new kind
        self.runs: list[tuple[str, int, str]] = []
        self.dead: list[chronos_trio.Job] = []

        @self.old.task("v1.task")
        async def v1(payload: bytes, job: JobContext) -> None:
            raise AssertionError("no v1 job is enqueued")

        @self.new.task(NEW)
        async def v2(payload: bytes, job: JobContext) -> None:
            self.runs.append((job.id, job.attempt, job.worker_id))

        for app in (self.old, self.new):

            @app.on_dead_letter
            async def on_dead(job: chronos_trio.Job) -> None:
                self.dead.append(job)

    async def enqueue(self, n: int, **options: object) -> list[str]:
        producer = App(self.store)
        return [
            (await producer.enqueue(NEW, f"job {i}".encode(), **options)).job_id  # type: ignore[arg-type]
            for i in range(n)
        ]


async def test_a_mixed_fleet_runs_every_job_on_the_worker_that_knows_its_kind(
    backend: Backend, clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(backend.store())
    timing = backend.timing(**FAST)
    delay = backend.pick(memory=1.0, redis=0.2)
    alone = backend.pick(memory=10.0, redis=1.0)  # the old worker bounces every job
    with caplog.at_level(logging.WARNING, logger="chronos_trio.worker"):
        async with fleet.old.open_worker(
            worker_id="old-worker", unknown_kind_delay=delay, **timing
        ) as old:
            ids = await fleet.enqueue(40)
            with trio.fail_after(30):
                while old.statistics().unclaimed < 40:
                    await trio.sleep(0.05)
                await trio.sleep(alone)
            async with fleet.new.open_worker(
                worker_id="new-worker", unknown_kind_delay=delay, **timing
            ) as new:
                with trio.fail_after(60):
                    while len(fleet.runs) < 40:
                        await trio.sleep(0.05)
                    await new.wait_idle()
            old_stats, new_stats = old.statistics(), new.statistics()
    # every job ran once, on the new worker, on its first attempt: the
    # bounces spent none
    assert sorted(r[0] for r in fleet.runs) == sorted(ids)
    assert {r[1] for r in fleet.runs} == {1}
    assert {r[2] for r in fleet.runs} == {"new-worker"}
    assert fleet.dead == [] and old_stats.dead == 0 and new_stats.dead == 0
    assert new_stats.succeeded == 40 and old_stats.succeeded == 0
    assert old_stats.unclaimed >= 40
    [stats] = await fleet.store.stats(["default"])
    assert stats.total == 0, stats.counts
    # the old worker warned, naming the kind, a job, the queue and itself,
    # rate-limited per kind: one line for its many bounces
    warnings = [
        r for r in caplog.records if getattr(r, "chronos_event", "").startswith("no handler here")
    ]
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]
    first = warnings[0].chronos_fields  # type: ignore[attr-defined]
    assert first["kind"] == NEW and first["worker"] == "old-worker" and first["queue"] == "default"
    assert first["job"] in ids
    assert f"kind={NEW}" in warnings[0].getMessage()


async def test_a_kind_nobody_knows_is_dead_after_the_grace_not_before(
    backend: Backend, clock: object
) -> None:
    fleet = Fleet(backend.store())
    grace, delay, margin = backend.pick(memory=(60.0, 1.0, 2.0), redis=(1.5, 0.2, 0.4))
    async with fleet.old.open_worker(
        worker_id="old-worker",
        unknown_kind_grace=grace,
        unknown_kind_delay=delay,
        **backend.timing(**FAST),
    ) as old:
        [job_id] = await fleet.enqueue(1, max_retries=0)
        # the first bounce stamps the record; the grace counts from there
        with trio.fail_after(10):
            while (job := await fleet.store.get_job(job_id)) is None or not job.unclaimed_since:
                await trio.sleep(0.02)
        since = job.unclaimed_since
        assert since is not None
        await trio.sleep(max(0.0, since + grace - margin - await fleet.store.now()))
        before = await fleet.store.get_job(job_id)
        read_by = await fleet.store.now()
        assert before is not None and before.unclaimed_since == since, "kept across bounces"
        # (a busy machine may oversleep a real clock: judged only when read in time)
        assert read_by - since < grace or not backend.virtual
        if read_by - since < grace:
            assert before.state is not JobState.DEAD, before
            assert old.statistics().unclaimed >= 3
        with trio.fail_after(grace + 10):
            while not fleet.dead:
                await trio.sleep(0.02)
        stats = old.statistics()
    dead = await fleet.store.get_job(job_id)
    assert dead is not None and dead.state is JobState.DEAD
    assert dead.finished_at is not None
    assert grace <= dead.finished_at - since <= grace + delay + margin
    # the bounces spent no attempt (with max_retries=0 a spent one would
    # have used the job up): it never ran
    assert dead.attempts == 0 and fleet.runs == []
    assert f"no worker registered kind {NEW!r} within {grace:g}s" in dead.last_error
    assert "worker old-worker" in dead.last_error
    assert dead.unclaimed_since == since
    # reported like any dead job: counted, and the dead-letter hooks ran once
    assert stats.dead == 1
    assert [j.id for j in fleet.dead] == [job_id]
    assert fleet.dead[0].last_error == dead.last_error and fleet.dead[0].attempts == 0
    # the job command shows since when
    assert job_json(dead)["unclaimed_since"] == iso(since)
    details = job_details(dead, await fleet.store.now())
    assert f"\nunclaimed since  {iso(since)} (" in details, details


def test_a_huge_kind_is_cut_in_the_warning_and_the_reason() -> None:
    kinds = UnknownKinds(WorkerConfig(worker_id="w"))
    reason = kinds.reason(shown("k" * 1_000_000))
    assert len(reason) < 400 and "(1000000 characters)" in reason


def test_the_options_are_checked() -> None:
    config = WorkerConfig()
    assert config.unknown_kind_grace == 3600.0 and config.unknown_kind_delay == 1.0
    assert WorkerConfig(unknown_kind_grace=0).unknown_kind_grace == 0
    for bad in (-1, float("nan"), float("inf"), "60", True):
        with pytest.raises(ValueError, match="unknown_kind_grace must be a finite number >= 0"):
            WorkerConfig(unknown_kind_grace=bad)  # type: ignore[arg-type]
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="unknown_kind_delay must be a finite number > 0"):
            WorkerConfig(unknown_kind_delay=bad)


def test_the_grace_is_a_cli_worker_option(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def config(*options: str) -> WorkerConfig:
        return build_config(parser.parse_args(["tests.tests_app:app", *options]), "host:1:0")

    assert config().unknown_kind_grace == WorkerConfig().unknown_kind_grace
    assert config("--unknown-kind-grace", "600").unknown_kind_grace == 600.0
    assert config("--unknown-kind-grace", "0").unknown_kind_grace == 0.0
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(SystemExit):
            config("--unknown-kind-grace", bad)
        assert "--unknown-kind-grace: expected seconds >= 0" in capsys.readouterr().err


async def test_the_dashboard_shows_since_when_a_job_goes_unclaimed(autojump_clock: object) -> None:
    store = chronos_trio.MemoryStore()
    fleet = Fleet(store)
    async with fleet.old.open_worker(worker_id="old", **FAST) as old:
        [job_id] = await fleet.enqueue(1)
        with trio.fail_after(10):
            while old.statistics().unclaimed < 1:
                await trio.sleep(0.05)
    job = await store.get_job(job_id)
    assert job is not None and job.unclaimed_since is not None
    asgi = dashboard_app(fleet.old)
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as web:
        page = (await web.get("/job", params={"id": job_id})).text
    shown_at = dashboard_iso(job.unclaimed_since)
    # the time in its <time> tag (the page adds the local time by script)
    cell = page.split("<th>Unclaimed since</th><td>", 1)[1].split("</td>", 1)[0]
    assert f">{shown_at}</time>" in cell, page
    assert "workers without a handler for its kind sent it back" in cell, page


@pytest.mark.redis
async def test_an_unreadable_stamp_counts_as_none_everywhere_on_redis(redis_url: str) -> None:
    """Field ``uc`` is advisory: garbage there is no damage to the checker or
    to reads (they show None), and the next UNCLAIMED settle stamps anew."""
    store = RedisStore.from_url(redis_url, namespace="uc-garbage")
    client = redis_client(redis_url)
    try:
        await store.enqueue_many([NewJob("j", "q", NEW, b"x")])
        [leased] = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=5)).jobs
        key = KeySpace(store.namespace).placed("q", leased.job.placement).job("j")
        # not a number, then a number ahead of the store's clock (shown as
        # stored; the settle counts it as none)
        for garbage, shown_as in (
            (b"soon", None),
            (b"0x10", None),
            (b"nan", None),
            (b"1e999", None),
            (b"9" * 30, 1e30),
        ):
            await trio.to_thread.run_sync(client.hset, key, "uc", garbage)
            job = await store.get_job("j")
            assert job is not None and job.unclaimed_since == shown_as, job
            assert job.damage == "", job
            report = await store.check()
            assert report.findings == (), report.findings
        before = await store.now()
        settle = Settlement(
            leased.ref, SettleKind.UNCLAIMED, error="x", retry_delay=60, unclaimed_grace=1
        )
        applied = await store.settle([settle])
        assert applied.settled == (True,) and applied.unclaimed_dead == frozenset()
        job = await store.get_job("j")
        assert job is not None and job.state is JobState.RETRY_WAIT
        assert job.unclaimed_since is not None
        assert before - 0.01 <= job.unclaimed_since <= await store.now(), "stamped anew"
    finally:
        await store.aclose()
        client.close()


class _CountingStore(chronos_trio.MemoryStore):
    """A MemoryStore that counts the leaser's wait_lease calls (it offers
    none: it answers None, as a store without it does)."""

    def __init__(self) -> None:
        super().__init__()
        self.wait_leases = 0

    async def wait_lease(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        self.wait_leases += 1
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("knows_the_kind", [False, True])
async def test_only_jobs_a_worker_can_run_open_its_wait_lease_window(
    knows_the_kind: bool, autojump_clock: object
) -> None:
    """A worker that leases only kinds it has no handler for never waits
    with wait_lease (on one Redis node that leases in the server the moment
    a bounced job is due again, so an old worker of a mixed fleet would win
    every race for it); one that runs its jobs does."""
    store = _CountingStore()
    fleet = Fleet(store)
    app = fleet.new if knows_the_kind else fleet.old
    async with app.open_worker(worker_id="w", unknown_kind_delay=0.2, **FAST) as worker:
        await fleet.enqueue(5)
        with trio.fail_after(30):
            while (
                worker.statistics().succeeded if knows_the_kind else worker.statistics().unclaimed
            ) < 5:
                await trio.sleep(0.05)
            await trio.sleep(3)
    if knows_the_kind:
        assert store.wait_leases > 0, "a worker that ran jobs waits with wait_lease"
    else:
        assert worker.statistics().unclaimed >= 10  # it kept bouncing them
        assert store.wait_leases == 0
