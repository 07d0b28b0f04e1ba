"""A succeeded job's record on Redis (issue 27 item 4, memory per job): kept
a while (for its result, or retained), it is rewritten at its success
settle as a compact listpack, its payload in chunks as a delayed job's,
without the lease fields; still record format 2, so every reader (of this
version or an older one: the decoding is format 2's) reads the same job,
and results, waiters, listings, the checker, delete, trim and purge work
on it as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import redis
import trio

from chronos_trio import App, JobContext, JobState, NewJob
from chronos_trio.app._inspector import Inspector
from chronos_trio.store import LeaseResult, QueueWeight, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._codec import (
    CHUNKED_PAYLOAD_MAX,
    PAYLOAD_CHUNK,
    RECORD_FORMAT,
    job_from_fields,
    record_fields,
)
from chronos_trio.store.redis.keys import KeySpace, PartitionKeys

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]

LEASE_FIELDS = (b"lease_token", b"lease_owner", b"lease_expires_at")
SIZES = [0, 64, 65, 111, 129, CHUNKED_PAYLOAD_MAX, CHUNKED_PAYLOAD_MAX + 1]


def payload_of(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that differ at every position (a misplaced chunk shows)."""
    return bytes((seed + 7 * k + k // 251) % 256 for k in range(size))


def part(store: RedisStore, queue: str = "q") -> PartitionKeys:
    return KeySpace(store.namespace).partition(queue, 1, 0)


async def lease_all(store: RedisStore, count: int = 100) -> LeaseResult:
    return await store.lease([QueueWeight("q")], count, worker_id="w" * 40, lease_duration=30.0)


async def run_through(
    store: RedisStore, payloads: dict[str, bytes], **settle: Any
) -> dict[str, Settlement]:
    """Enqueue ``payloads`` due now (each record a hashtable when its
    payload is over 64 bytes), lease them and settle them all succeeded
    with ``settle``'s fields."""
    await store.enqueue_many(
        [NewJob(id=i, queue="q", kind="work", payload=p) for i, p in payloads.items()]
    )
    leased = await lease_all(store)
    assert {lj.job.id for lj in leased.jobs} == set(payloads)
    done = {lj.job.id: Settlement(lj.ref, SettleKind.SUCCEEDED, **settle) for lj in leased.jobs}
    result = await store.settle(list(done.values()))
    assert result.settled == (True,) * len(payloads)
    return done


def as_main_wrote_it(stored: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The same success as the settle before this change wrote it: the
    payload whole, the lease fields empty."""
    fields, problem = record_fields(stored)
    assert problem == ""
    old = {k: v for k, v in stored.items() if k != b"pn" and not k[1:].isdigit()}
    assert fields[1] is not None
    old[b"payload"] = fields[1]
    return {**old, **dict.fromkeys(LEASE_FIELDS, b"")}


@pytest.mark.parametrize("how", ["result", "retained"])
async def test_a_kept_success_is_a_listpack_without_lease_fields(
    redis_store: Factory, redis_url: str, how: str
) -> None:
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    want = {f"s{size}": payload_of(size, size) for size in SIZES}
    keep: dict[str, Any] = (
        {"result": b'{"ok":true}', "result_ttl": 3600.0}
        if how == "result"
        else {"retain_for": 3600.0}
    )
    await run_through(store, want, **keep)
    for size in SIZES:
        key = pk.job(f"s{size}")
        stored: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        assert stored[b"state"] == b"succeeded" and stored[b"v"] == str(RECORD_FORMAT).encode()
        assert not set(LEASE_FIELDS) & set(stored), stored.keys()
        assert all(len(v) <= PAYLOAD_CHUNK for v in stored.values()) == (
            size <= CHUNKED_PAYLOAD_MAX
        )
        listpack = size <= CHUNKED_PAYLOAD_MAX
        assert client.object("encoding", key) == (b"listpack" if listpack else b"hashtable")
        if PAYLOAD_CHUNK < size <= CHUNKED_PAYLOAD_MAX:
            assert stored[b"pn"] == str(-(-size // PAYLOAD_CHUNK) - 1).encode()
        ttl = client.pttl(key)
        if how == "result":
            assert 3_500_000 < ttl <= 3_600_000
            assert client.zscore(pk.succeeded, f"s{size}") is None
        else:
            assert ttl == -1 and client.zscore(pk.succeeded, f"s{size}") is not None
        # format 2 reads it as it read the record the settle wrote before
        # (the payload whole, the lease fields empty): the same job
        fields, problem = record_fields(stored)
        old_fields, old_problem = record_fields(as_main_wrote_it(stored))
        args = (f"s{size}", "q", pk.placement)
        assert problem == old_problem == ""
        assert job_from_fields(*args, fields) == job_from_fields(*args, old_fields)
        got = await store.get_job(f"s{size}")
        assert got is not None and got.damage == ""
        assert got.payload == want[f"s{size}"] and got.state is JobState.SUCCEEDED
        assert (got.lease_token, got.lease_owner, got.lease_expires_at) == ("", "", None)
        assert got.result == (b'{"ok":true}' if how == "result" else None)
    # the checker finds nothing wrong (it reads every record with Lua)
    report = await store.check()
    assert report.findings == (), report.findings
    if how == "retained":
        # the dashboard's listing (the inspector's) joins the chunks
        page = await Inspector(store).jobs("q", JobState.SUCCEEDED, limit=100)
        assert {j.id: j.payload for j in page.jobs} == want


async def test_a_compact_record_is_about_half_the_memory(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await run_through(store, {"big": b"x" * 111}, result=b'{"ok":true}', result_ttl=3600.0)
    # the settle before this change left a hashtable of 1,224 bytes (MEMORY USAGE)
    usage = client.memory_usage(pk.job("big"))
    assert usage is not None and usage < 520, usage


async def test_what_would_not_fit_a_listpack_is_written_in_place(
    redis_store: Factory, redis_url: str
) -> None:
    """A result over 64 bytes is never chunked (older readers read it
    whole), so its record stays a hashtable, its payload whole; the lease
    fields go all the same. A record kept only for its waiters (a
    minute: not worth a rewrite) is written as without the option."""
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    big_result = b'"' + b"r" * 100 + b'"'
    await run_through(store, {"a": payload_of(111)}, result=big_result, result_ttl=60.0)
    stored: dict[bytes, bytes] = client.hgetall(pk.job("a"))  # type: ignore[assignment]
    assert client.object("encoding", pk.job("a")) == b"hashtable"
    assert b"pn" not in stored and stored[b"payload"] == payload_of(111)
    assert not set(LEASE_FIELDS) & set(stored)
    got = await store.get_job("a")
    assert got is not None and got.result == big_result and got.damage == ""
    # kept only for its waiters (field w, no result): a minute, in place
    await store.enqueue_many(
        [NewJob(id="w", queue="q", kind="work", payload=payload_of(111), keep_outcome=True)]
    )
    [lj] = (await lease_all(store)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED)])
    stored = client.hgetall(pk.job("w"))  # type: ignore[assignment]
    assert client.object("encoding", pk.job("w")) == b"hashtable"
    assert stored[b"state"] == b"succeeded" and all(stored[f] == b"" for f in LEASE_FIELDS)
    assert 50_000 < client.pttl(pk.job("w")) <= 60_000


async def test_a_record_with_chunks_already_keeps_them(
    redis_store: Factory, redis_url: str
) -> None:
    """A delayed job's record (chunked at enqueue) is a listpack when
    leased: its success drops the lease fields in place."""
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    payload = payload_of(300, 3)
    await store.enqueue_many([NewJob(id="d", queue="q", kind="work", payload=payload, delay=0.1)])
    await trio.sleep(0.15)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    [lj] = (await lease_all(store)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=60.0)])
    stored: dict[bytes, bytes] = client.hgetall(pk.job("d"))  # type: ignore[assignment]
    assert client.object("encoding", pk.job("d")) == b"listpack"
    assert stored[b"pn"] == b"4" and not set(LEASE_FIELDS) & set(stored)
    got = await store.get_job("d")
    assert got is not None and got.payload == payload and got.result == b"1"


async def test_a_format_1_record_chunked_at_its_success_becomes_format_2(
    redis_store: Factory, redis_url: str
) -> None:
    """Chunks are format 2's: a record an old producer wrote without v
    (format 1, its payload whole) is marked v = 2 when its success chunks
    its payload, so a format-1 reader leaves it alone rather than misread it."""
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await store.topology("q")
    payload = payload_of(200, 5)
    client.hset(
        pk.job("old"),
        mapping={
            "kind": "work", "payload": payload, "run_at": "1.0", "state": "ready",
            "attempts": "0", "max_retries": "3", "timeout": "30.0", "created_at": "1.0",
        },
    )  # fmt: skip
    client.zadd(pk.ready, {"old": 1.0})
    [lj] = (await lease_all(store)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=60.0)])
    stored: dict[bytes, bytes] = client.hgetall(pk.job("old"))  # type: ignore[assignment]
    assert client.object("encoding", pk.job("old")) == b"listpack"
    assert stored[b"v"] == str(RECORD_FORMAT).encode() and stored[b"pn"] == b"3"
    got = await store.get_job("old")
    assert got is not None and got.payload == payload and got.damage == ""


async def test_delete_trim_and_purge_take_compact_records(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store(compact_succeeded=True)
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await run_through(store, {"r1": payload_of(111, 1)}, result=b"1", result_ttl=3600.0)
    await run_through(store, {"t1": payload_of(111, 2)}, retain_for=0.2)
    await run_through(store, {"k1": payload_of(111, 3)}, retain_for=3600.0)
    assert {client.object("encoding", pk.job(i)) for i in ("r1", "t1", "k1")} == {b"listpack"}
    # delete by ID: a record kept only for its result is in no index
    assert await store.delete_job("r1")
    assert not client.exists(pk.job("r1"))
    # the janitor's trim takes a retained record whose retention ended
    await trio.sleep(0.3)
    await store.trim(["q"], dead_max_age=None, dead_max_count=None)
    assert not client.exists(pk.job("t1")) and client.exists(pk.job("k1"))
    # and a purge takes the rest
    await store.purge_queue("q", limit=100)
    assert not client.exists(pk.job("k1"))


@attrs.frozen
class Blob:
    data: str


@attrs.frozen
class Small:
    ok: bool


async def test_results_and_waiters_read_a_compact_record(
    redis_store: Factory, redis_url: str
) -> None:
    """End to end: a worker runs jobs with a 111-byte payload; a producer
    waiting on one (its waiter channel in the record) and a handle made
    later from the ID both read the result and the payload."""
    store = await redis_store(compact_succeeded=True)
    app = App(store)
    seen: list[str] = []

    @app.task("work", queue="q")
    async def work(args: Blob, job: JobContext) -> Small:
        seen.append(job.id)
        return Small(len(args.data) == 100)

    with trio.fail_after(20):
        waited = await app.enqueue("work", Blob("x" * 100), delay=0.2)
        later = await app.enqueue("work", Blob("y" * 100))
        async with app.open_worker(queues="q", poll_interval=0.05):
            assert await waited.result(timeout=10) == Small(True)
            assert await later.result(timeout=10) == Small(True)
    assert sorted(seen) == sorted([waited.job_id, later.job_id])
    client = redis.Redis.from_url(redis_url)
    for handle, data in ((waited, "x"), (later, "y")):
        key = part(store, "q").job(handle.job_id)
        assert client.object("encoding", key) == b"listpack"
        assert not set(LEASE_FIELDS) & set(client.hkeys(key))  # type: ignore[arg-type]
        status = await app.job(handle.job_id).status()
        assert status.state is JobState.SUCCEEDED
        job = await store.get_job(handle.job_id)
        assert job is not None and job.payload == b'{"data":"' + data.encode() * 100 + b'"}'
        assert await app.job(handle.job_id).result(timeout=1) == Small(True)


async def test_the_default_store_writes_a_success_in_place(
    redis_store: Factory, redis_url: str
) -> None:
    """Without ``compact_succeeded`` the settle does no more than the
    success: the record stays as the lease left it (a hashtable for a
    111-byte payload), its payload whole, its lease fields emptied."""
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = part(store)
    await run_through(store, {"a": payload_of(111)}, result=b"1", result_ttl=3600.0)
    await run_through(store, {"b": payload_of(111)}, retain_for=3600.0)
    for name in ("a", "b"):
        stored: dict[bytes, bytes] = client.hgetall(pk.job(name))  # type: ignore[assignment]
        assert client.object("encoding", pk.job(name)) == b"hashtable"
        assert stored[b"payload"] == payload_of(111) and b"pn" not in stored
        assert all(stored[f] == b"" for f in LEASE_FIELDS)
        got = await store.get_job(name)
        assert got is not None and got.payload == payload_of(111) and got.damage == ""


async def test_compact_succeeded_is_a_store_url_option(
    redis_store: Factory, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    for value, compact in (("1", True), ("true", True), ("no", False)):
        store = await redis_store(f"{redis_url}?compact_succeeded={value}", namespace=value)
        pk = part(store)
        await run_through(store, {"a": payload_of(111)}, result=b"1", result_ttl=3600.0)
        encoding = client.object("encoding", pk.job("a"))
        assert encoding == (b"listpack" if compact else b"hashtable"), value
    # the keyword wins over the query
    store = await redis_store(f"{redis_url}?compact_succeeded=1", compact_succeeded=False)
    assert not store._ctx.compact_succeeded
    with pytest.raises(ValueError, match="compact_succeeded must be true or false"):
        RedisStore.from_url(f"{redis_url}?compact_succeeded=maybe")
