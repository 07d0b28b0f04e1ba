"""A bulk enqueue's plain jobs as columns (``records._job_batch.JobBatch``)
give what the same jobs as records give.

* ``new_job_batch``: a ``JobBatch`` for plain jobs, whose records are the
  ones ``new_jobs`` returns (same fields, hooks called once a job, in
  order), a list for jobs that are not plain; bad input refused with the
  same error either way.
* The Redis plan's column readers (``store.redis._enqueue_batch``): the
  same ARGV, RESP, routing, wake-ups and results as the per-job ones for
  the batch's records.
* ``records._jobs.enqueue_result``: the record ``EnqueueResult(...)`` makes
  (equal, same hash, frozen).
* End to end on Redis (one and eight partitions), on the memory store (it
  reads the records) and from the producers outside Trio.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import attrs
import hiredis
import pytest
import trio

from chronos_trio import App
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.records import _producing
from chronos_trio.records._codec import batch_encoder, encode_payload, payload_encoder
from chronos_trio.records._control import ControlDefaults
from chronos_trio.records._errors import PayloadError
from chronos_trio.records._job_batch import JobBatch
from chronos_trio.records._jobs import EnqueueResult, NewJob, enqueue_results
from chronos_trio.records._placement import NO_PLACEMENT
from chronos_trio.records._producing import KindDefaults
from chronos_trio.records._unique import Unique
from chronos_trio.store import MemoryStore
from chronos_trio.store.redis import RedisStore, _enqueue, _enqueue_batch
from chronos_trio.store.redis._core import RedisCore
from chronos_trio.store.redis.keys import KeySpace

#: The done channel the enqueue scripts name in a record marked as waited on.
DONE = "{ns:done}"

KEYS = ["{q}:s", "{q}:r", "{q}:closed", "{q}:j:"]


@attrs.frozen
class P:
    a: float
    b: str = "x"
    c: int | None = 0


def _batch(values: list[Any], hooks: Any = (), **kw: Any) -> JobBatch | list[NewJob]:
    spec = KindDefaults("k.job", payload_type=P, **kw)
    return _producing.new_job_batch(spec, 200, hooks, values)


def _expected(batch: JobBatch, values: list[P]) -> list[NewJob]:
    """The records new_jobs' per-job loop makes for ``values`` under ``batch``'s IDs."""
    encode = payload_encoder(P)
    return [
        NewJob(
            job_id,
            batch.queue,
            batch.kind,
            encode(v),
            None,
            batch.delay,
            batch.max_retries,
            batch.timeout,
            () if batch.headers is None else batch.headers[n],
            None,
            False,
            None,
            None,
        )
        for n, (job_id, v) in enumerate(zip(batch.ids, values, strict=True))
    ]


# -- building ------------------------------------------------------------------------


def test_plain_jobs_are_a_batch_whose_records_are_new_jobs_records() -> None:
    values = [P(float(n), "é" * n, n) for n in range(40)]
    batch = _batch(values)
    assert isinstance(batch, JobBatch)
    assert len(batch) == 40 and len(set(batch.ids)) == 40
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in batch.ids)
    records = batch.jobs()
    assert records == _expected(batch, values)
    # the same records on every access, by index, slice and iteration
    assert batch[3] is records[3] and batch[-1] is records[-1]
    assert batch[2:5] == records[2:5] and list(batch) == records
    assert batch.jobs() is not batch.jobs() and batch.jobs()[0] is records[0]
    # what new_jobs returns: a list of the same records
    listed = _producing.new_jobs(KindDefaults("k.job", payload_type=P), 200, (), values)
    assert type(listed) is list
    assert [attrs.evolve(j, id="") for j in listed] == [attrs.evolve(j, id="") for j in records]


def test_batch_options_and_hooks() -> None:
    seen: list[str] = []

    def hook(kind: str, headers: dict[str, str]) -> None:
        seen.append(kind)
        headers["n"] = str(len(seen))

    spec = KindDefaults("k.job", payload_type=P, queue="qq", max_retries=7, timeout=2.5)
    values = [P(1.0), P(2.0), P(3.0)]
    batch = _producing.new_job_batch(spec, 200, [hook], values, delay=1.25, queue="other")
    assert isinstance(batch, JobBatch)
    assert seen == ["k.job"] * 3
    assert batch.headers == [(("n", "1"),), (("n", "2"),), (("n", "3"),)]
    assert (batch.queue, batch.delay, batch.max_retries, batch.timeout) == ("other", 1.25, 7, 2.5)
    assert batch.jobs() == _expected(batch, values)


def test_a_hook_error_is_raised_at_its_job() -> None:
    calls: list[int] = []

    def hook(kind: str, headers: dict[str, str]) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("hook says no")

    with pytest.raises(RuntimeError, match="hook says no"):
        _batch([P(1.0), P(2.0), P(3.0)], hooks=[hook])
    assert len(calls) == 2


def test_jobs_that_are_not_plain_stay_records() -> None:
    assert type(_batch([P(1.0)], unique=Unique(key="k"))) is list
    assert type(_batch([P(1.0)], control=ControlDefaults(priority=2))) is list


@pytest.mark.parametrize("payload_type", [P, Any])
def test_payloads_encoded_one_by_one_are_a_batch_too(payload_type: Any) -> None:
    # what the batch encoder cannot vouch for (a null, other types) is
    # encoded one by one: still plain jobs, the same bytes
    values: list[Any] = [P(1.0), P(1.0, c=None), {"d": [1, None]}, "text", b"raw"]
    if payload_type is P:
        values = values[:2]
    spec = KindDefaults("k.job", payload_type=payload_type)
    batch = _producing.new_job_batch(spec, 200, (), values)
    assert isinstance(batch, JobBatch)
    assert batch.payloads == [encode_payload(v, payload_type) for v in values]


def test_any_payloads_of_one_attrs_class_are_encoded_at_once() -> None:
    values = [P(float(n), "ü" * n, n) for n in range(30)]
    assert batch_encoder(Any)(values) == [encode_payload(v, Any) for v in values]
    assert batch_encoder(None)(values) == [encode_payload(v, None) for v in values]
    assert batch_encoder(Any)([]) == []
    assert batch_encoder(Any)([P(1.0), {"a": 1}]) is None  # another type: one by one
    assert batch_encoder(Any)([{"a": 1}]) is None


def test_hooks_and_sizes_are_checked_job_by_job() -> None:
    calls: list[int] = []

    def hook(kind: str, headers: dict[str, str]) -> None:
        calls.append(1)

    with pytest.raises(PayloadError, match="over the 200-byte limit"):
        _batch([P(1.0), P(1.0, "x" * 300), P(2.0)], hooks=[hook])
    assert len(calls) == 1  # the first job's hooks ran, as new_jobs runs them


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ([P(1.0), P(1.0, "x" * 300)], "over the 200-byte limit"),
        ([P(1.0), P(math.nan)], "not JSON-able"),
        ([P(1.0), "no"], "expected a P payload, got str"),
    ],
)
def test_bad_input_is_refused_as_before(values: list[Any], error: str) -> None:
    with pytest.raises(PayloadError, match=error):
        _batch(values)


def test_columns_must_match() -> None:
    with pytest.raises(ValueError, match="one entry per job"):
        JobBatch(["a"], [], None, queue="q", kind="k", delay=0.0, max_retries=3, timeout=1.0)
    empty = JobBatch([], [], None, queue="q", kind="k", delay=0.0, max_retries=3, timeout=1.0)
    assert len(empty) == 0 and empty.jobs() == [] and not empty


def test_enqueue_results_are_the_frozen_records() -> None:
    made = enqueue_results(["id-1", "id-2"], [True, False], [12.5, 0.0], NO_PLACEMENT)
    plain = [
        EnqueueResult("id-1", True, 12.5, NO_PLACEMENT),
        EnqueueResult("id-2", False, 0.0, NO_PLACEMENT),
    ]
    assert [type(r) for r in made] == [EnqueueResult, EnqueueResult]
    assert made == plain and [hash(r) for r in made] == [hash(r) for r in plain]
    assert [repr(r) for r in made] == [repr(r) for r in plain]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made[0].job_id = "other"  # type: ignore[misc]
    assert attrs.evolve(made[0], created=False) == EnqueueResult("id-1", False, 12.5, NO_PLACEMENT)
    assert enqueue_results([], [], [], NO_PLACEMENT) == []
    with pytest.raises(ValueError, match="different lengths"):
        enqueue_results(["a"], [True, False], [1.0], NO_PLACEMENT)
    # nothing of the class's __init__ is skipped: no validator, no converter
    for field in attrs.fields(EnqueueResult):
        assert field.validator is None and field.converter is None


# -- the Redis plan's column readers -----------------------------------------------------


class _Keys:
    enqueue_keys = KEYS


def _some_batch(headers: bool, delay: float) -> JobBatch:
    def hook(kind: str, h: dict[str, str]) -> None:
        h["trace"] = f"t-ü-{len(h)}"

    spec = KindDefaults("k.ñ", payload_type=P, timeout=2.25, max_retries=0)
    values = [P(float(n), "s" * (n % 7), n) for n in range(40)]
    batch = _producing.new_job_batch(spec, 1000, [hook] if headers else [], values, delay=delay)
    assert isinstance(batch, JobBatch)
    return batch


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("delay", [0.0, 1.5])
@pytest.mark.parametrize("which", ["all", "some", "few"])
def test_batch_argv_and_resp_are_the_records(headers: bool, delay: float, which: str) -> None:
    batch = _some_batch(headers, delay)
    idxs = {"all": list(range(40)), "some": list(range(1, 40, 2)), "few": [3, 9]}[which]
    records = batch.jobs()
    for batch_now in ("", "1700000000.25"):
        want, want_packer = _enqueue._argv(batch_now, records, list(batch.ids), idxs, DONE)
        got, packer = _enqueue_batch.batch_argv(
            batch_now, batch, idxs, len(idxs) >= _enqueue.PACK_FROM
        )
        assert got == want
        assert (packer is None) == (want_packer is None)
        op = _enqueue._script_op(_Keys(), got, packer)
        want_op = _enqueue._script_op(_Keys(), want, want_packer)
        assert op.args == want_op.args
        if packer is not None:
            assert op.args.resp == hiredis.pack_command(op.args[:])  # type: ignore[attr-defined,arg-type]
            assert op.args.resp == want_op.args.resp  # type: ignore[attr-defined]


def test_batch_argv_leaves_unpackable_arguments_to_the_usual_packer() -> None:
    batch = JobBatch(
        [f"{n:032x}" for n in range(20)],
        [b"{}"] * 20,
        None,
        queue="q",
        kind="k\udc80",  # no UTF-8
        delay=0.0,
        max_retries=3,
        timeout=30.0,
    )
    argv, packer = _enqueue_batch.batch_argv("", batch, list(range(20)), True)
    assert packer is None
    assert argv == _enqueue._argv("", batch.jobs(), list(batch.ids), list(range(20)), DONE)[0]


@pytest.mark.parametrize("delay", [0.0, -1.0, 2.0])
def test_batch_wake_ops_are_the_records(delay: float) -> None:
    core = RedisCore(KeySpace("ns"), default_partitions=1, topology_ttl=3600)
    batch = _some_batch(False, 0.0)
    batch.delay = delay
    want = _enqueue.enqueue_wake_ops(core, batch.jobs(), list(range(len(batch))))
    got = _enqueue_batch.batch_wake_ops(core, batch, len(batch))
    # the same commands (a due time is the clock's reading of each call)
    cut = -1 if delay > 0 else None
    assert [op.args[:cut] for op in got] == [op.args[:cut] for op in want]
    assert len(got) == 1
    assert _enqueue_batch.batch_wake_ops(core, batch, 0) == []


def test_batch_results_read_the_reply() -> None:
    batch = _some_batch(False, 0.0)
    results: list[EnqueueResult | None] = [None] * len(batch)
    reply: list[object] = [b"17.0"]
    for n in (0, 5):
        reply += [1, b"17.5", batch.ids[n].encode()]
    _enqueue_batch.batch_results(batch, [0, 5], reply, NO_PLACEMENT, results)
    assert results[0] == EnqueueResult(batch.ids[0], True, 17.5, NO_PLACEMENT)
    assert results[5] == EnqueueResult(batch.ids[5], True, 17.5, NO_PLACEMENT)
    # an existing job without a readable due time: run_at 0.0, as the per-job reading
    reply = [b"17.0", 0, b"", batch.ids[1].encode(), b"1", 3, batch.ids[2].encode()]
    _enqueue_batch.batch_results(batch, [1, 2], reply, NO_PLACEMENT, results)
    assert results[1] == EnqueueResult(batch.ids[1], False, 0.0, NO_PLACEMENT)
    assert results[2] == EnqueueResult(batch.ids[2], False, 3.0, NO_PLACEMENT)
    with pytest.raises(ValueError):  # a reply of another length is no reply of these jobs
        _enqueue_batch.batch_results(batch, [1, 2, 3], reply, NO_PLACEMENT, results)


# -- end to end ------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 8])
async def test_redis_stores_a_batch_as_its_records(redis_url: str, partitions: int) -> None:
    store = RedisStore.from_url(
        redis_url, namespace=f"jb{partitions}", default_partitions=partitions
    )
    app = App(store)

    @app.task("jb.job")
    async def job(p: P) -> None: ...

    try:
        with trio.fail_after(30):
            values = [P(float(n), "v", n) for n in range(100)]
            handles = await job.enqueue_many(values, delay=5.0)
            assert len(handles) == 100 and all(h.created for h in handles)
            assert {h.queue for h in handles} == {"default"} and {h.kind for h in handles} == {
                "jb.job"
            }
            if partitions == 8:
                assert len({h.partition for h in handles}) > 1
            # as the same jobs sent as records are stored
            records = job.new_jobs(values[:20], delay=5.0)
            results = await app.enqueue_jobs(records)
            ahead = min(r.run_at for r in results) - max(h.run_at for h in handles)
            assert -1.0 < ahead < 1.0
            encode = payload_encoder(P)
            for h, v in zip(handles, values, strict=True):
                stored = await store.get_job(h.job_id, queue="default")
                assert stored is not None and stored.payload == encode(v)
                assert (stored.kind, stored.max_retries, stored.timeout) == ("jb.job", 3, 30.0)
                assert abs(stored.run_at - h.run_at) < 1e-3
            # a repeated ID (sent again as records): not stored twice
            again = await app.enqueue_jobs(
                [attrs.evolve(j, id=h.job_id) for j, h in zip(records, handles, strict=False)]
            )
            assert [r.created for r in again] == [False] * 20
    finally:
        await app.aclose()


async def test_memory_store_reads_a_batchs_records() -> None:
    app = App(MemoryStore())

    @app.task("jb.job")
    async def job(p: P) -> None: ...

    with trio.fail_after(10):
        handles = await job.enqueue_many([P(1.0), P(2.0)])
        for h, a in zip(handles, (1.0, 2.0), strict=True):
            stored = await app.store.get_job(h.job_id)
            assert stored is not None and stored.payload == payload_encoder(P)(P(a))
    await app.aclose()


def test_sync_and_asyncio_producers_send_batches(redis_url: str) -> None:
    app = App()

    @app.task("jb.sync", queue="jbq")
    async def job(p: P) -> None: ...

    values = [P(float(n)) for n in range(30)]
    with SyncProducer(redis_url, app=app) as producer:
        by_task = producer.enqueue_many(job, values)
        by_name = producer.enqueue_many("jb.sync", values, delay=3.0)
        for h in (*by_task, *by_name):
            assert (h.queue, h.kind, h.created) == ("jbq", "jb.sync", True)
        assert by_name[0].run_at - by_task[0].run_at > 2.0

    async def main() -> None:
        async with AsyncioProducer(redis_url, app=app) as producer:
            handles = await asyncio.wait_for(producer.enqueue_many(job, values), 30)
            assert [(h.queue, h.kind, h.created) for h in handles] == [
                ("jbq", "jb.sync", True)
            ] * 30

    asyncio.run(main())


@pytest.mark.parametrize(
    "ids",
    [
        [f"id-{n}" for n in range(20)],  # several lengths
        [f"é{n:02d}" for n in range(20)],  # one length, not ASCII
        [f"{n:032x}" for n in range(20)],  # the producers' own
    ],
)
@pytest.mark.parametrize("headers", [False, True])
def test_batch_resp_of_any_ids_is_what_hiredis_packs(ids: list[str], headers: bool) -> None:
    batch = JobBatch(
        ids,
        [b'{"n":%d}' % n * (n % 3) for n in range(20)],
        [(("h", f"v{n}"),) if n % 2 else () for n in range(20)] if headers else None,
        queue="q",
        kind="k",
        delay=0.5,
        max_retries=2,
        timeout=9.0,
    )
    idxs = list(range(20))
    argv, packer = _enqueue_batch.batch_argv("7.5", batch, idxs, True)
    assert packer is not None
    assert argv == _enqueue._argv("7.5", batch.jobs(), ids, idxs, DONE)[0]
    op = _enqueue._script_op(_Keys(), argv, packer)
    assert op.args.resp == hiredis.pack_command(op.args[:])  # type: ignore[attr-defined,arg-type]
