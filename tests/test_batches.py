"""Batches (issue 29 item 5): ``App.enqueue_batch`` enqueues many jobs as
one, ``Batch.status()`` gives live counts from the group's arrival record,
``on_complete`` runs once with a ``BatchSummary`` when every member
finished (succeeded or failed for good), ``result()`` gives every member's
outcome; the ``batch`` command prints it — on memory (virtual clock),
Redis, PostgreSQL and SQLite."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest
import trio

from chronos_trio import (
    AbortResult,
    App,
    BatchSummary,
    JobContext,
    JobState,
    MemoryStore,
    QueueWeight,
    ResultTimeout,
    SkipRetry,
    UnknownJob,
    chain,
)
from chronos_trio.actors import continuer
from chronos_trio.cli import EXIT_NOT_FOUND, EXIT_OK, main
from chronos_trio.store import SettleKind, Settlement
from tests import tests_app
from tests._backends import Backend


class Batches:
    def __init__(self, store: Any) -> None:
        self.app = app = App(store)
        self.runs: collections.Counter[str] = collections.Counter()
        self.summaries: list[tuple[str, BatchSummary]] = []
        self.gate = trio.Event()

        @app.task("work", max_retries=0)
        async def work(n: int, job: JobContext) -> int:
            self.runs[job.id] += 1
            if n >= 100:
                await self.gate.wait()  # held until the test lets it go
            if n < 0:
                raise SkipRetry(f"{n} is negative")
            return n * 2

        @app.task("summary")
        async def summary(s: BatchSummary, job: JobContext) -> None:
            self.runs[job.id] += 1
            self.summaries.append((job.id, s))

        self.work, self.summary = work, summary


async def test_a_batch_counts_live_and_calls_on_complete_once(
    backend: Backend, clock: object
) -> None:
    b = Batches(backend.store())
    steps = [b.work.s(1), b.work.s(-1), b.work.s(100), b.work.s(3), b.work.s(-2)]
    async with b.app.open_worker(**backend.timing(poll_interval=0.5)):
        batch = await b.app.enqueue_batch(steps, batch_id="b1", on_complete=b.summary.s())
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            while (status := await batch.status()).pending > 1:
                await trio.sleep(0.05)
            # one member held: live counts, no callback yet
            assert (status.total, status.succeeded, status.failed, status.pending) == (5, 2, 2, 1)
            assert status.failed_job_ids == ("b1.0.1", "b1.0.4") and not status.complete
            assert status.callback is None and b.summaries == []
            with pytest.raises(ResultTimeout, match="1 of 5 members still pending"):
                await batch.wait(timeout=0.2)
            b.gate.set()
            done = await batch.wait(timeout=15)
            assert (done.succeeded, done.failed, done.pending, done.complete) == (3, 2, 0, True)
            outcomes = await batch.result(timeout=15)
            while not b.summaries:
                await trio.sleep(0.05)
            await trio.sleep(1.0)
    assert [o.ok for o in outcomes] == [True, False, True, True, False]
    assert [o.result for o in outcomes if o.ok] == [2, 200, 6]
    assert outcomes[1].error is not None and "-1 is negative" in outcomes[1].error
    [(callback, summary)] = b.summaries
    assert callback == "b1.1"
    assert summary == BatchSummary("b1", 5, 3, 2, ["b1.0.1", "b1.0.4"])
    assert all(n == 1 for n in b.runs.values()) and len(b.runs) == 6
    # a handle made elsewhere reads the same counts (its size from the store)
    again = await b.app.batch("b1").status()
    assert (again.total, again.succeeded, again.failed, again.callback) == (5, 3, 2, "succeeded")


async def test_a_batch_without_a_callback_and_its_bad_input(
    backend: Backend, clock: object
) -> None:
    b = Batches(backend.store())
    async with b.app.open_worker(**backend.timing(poll_interval=0.5)):
        batch = await b.app.enqueue_batch([b.work.s(k) for k in range(20)])
        with trio.fail_after(backend.pick(memory=60, redis=20)):
            status = await batch.wait(timeout=15)
    assert (status.total, status.succeeded, status.callback) == (20, 20, None)
    with pytest.raises(UnknownJob, match="no batch"):
        await b.app.batch("nope").status()
    with pytest.raises(TypeError, match="list of steps"):
        await b.app.enqueue_batch(b.work.s(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a payload of its own"):
        await b.app.enqueue_batch([b.work.s()])
    with pytest.raises(TypeError, match="use enqueue_workflow"):
        await b.app.enqueue_batch([chain(b.work.s(1))])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="BatchSummary"):
        await b.app.enqueue_batch([b.work.s(1)], on_complete=b.work.s())
    with pytest.raises(ValueError, match="at least one"):
        await b.app.enqueue_batch([])
    with pytest.raises(ValueError, match="at most 1000 members"):
        await b.app.enqueue_batch([b.work.s(1)] * 1001, batch_id="big")
    assert await b.app.store.get_job("big.0.0") is None, "nothing enqueued"


async def _settled_batch(store: MemoryStore) -> App:
    """Batch ``cli-b`` of three members on ``store`` (its app is
    tests.tests_app's): two settled (one dead), their outcomes recorded."""
    app = tests_app.make_app(None)
    app.use_store(store)
    add = app.tasks["tests.wf_fail"]
    await app.enqueue_batch([add.s(1), add.s(-1), add.s(3)], batch_id="cli-b")
    leased = (await store.lease([QueueWeight("default")], 2, worker_id="w", lease_duration=60)).jobs
    await store.settle(
        [
            Settlement(lj.ref, SettleKind.DEAD, error="SkipRetry: -1 fails")
            if lj.job.payload == b"-1"
            else Settlement(lj.ref, SettleKind.SUCCEEDED, result=lj.job.payload, result_ttl=60)
            for lj in leased
        ]
    )
    await continuer._continue(store, await store.continuations(["default"], 10))
    return app


def test_the_batch_command_prints_live_counts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    store = MemoryStore()
    trio.run(_settled_batch, store)
    monkeypatch.setattr(tests_app.app, "_store", store)
    monkeypatch.setattr(tests_app.app, "_store_url", None)
    assert main(["batch", "tests.tests_app:app", "cli-b"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "batch cli-b: 3 members, 1 succeeded, 1 failed, 1 pending (running)" in out
    assert "failed: cli-b.0.1" in out
    assert main(["batch", "tests.tests_app:app", "cli-b", "--json"]) == EXIT_OK
    got = json.loads(capsys.readouterr().out)
    assert got == {
        "batch_id": "cli-b", "total": 3, "succeeded": 1, "failed": 1, "pending": 1,
        "failed_job_ids": ["cli-b.0.1"], "callback": None, "complete": False,
    }  # fmt: skip
    assert main(["batch", "tests.tests_app:app", "nope"]) == EXIT_NOT_FOUND
    assert "no batch with id 'nope'" in capsys.readouterr().err
    assert JobState.DEAD  # (the dead member stays listed as dead)


async def test_the_dashboard_shows_a_batch_linked_from_its_members() -> None:
    import httpx

    from chronos_trio.dashboard import dashboard_app

    with trio.fail_after(30):
        store = MemoryStore()
        app = await _settled_batch(store)
        transport = httpx.ASGITransport(app=dashboard_app(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as web:
            member = (await web.get("/job", params={"id": "cli-b.0.2"})).text
            assert '<a id="job-batch" href="/batch?id=cli-b"><code>cli-b</code></a>' in member
            plain = (await web.get("/job", params={"id": "cli-b.0.0"})).text
            assert 'id="job-batch"' in plain
            page = await web.get("/batch", params={"id": "cli-b"})
            assert page.status_code == 200, page.text
            assert '<td id="batch-succeeded">1</td>' in page.text
            assert '<td id="batch-failed">1</td>' in page.text
            assert '<td id="batch-pending">1</td>' in page.text
            assert '<a href="/job?id=cli-b.0.1"><code>cli-b.0.1</code></a>' in page.text
            assert "running" in page.text
            missing = await web.get("/batch", params={"id": "nope"})
            assert missing.status_code == 404 and "no batch with id" in missing.text


def test_the_batch_command_counts_an_aborted_member_failed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The member still waiting is aborted: the batch completes (issue 29)."""
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    store = MemoryStore()

    async def abort_the_last() -> None:
        app = await _settled_batch(store)
        assert await app.job("cli-b.0.2").abort("not needed") is AbortResult.ABORTED
        await continuer._continue(store, await store.continuations(["default"], 10))

    trio.run(abort_the_last)
    monkeypatch.setattr(tests_app.app, "_store", store)
    monkeypatch.setattr(tests_app.app, "_store_url", None)
    assert main(["batch", "tests.tests_app:app", "cli-b", "--json"]) == EXIT_OK
    got = json.loads(capsys.readouterr().out)
    assert (got["succeeded"], got["failed"], got["pending"], got["complete"]) == (1, 2, 0, True)
    assert got["failed_job_ids"] == ["cli-b.0.1", "cli-b.0.2"]
