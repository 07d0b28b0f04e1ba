"""Unique-job locks on Redis: where they live, and that a damaged or stale
lock never blocks a key for good and never costs a job."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import redis

from chronos_trio import NewJob, Unique
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace

pytestmark = pytest.mark.redis

Factory = Callable[..., Awaitable[RedisStore]]


def unique(key: str, n: int = 0, **kw: object) -> NewJob:
    return NewJob(
        id=f"auto-{key}-{n}", queue="q", kind="k", payload=b"{}", unique=Unique(key=key, **kw),  # type: ignore[arg-type]
        id_given=False,
    )  # fmt: skip


async def test_the_lock_names_its_mode_and_holder_beside_the_job(
    redis_store: Factory, redis_url: str
) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = KeySpace(store.namespace).partition("q", 1, 0)
    [a, b] = await store.enqueue_many([unique("plain"), unique("ttl", ttl=5.0)])
    assert client.get(pk.unique_prefix + "plain") == b"l" + a.job_id.encode()
    assert client.pttl(pk.unique_prefix + "plain") == -1  # lasts while the job is pending
    assert 0 < client.pttl(pk.unique_prefix + "ttl") <= 5000
    # the record's extras: the unique spec, NUL, the workflow continuation (none)
    assert client.hget(pk.job(a.job_id), "x") == b"l|plain\0"
    assert client.hget(pk.job(b.job_id), "x") == b"l5000|ttl\0"
    leased = (await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=5.0)).jobs
    await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in leased])
    assert client.exists(pk.unique_prefix + "plain", pk.unique_prefix + "ttl") == 0


async def test_a_stale_or_damaged_lock_is_taken_over(redis_store: Factory, redis_url: str) -> None:
    store = await redis_store()
    client = redis.Redis.from_url(redis_url)
    pk = KeySpace(store.namespace).partition("q", 1, 0)
    [held] = await store.enqueue_many([unique("gone")])
    client.delete(pk.job(held.job_id))  # its job vanished (a manual delete, a flush)
    client.hset(pk.unique_prefix + "hash", "x", "y")  # a lock key of another type
    client.set(pk.unique_prefix + "junk", "l")  # a lock naming no job
    got = await store.enqueue_many([unique("gone", 1), unique("hash", 2), unique("junk", 3)])
    assert [r.created for r in got] == [True, True, True]
    assert client.get(pk.unique_prefix + "gone") == b"l" + got[0].job_id.encode()
    assert client.get(pk.unique_prefix + "hash") == b"l" + got[1].job_id.encode()
    # a record whose x field is damaged settles as usual (its lock is left to lapse)
    client.hset(pk.job(got[2].job_id), "x", "???")
    leased = (await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=5.0)).jobs
    assert len(leased) == 3
    done = await store.settle([Settlement(lj.ref, SettleKind.SUCCEEDED) for lj in leased])
    assert done.settled == (True, True, True)
    # and the next enqueue of that key takes the stale lock over
    assert (await store.enqueue_many([unique("junk", 4)]))[0].created
