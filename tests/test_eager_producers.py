"""Eager mode's stand-ins for the producers outside Trio
(``mode.sync_producer()``, ``mode.asyncio_producer()``): the code under
test calls them as it calls a SyncProducer or an AsyncioProducer, and its
jobs run at once."""

from __future__ import annotations

import asyncio

import pytest
import trio

from chronos_trio import App, JobState, MemoryStore, UnknownTask
from chronos_trio.testing import eager


def _app() -> tuple[App, list[int]]:
    app = App(MemoryStore())
    ran: list[int] = []

    @app.task("square")
    async def square(n: int) -> int:
        if n < 0:
            raise ValueError(f"negative {n}")
        ran.append(n)
        return n * n

    return app, ran


def test_plain_synchronous_code_enqueues_and_reads_results() -> None:
    app, ran = _app()
    square = app.tasks["square"]
    with eager(app) as mode:
        producer = mode.sync_producer()  # no Trio run: each call is one
        handle = producer.enqueue(square, 3)
        assert ran == [3]  # ran before enqueue returned
        assert handle.result(timeout=1) == 9
        by_kind = producer.enqueue("square", 4, job_id="j4")
        many = producer.enqueue_many("square", [5, 6])
        assert [h.result() for h in [by_kind, *many]] == [16, 25, 36]
        assert producer.job("j4").status().state is JobState.SUCCEEDED
        with pytest.raises(ValueError, match="negative -1"):
            producer.enqueue(square, -1)
        with pytest.raises(UnknownTask, match="'cube'"):
            producer.enqueue_many("cube", [1])
    assert ran == [3, 4, 5, 6]


async def test_from_a_thread_the_calls_go_back_to_the_trio_run() -> None:
    app, ran = _app()
    with eager(app) as mode:
        producer = mode.sync_producer()
        with trio.fail_after(30):
            handle = await trio.to_thread.run_sync(producer.enqueue, "square", 7)
            assert await trio.to_thread.run_sync(handle.result) == 49
        with pytest.raises(RuntimeError, match="not a Trio task"):
            producer.enqueue("square", 8)
    assert ran == [7]


def test_asyncio_code_awaits_its_producer_as_usual() -> None:
    app, ran = _app()

    async def view(producer: object) -> tuple[int, list[int]]:
        one = await producer.enqueue("square", 2)  # type: ignore[attr-defined]
        many = await producer.enqueue_many("square", [3, 4])  # type: ignore[attr-defined]
        return await one.result(), [await h.result() for h in many]

    with eager(app) as mode:
        assert asyncio.run(view(mode.asyncio_producer())) == (4, [9, 16])
    assert ran == [2, 3, 4]
