"""The promoter's timing against a store far away (``actors.promoter``): the
store reads its clock about halfway through a promote call, so the wait
until the next due time counts from then, not from when the reply came
back. A job is then promoted a one-way trip after its due time, not a whole
round trip and more.

Deterministic: a MemoryStore on Trio's clock whose promote calls take a
fixed virtual latency each way, under ``autojump_clock``."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from chronos_trio import App, JobContext, MemoryStore, Task
from chronos_trio.store import PromoteResult

#: One way of a promote call's round trip, seconds.
ONE_WAY = 0.004


class Distant(MemoryStore):
    """A MemoryStore whose promote calls take ``ONE_WAY`` to arrive and as
    long to come back; everything else is instant."""

    def __init__(self) -> None:
        super().__init__(clock=trio.current_time)
        self.promote_calls = 0

    async def promote_due(self, queues: Sequence[str], limit: int) -> PromoteResult:
        self.promote_calls += 1
        await trio.sleep(ONE_WAY)
        result = await super().promote_due(queues, limit)
        await trio.sleep(ONE_WAY)
        return result


@attrs.frozen
class Item:
    n: int


async def late_by(delays: Sequence[float]) -> tuple[list[float], int]:
    """Each job's start minus its due time (store clock), and promote calls."""
    store = Distant()
    app = App(store)
    late: list[float] = []

    async def handler(args: Item, job: JobContext) -> None:
        late.append(trio.current_time() - job.job.run_at)

    item: Task[Item] = app.task("item")(handler)

    async with app.open_worker(concurrency=4, poll_interval=30.0) as worker:
        await trio.sleep(0.1)  # the promoter is waiting (nothing scheduled)
        for n, delay in enumerate(delays):
            await item.enqueue(Item(n), delay=delay)
        with trio.fail_after(max(delays) + 5):
            while len(late) < len(delays):
                await trio.sleep(0.001)
        await worker.wait_idle()
    await app.aclose()
    return late, store.promote_calls


async def test_a_delayed_job_is_promoted_a_one_way_trip_after_its_due_time(
    autojump_clock: object,
) -> None:
    # Due in 1 s and in 2.5 s (blocking waits in the store), and 9 ms after
    # the first, once the call that promoted it is back (a plain sleep:
    # within SHORT_WAIT). A job that comes due while a call is on its way
    # back waits for that call's return and a new one, which no wait fixes.
    late, calls = await late_by([1.0, 1.009, 2.5])
    assert len(late) == 3
    # Promoted when the call that left at the due time arrives: ONE_WAY late
    # (before: the wait counted from the reply, a round trip and more late).
    for x in late:
        assert 0 <= x <= ONE_WAY + 1e-6, late
    # No promote call arrives early and comes back with nothing: one call
    # per wake-up of the producer's, one per due time, and the first.
    assert calls <= 1 + 3 + 3, calls
