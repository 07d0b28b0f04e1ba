"""Record format 2 on Redis (issue 13, memory per job): a payload of more
than 64 bytes is kept in chunks so Redis stores the job hash as a compact
listpack; every read joins the chunks back, a broken chunk is a damaged
record like any other, and format-1 records stay readable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import trio

from chronos_trio import App, JobContext, JobState, NewJob
from chronos_trio.store import LeaseResult, Problem, QueueWeight, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._codec import (
    CHUNKED_PAYLOAD_MAX,
    PAYLOAD_CHUNK,
    RECORD_FORMAT,
    join_payload,
)
from chronos_trio.store.redis.keys import KeySpace, PartitionKeys
from tests._support import wait_for

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]

SIZES = [0, 1, 63, 64, 65, 100, 128, 129, CHUNKED_PAYLOAD_MAX - 1, CHUNKED_PAYLOAD_MAX,
         CHUNKED_PAYLOAD_MAX + 1, 100_000]  # fmt: skip


def payload_of(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that differ at every position (a misplaced chunk shows)."""
    return bytes((seed + 7 * k + k // 251) % 256 for k in range(size))


def part(store: RedisStore, queue: str = "q") -> PartitionKeys:
    return KeySpace(store.namespace).partition(queue, 1, 0)


def new(job_id: str, payload: bytes, **kw: Any) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="work", payload=payload, **kw)


async def enqueue_delayed(store: RedisStore, jobs: list[NewJob]) -> None:
    """Enqueue delayed jobs (whose payloads are chunked) and promote them."""
    await store.enqueue_many(jobs)
    await trio.sleep(max(j.delay for j in jobs) + 0.05)
    assert (await store.promote_due(["q"], 1000)).promoted == len(jobs)


async def lease_all(store: RedisStore, count: int = 100) -> LeaseResult:
    return await store.lease([QueueWeight("q")], count, worker_id="w", lease_duration=5.0)


def expected_chunks(size: int, delayed: bool) -> int | None:
    if not delayed or size <= PAYLOAD_CHUNK or size > CHUNKED_PAYLOAD_MAX:
        return None
    return -(-size // PAYLOAD_CHUNK) - 1


async def test_every_size_round_trips_through_enqueue_reads_and_lease(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    want = {f"{d}{size}": payload_of(size, size) for size in SIZES for d in "dn"}
    # "d": delayed (chunked), "n": due now (whole: a hashtable is cheaper to lease)
    await store.enqueue_many(
        [new(i, p, delay=0.2 if i[0] == "d" else 0.0) for i, p in want.items()]
    )
    for size in SIZES:
        for delayed in (True, False):
            key = pk.job(f"{'d' if delayed else 'n'}{size}")
            n = expected_chunks(size, delayed)
            stored = client.hgetall(key)
            assert stored[b"v"] == str(RECORD_FORMAT).encode()
            if n is None:
                assert b"pn" not in stored and stored[b"payload"] == payload_of(size, size)
            else:
                assert stored[b"pn"] == str(n).encode()
                assert all(len(stored[f"p{k}".encode()]) <= PAYLOAD_CHUNK for k in range(1, n + 1))
                assert len(stored[b"payload"]) == PAYLOAD_CHUNK
            # every value fits the listpack: a delayed job's hash stays compact
            compact = size <= PAYLOAD_CHUNK or (delayed and size <= CHUNKED_PAYLOAD_MAX)
            assert client.object("encoding", key) == (b"listpack" if compact else b"hashtable")
    await trio.sleep(0.25)
    assert (await store.promote_due(["q"], 100)).promoted == len(SIZES)
    # admin reads join the chunks
    for job_id, payload in want.items():
        got = await store.get_job(job_id)
        assert got is not None and got.payload == payload and got.damage == ""
    listed = await store.list_jobs("q", JobState.READY)
    assert {j.id: j.payload for j in listed} == want
    # and so does lease
    batch = await lease_all(store)
    assert {lj.job.id: lj.job.payload for lj in batch.jobs} == want
    done = await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in batch.jobs])
    assert done.settled == (True,) * len(want)


async def test_a_delayed_job_with_a_100_byte_payload_is_a_small_listpack(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.enqueue_many([new("later", b"x" * 100, delay=3600)])
    key = pk.job("later")
    assert client.object("encoding", key) == b"listpack"
    # format 1 stored it as a hashtable of 864 bytes (MEMORY USAGE)
    usage = client.memory_usage(key)
    assert usage is not None and usage < 450, usage


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ({"drop": "p1"}, "field 'p1' is missing"),
        ({"drop": "payload"}, "field 'payload' is missing"),
        ({"set": ("pn", "x")}, "field 'pn' holds b'x', not a payload chunk count"),
        ({"set": ("pn", "0")}, "field 'pn' holds b'0', not a payload chunk count"),
        ({"set": ("pn", "7")}, "field 'p2' is missing"),
    ],
)
async def test_a_broken_chunk_dead_letters_only_its_job(
    redis_store: Factory, redis_url: str, how: dict[str, Any], reason: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    payloads = {f"j{i}": payload_of(150, i) for i in range(5)}  # 3 chunks each: p1, p2 (pn=2)
    await enqueue_delayed(store, [new(i, p, delay=0.05) for i, p in payloads.items()])
    key = pk.job("j2")
    if "drop" in how:
        client.hdel(key, how["drop"])
    else:
        client.hset(key, *how["set"])
        if how["set"] == ("pn", "7"):
            client.hdel(key, "p2")

    shown = await store.get_job("j2")
    assert shown is not None and reason in shown.damage, shown.damage
    batch = await lease_all(store)
    assert {lj.job.id: lj.job.payload for lj in batch.jobs} == {
        i: p for i, p in payloads.items() if i != "j2"
    }
    [dead] = batch.aside.dead
    assert dead.id == "j2" and dead.last_error == f"damaged record: {reason}"
    stored = await store.get_job("j2")
    assert stored is not None and stored.state is JobState.DEAD


async def test_the_checker_reports_a_broken_chunk(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await enqueue_delayed(
        store, [new("ok", payload_of(300), delay=0.05), new("bad", payload_of(300, 1), delay=0.05)]
    )
    client.hdel(pk.job("bad"), "p3")
    report = await store.check()
    [finding] = report.findings
    assert finding.job_id == "bad" and finding.problem is Problem.DAMAGED
    assert "field 'p3' is missing" in finding.detail
    repaired = await store.check(repair=True)
    assert [f.job_id for f in repaired.findings] == ["bad"]
    fixed = await store.get_job("bad")
    assert fixed is not None and fixed.state is JobState.DEAD
    assert (await store.check()).findings == ()
    ok = await store.get_job("ok")
    assert ok is not None and ok.payload == payload_of(300) and ok.state is JobState.READY


async def test_a_dead_letter_report_carries_the_whole_payload(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    payload = payload_of(200, 3)
    await enqueue_delayed(
        store, [new("d", payload, delay=0.05), new("r", payload, max_retries=0, delay=0.05)]
    )
    client.hset(pk.job("d"), "attempts", "x")  # lease dead-letters it (lua/lib/dead_letter.lua)
    batch = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=0.05)
    [reported] = batch.aside.dead
    assert reported.id == "d" and reported.payload == payload
    # recovery dead-letters "r" once its lease expired with no retry left
    assert [lj.job.id for lj in batch.jobs] == ["r"]
    await trio.sleep(0.1)
    recovered = await store.recover_expired(["q"], 10)
    [gone] = recovered.dead
    assert gone.id == "r" and gone.payload == payload and gone.state is JobState.DEAD


async def test_a_format_1_record_with_a_long_payload_stays_readable(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.topology("q")
    payload = payload_of(500, 9)
    # as format 1 wrote it: the whole payload in one field (a hashtable), v = 1
    client.hset(
        pk.job("old"),
        mapping={
            "kind": "work", "payload": payload, "run_at": "1.0", "state": "ready",
            "attempts": "0", "max_retries": "3", "timeout": "30.0", "created_at": "1.0",
            "v": "1",
        },
    )  # fmt: skip
    client.zadd(pk.ready, {"old": 1.0})
    got = await store.get_job("old")
    assert got is not None and got.payload == payload and got.damage == ""
    [leased] = (await lease_all(store)).jobs
    assert leased.job.id == "old" and leased.job.payload == payload


async def test_a_worker_runs_chunked_payloads_exactly_once(redis_store: Factory) -> None:
    store = await redis_store()
    app = App(store)
    seen: dict[str, bytes] = {}

    @app.task("work", queue="q")
    async def work(payload: bytes, job: JobContext) -> None:
        assert job.id not in seen
        seen[job.id] = payload

    want = {f"w{i}": payload_of(37 * i, i) for i in range(60)}
    await store.enqueue_many([new(i, p, delay=0.01 * (int(i[1:]) % 2)) for i, p in want.items()])
    async with app.open_worker(queues="q", poll_interval=0.05):
        with trio.fail_after(20):
            await wait_for(lambda: len(seen) == len(want))
    assert seen == want


def test_python_and_lua_join_alike() -> None:
    chunks = {"p1": b"b" * 64, "p2": b"c"}
    assert join_payload(b"a" * 64, b"2", chunks.get) == (b"a" * 64 + b"b" * 64 + b"c", "")
    assert join_payload(b"a", None, chunks.get) == (b"a", "")
    assert join_payload(None, b"2", chunks.get) == (None, "field 'payload' is missing")
    assert join_payload(b"a", b"3", chunks.get) == (None, "field 'p3' is missing")
    assert join_payload(b"a", b"96", chunks.get)[1] == (
        "field 'pn' holds b'96', not a payload chunk count"
    )
