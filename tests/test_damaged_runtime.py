"""A damaged job that reaches the worker (a store bug, a record a newer
writer made) goes dead once with a reason naming the field: it never crashes
the executor, never trips the restart intensity and never loops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobState, MemoryStore
from chronos_trio.store import LeaseResult, QueueWeight
from tests._support import wait_for


class DamagingStore(MemoryStore):
    """Hands out job ``bad`` with one field replaced, as a buggy store might."""

    def __init__(self, field: str, value: Any) -> None:
        super().__init__()
        self.field, self.value = field, value

    async def lease(
        self,
        queues: Sequence[QueueWeight],
        count: int,
        *,
        worker_id: str,
        lease_duration: float,
        strict: bool = False,
    ) -> LeaseResult:
        batch = await super().lease(
            queues, count, worker_id=worker_id, lease_duration=lease_duration, strict=strict
        )
        jobs = tuple(
            attrs.evolve(lj, job=attrs.evolve(lj.job, **{self.field: self.value}))
            if lj.job.id == "bad"
            else lj
            for lj in batch.jobs
        )
        return attrs.evolve(batch, jobs=jobs)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("payload", None, "field 'payload' holds None, not bytes"),
        ("kind", "", "field 'kind' holds '', not a task kind"),
        ("attempts", "x", "field 'attempts' holds 'x', not an integer >= 0"),
        ("max_retries", -1, "field 'max_retries' holds -1, not an integer >= 0"),
        ("timeout", float("nan"), "field 'timeout' holds nan, not a number"),
        ("timeout", None, "field 'timeout' holds None, not a number"),
        ("timeout", 0, "field 'timeout' holds 0, not a positive number"),
        # below inf, but too large for a float deadline
        pytest.param("timeout", 10**400, "field 'timeout' holds 1000", id="timeout-huge-int"),
    ],
)
async def test_a_damaged_leased_job_goes_dead_once(
    field: str, value: Any, reason: str, autojump_clock: object
) -> None:
    store = DamagingStore(field, value)
    app = App(store)
    ran: list[str] = []

    @app.task("work")
    async def work(args: bytes, job: JobContext) -> None:
        ran.append(job.id)

    async with app.open_worker(poll_interval=0.5, lease_duration=5.0) as worker:
        await work.enqueue(b"x", job_id="bad")
        healthy = [r.job_id for r in await work.enqueue_many([b"y"] * 20)]
        with trio.fail_after(60):
            await wait_for(lambda: len(ran) == 20)
            await worker.wait_idle()
        stats = worker.statistics()
    assert sorted(ran) == sorted(healthy)
    assert stats.restarts == {} and stats.dead == 1 and stats.succeeded == 20
    bad = await store.get_job("bad")
    assert bad is not None and bad.state is JobState.DEAD and bad.attempts == 1
    assert bad.last_error == f"damaged record: {reason}" or bad.last_error.startswith(
        f"damaged record: {reason}"
    )
