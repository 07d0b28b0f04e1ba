"""Conformance checks of a job stored marked as waited on
(``NewJob.keep_outcome``, ``enqueue(keep_outcome=True)``): whatever ends
it keeps its finished record readable ``WAITED_KEEP`` seconds as if a
result waiter had watched it before it ended, so a wait that starts after
the end still reads the outcome; an unmarked job nothing keeps is gone.
Registered in :data:`~chronos_trio.testing.conformance.CHECKS` like the
others when ``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..records._jobs import JobRef, JobState
from ..store._capabilities import Capability
from ..store._roles import SettleKind
from .conformance import Fresh, check, job, lease, lease_again, settle


@check(Capability.RESULTS)
async def check_a_job_marked_as_waited_on_keeps_its_outcome(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many(
        [
            job("marked", keep_outcome=True),
            job("plain"),
            job("marked-x", keep_outcome=True),
            job("plain-x"),
            job("marked-r", queue="r", keep_outcome=True),
        ]
    )
    leased = {lj.job.id: lj for lj in await lease(store)}
    applied = await store.settle(
        [
            settle(leased["marked"], SettleKind.SUCCEEDED),
            settle(leased["plain"], SettleKind.SUCCEEDED),
            settle(leased["marked-x"], SettleKind.DISCARD, error="boom"),
            settle(leased["plain-x"], SettleKind.DISCARD, error="boom"),
        ]
    )
    assert applied.settled == (True,) * 4
    # no waiter was registered before they ended: only the mark keeps them
    done = await store.outcome(JobRef("marked", "q"))
    assert done is not None and done.state is JobState.SUCCEEDED and done.result is None
    assert await store.outcome(JobRef("plain", "q")) is None, "an unmarked success is gone"
    failed = await store.outcome(JobRef("marked-x", "q"))
    assert failed is not None and failed.state is JobState.DEAD and failed.last_error == "boom"
    assert await store.outcome(JobRef("plain-x", "q")) is None, "an unmarked discard is gone"
    with trio.fail_after(10):  # a wait that starts after the end reads it at once
        waited = await store.wait_outcome(JobRef("marked", "q"), timeout=5.0)
    assert waited is not None and waited.state is JobState.SUCCEEDED
    # the mark outlives a retry: the success after it keeps the outcome too
    [first] = await lease(store, "r")
    retried = await store.settle([settle(first, SettleKind.RETRY, error="again")])
    assert retried.settled == (True,)
    again = await lease_again(store, "marked-r", queue="r")
    assert (await store.settle([settle(again, SettleKind.SUCCEEDED)])).settled == (True,)
    kept = await store.outcome(JobRef("marked-r", "r"))
    assert kept is not None and kept.state is JobState.SUCCEEDED and kept.attempts == 2
