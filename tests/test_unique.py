"""Unique jobs through the App (issue 14): the task's default and the
per-job option, the derived key, DuplicateJob, and a worker that keeps a
running job's key by its heartbeat and frees it when the job finishes, on
memory (virtual clock) and Redis. The store rules themselves are in the
conformance suite (``check_unique_*``, every backend)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, DuplicateJob, JobContext, JobState, MemoryStore, Unique
from chronos_trio.records._unique import derived_key, unique_of
from tests._backends import Backend


@attrs.frozen
class Email:
    to: str
    subject: str = ""


def email_app(store: Any, **task: Any) -> tuple[App, list[tuple[str, Email]]]:
    app = App(store)
    ran: list[tuple[str, Email]] = []

    @app.task("send", **task)
    async def send(payload: Email, job: JobContext) -> None:
        ran.append((job.id, payload))

    return app, ran


async def test_a_unique_task_stores_one_job_per_payload() -> None:
    app, _ = email_app(MemoryStore(), unique=True)
    send = app.tasks["send"]
    first = await send.enqueue(Email("a@x"))
    again = await send.enqueue(Email("a@x"))
    other = await send.enqueue(Email("b@x"))
    assert first.created and not again.created and again.job_id == first.job_id
    assert other.created and other.job_id != first.job_id
    # per job: another key, or not unique at all
    keyed = await send.enqueue(Email("a@x"), unique="account-7")
    plain = await send.enqueue(Email("a@x"), unique=False)
    assert keyed.created and plain.created
    assert not (await send.enqueue(Email("c@x"), unique="account-7")).created
    assert (await first.status()).state is JobState.READY


async def test_duplicate_job_is_raised_when_asked() -> None:
    app, _ = email_app(MemoryStore(), unique=Unique(raise_duplicate=True))
    send = app.tasks["send"]
    first = await send.enqueue(Email("a@x"))
    with pytest.raises(DuplicateJob) as caught:
        await send.enqueue(Email("a@x"))
    assert caught.value.job_id == first.job_id and caught.value.key.startswith("send:")
    # the same ID again is the same job (idempotent), not a duplicate
    given = await send.enqueue(Email("z@x"), job_id="fixed")
    assert (await send.enqueue(Email("z@x"), job_id="fixed")).job_id == given.job_id


def test_the_derived_key_is_the_kind_and_the_canonical_payload() -> None:
    assert derived_key("k", b'{"a":1,"b":2}') == derived_key("k", b'{"b": 2, "a": 1}')
    assert derived_key("k", b'{"a":1}') != derived_key("k", b'{"a":2}')
    assert derived_key("k", b'{"a":1}') != derived_key("other", b'{"a":1}')
    assert derived_key("k", b"\xff raw") != derived_key("k", b"\xfe raw")  # bytes, not JSON
    assert len(derived_key("k", b"x" * 10_000)) < 40


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (123, "unique must be"),
        ("", "unique key must be"),
        ("k" * 201, "unique key must be"),
    ],
)
def test_bad_unique_options_raise(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        unique_of(value)


def test_bad_unique_settings_raise() -> None:
    with pytest.raises(ValueError, match="throttle needs a ttl"):
        Unique(mode="throttle")
    with pytest.raises(ValueError, match="ttl must be"):
        Unique(ttl=0)
    with pytest.raises(ValueError, match="ttl must be"):
        Unique(ttl=float("inf"))
    with pytest.raises(ValueError, match="mode must be"):
        Unique(mode="once")  # type: ignore[arg-type]


async def test_a_worker_keeps_a_running_job_s_key_and_frees_it_after(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app = App(store)
    started, release = trio.Event(), trio.Event()
    runs: list[str] = []

    # a lock ttl far shorter than the run: only the heartbeat keeps the key
    @app.task("long", unique=Unique(key="the-one", ttl=1.0))
    async def long(payload: int, job: JobContext) -> int:
        runs.append(job.id)
        started.set()
        await release.wait()
        return payload

    task = app.tasks["long"]
    timing = backend.timing(poll_interval=0.5)
    async with app.open_worker(**timing, lease_duration=2.0, heartbeat_interval=0.3):
        first = await task.enqueue(1)
        with trio.fail_after(backend.pick(memory=60, redis=10)):
            await started.wait()
            await trio.sleep(3.0)  # three ttls: the heartbeat renewed the lock
            again = await task.enqueue(2)
            assert not again.created and again.job_id == first.job_id
            release.set()
            await first.result(timeout=10)
            after = await task.enqueue(3)
            assert after.created and after.job_id != first.job_id
            await after.result(timeout=10)
    assert runs == [first.job_id, after.job_id]


async def test_debounce_runs_once_with_the_last_payload(backend: Backend, clock: object) -> None:
    app, ran = email_app(backend.store())
    send = app.tasks["send"]
    debounce = Unique(key="digest", mode="debounce")
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        handles = [
            await send.enqueue(Email("a@x", subject=f"v{n}"), unique=debounce, delay=0.5)
            for n in range(5)
        ]
        assert [h.created for h in handles] == [True, False, False, False, False]
        assert {h.job_id for h in handles} == {handles[0].job_id}
        with trio.fail_after(backend.pick(memory=60, redis=10)):
            await handles[0].result(timeout=10)
            await trio.sleep(0.6)
    assert [(job_id, e.subject) for job_id, e in ran] == [(handles[0].job_id, "v4")]


async def test_unique_jobs_through_the_sync_producer(redis_url: str) -> None:
    from chronos_trio.producers import SyncProducer

    producer = SyncProducer(redis_url, namespace="uniq-sync")
    try:
        first = await trio.to_thread.run_sync(
            lambda: producer.enqueue("send", {"to": "a"}, unique="k1")
        )
        again = await trio.to_thread.run_sync(
            lambda: producer.enqueue("send", {"to": "b"}, unique="k1")
        )
        assert first.created and not again.created and again.job_id == first.job_id
        with pytest.raises(DuplicateJob):
            await trio.to_thread.run_sync(
                lambda: producer.enqueue(
                    "send", {"to": "c"}, unique=Unique(key="k1", raise_duplicate=True)
                )
            )
    finally:
        producer.close()
