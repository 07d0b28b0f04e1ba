"""Conformance checks of the worker registry (:meth:`WorkerRole.beat_worker`,
:meth:`WorkerRole.unregister_worker`, :meth:`AdminRole.workers`). Registered
in :data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import attrs
import trio

from ..records._workers import MAX_RUNNING_IDS, WorkerInfo
from ..store._capabilities import Capability
from .conformance import Fresh, check

#: Slack for comparing the store's clock read in two calls (Redis: microseconds).
_SLACK = 0.01


def worker(worker_id: str, host: str, pid: int, **kw: object) -> WorkerInfo:
    """A registry entry with plausible defaults (``last_beat`` is the store's to set)."""
    fields: dict[str, object] = {
        "worker_id": worker_id,
        "host": host,
        "pid": pid,
        "queues": ("default", "low"),
        "concurrency": 8,
        "started_at": 1_700_000_000.25,
        "last_beat": 0.0,
        "running": 0,
        "running_job_ids": (),
    }
    fields.update(kw)
    return WorkerInfo(**fields)  # type: ignore[arg-type]


@check(Capability.REGISTRY)
async def check_worker_registry_beats_lists_and_unregisters(fresh: Fresh) -> None:
    store, other = await fresh(), await fresh()
    assert await store.workers() == []
    before = await store.now()
    await store.beat_worker(worker("b:1:x", "b", 1, last_beat=123.0), 30.0)
    await store.beat_worker(worker("a:20:x", "a", 20), 30.0)
    many = tuple(f"job-{n}" for n in range(MAX_RUNNING_IDS + 50))
    await store.beat_worker(
        worker("a:3:x", "a", 3, running=len(many), running_job_ids=many, concurrency=200), 30.0
    )
    after = await store.now()
    listed = await store.workers()
    assert [(w.host, w.pid) for w in listed] == [("a", 3), ("a", 20), ("b", 1)], "by host, pid"
    assert await other.workers() == [], "a store from the factory must not see another's workers"
    for w in listed:
        assert before - _SLACK <= w.last_beat <= after + _SLACK, "last beat on the store's clock"
        assert w.started_at == 1_700_000_000.25 and w.queues == ("default", "low")
    a3 = listed[0]
    assert a3.worker_id == "a:3:x" and a3.concurrency == 200
    assert a3.running == len(many), "the count is every running job"
    assert a3.running_job_ids == many[:MAX_RUNNING_IDS], "the IDs are capped"

    # a beat replaces the entry: one per worker id, its last beat moved on
    await trio.sleep(0.05)
    await store.beat_worker(worker("b:1:x", "b", 1, running=1, running_job_ids=("j",)), 30.0)
    b1 = [w for w in await store.workers() if w.worker_id == "b:1:x"]
    assert len(b1) == 1 and b1[0].running == 1 and b1[0].running_job_ids == ("j",)
    assert b1[0].last_beat >= listed[2].last_beat + 0.04

    # the kinds a worker has handlers for travel with its entry; none
    # reported (an older worker) reads back as None
    await store.beat_worker(worker("c:1:x", "c", 1, kinds=("email.send", "report")), 30.0)
    by_id = {w.worker_id: w for w in await store.workers()}
    assert by_id["c:1:x"].kinds == ("email.send", "report") and by_id["a:3:x"].kinds is None
    await store.unregister_worker("c:1:x")

    await store.unregister_worker("a:20:x")
    await store.unregister_worker("never-registered")
    assert [w.worker_id for w in await store.workers()] == ["a:3:x", "b:1:x"]
    for ttl in (0.0, -1.0):
        try:
            await store.beat_worker(worker("z:1:x", "z", 1), ttl)
        except ValueError:
            pass
        else:
            raise AssertionError(f"a ttl of {ttl} must be refused")
    assert len(await store.workers()) == 2


@check(Capability.REGISTRY)
async def check_worker_registry_entry_lapses_after_its_ttl(fresh: Fresh) -> None:
    store = await fresh()
    await store.beat_worker(worker("gone:1:x", "h", 1), 0.3)
    await store.beat_worker(worker("kept:2:x", "h", 2), 10.0)
    await trio.sleep(0.15)
    assert len(await store.workers()) == 2, "still within its ttl"
    await trio.sleep(0.25)
    # nothing removed the lapsed entry: the listing leaves it out by itself
    assert [w.worker_id for w in await store.workers()] == ["kept:2:x"]
    # a beat after a lapse registers the worker again
    await store.beat_worker(worker("gone:1:x", "h", 1, running=2), 0.3)
    back = {w.worker_id: w for w in await store.workers()}
    assert set(back) == {"gone:1:x", "kept:2:x"} and back["gone:1:x"].running == 2
    assert attrs.evolve(back["kept:2:x"], last_beat=0.0) == worker("kept:2:x", "h", 2)
