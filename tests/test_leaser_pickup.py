"""The leaser's hand-off to the executors (``actors.leaser``): after a short
batch an idle worker's handler starts before the leaser builds and sends its
next lease (that lease most likely comes back empty, and building it took a
pickup ~55 µs, and half the time its whole round trip, on Redis); after a
full batch the next lease is asked for at once, before the batch's handlers
run, so its round trip overlaps them.

Deterministic: the store records when each lease is asked for (before any
checkpoint), the handler when it starts; the order does not depend on time."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from chronos_trio import App, JobContext, MemoryStore, Task
from chronos_trio.store import LeaseResult, QueueWeight


class LeaseLog(MemoryStore):
    """A MemoryStore that logs each lease call and how many jobs it leased."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []

    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> LeaseResult:
        self.events.append(("ask", count))
        result = await super().lease(
            queues, count, worker_id=worker_id, lease_duration=lease_duration, strict=strict
        )
        self.events.append(("got", len(result.jobs)))
        return result


@attrs.frozen
class Item:
    n: int


def app_logging(store: LeaseLog) -> tuple[App, Task[Item]]:
    app = App(store)

    @app.task("item")
    async def item(args: Item, job: JobContext) -> None:
        store.events.append(("run", args.n))

    return app, item


async def test_after_a_short_batch_the_handler_starts_before_the_next_lease(
    autojump_clock: object,
) -> None:
    store = LeaseLog()
    app, item = app_logging(store)
    async with app.open_worker(concurrency=4, batch_size=8) as worker:
        for n in range(10):
            await item.enqueue(Item(n))
            with trio.fail_after(10):
                await worker.wait_idle()
    events = store.events
    runs = [i for i, (what, _) in enumerate(events) if what == "run"]
    assert [events[i][1] for i in runs] == list(range(10))
    for i in runs:
        # the lease that leased this job (one job: a short batch) is the
        # last one asked for before the handler started
        last_ask = max(j for j in range(i) if events[j][0] == "ask")
        assert events[last_ask + 1] == ("got", 1), events[last_ask - 2 : i + 1]
    await app.aclose()


async def test_after_a_full_batch_the_next_lease_is_asked_for_before_its_handlers(
    autojump_clock: object,
) -> None:
    store = LeaseLog()
    app, item = app_logging(store)
    await item.enqueue_many([Item(n) for n in range(6)])
    async with app.open_worker(concurrency=8, batch_size=2) as worker:
        with trio.fail_after(10):
            await worker.wait_idle()
    events = store.events
    first_got = events.index(("got", 2))
    # the second lease is asked for before the first batch's handlers run
    assert events[first_got + 1][0] == "ask", events
    assert sorted(n for what, n in events if what == "run") == list(range(6))
    await app.aclose()
