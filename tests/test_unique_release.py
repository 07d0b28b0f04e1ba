"""Every way a unique key is given back, seen in the store itself (issue 23,
item 12): after each way a job can finish, its lock is gone (a throttle's
success: kept for its ttl), on memory and Redis.

The conformance suite checks the behaviour (a new job of the key is
stored); but a lock whose job is gone or finished is stale to the next
enqueue in every mode, so a release that broke would go unseen there. Here
the lock is read where each store keeps it (the memory store's lock table,
the Redis key ``<tag>:u:<key>``), so breaking any one release fails its
case. The paths, and where each release is:

==================  ==========================================================
path                memory                        Redis (Lua)
==================  ==========================================================
succeeded           settle (UniqueLocks.succeeded)  settle.lua (unique_finished ok)
dead                settle (release)              settle.lua 'd'
discarded           settle (release)              settle.lua 'x'
aborted (leased)    settle ABORTED                settle.lua -> abort_job
aborted (waiting)   abort                         abort.lua -> abort_job
deleted             delete_job                    delete.lua
expired             _expire (lease)               lease.lua expire()
recovered dead      recover_expired               recover.lua 'dead'
recovered aborted   recover_expired               recover.lua -> abort_job
repaired dead       memory._check._repair         check_repair.lua dead_letter
repaired aborted    memory._check._repair         check_repair.lua -> abort_job
damaged (lease)     _set_aside                    lib/dead_letter.lua
damaged (checker)   memory._check._repair         check_repair.lua dead_letter
==================  ==========================================================
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable

import psycopg
import pytest
import redis
import trio
from psycopg import sql

from chronos_trio import JobState, MemoryStore, NewJob, Unique
from chronos_trio.records._control import JobControl
from chronos_trio.store import AbortResult, QueueWeight, SettleKind, Settlement, Store
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.testing.damage import Damage, damage_job, redis_client
from tests._backends import Backend

KEY = "the-key"
#: A throttle's ttl beyond any test: only a release frees the key.
TTL = 600.0


def unique(n: int = 0, *, mode: str = "throttle", **kw: object) -> NewJob:
    ttl = TTL if mode == "throttle" else None
    return NewJob(
        id=f"u{n}",
        queue="q",
        kind="k",
        payload=b'{"n":1}',
        unique=Unique(key=KEY, mode=mode, ttl=ttl),  # type: ignore[arg-type]
        id_given=False,
        **kw,  # type: ignore[arg-type]
    )


#: The Redis URL of each RedisStore these tests made (it keeps none itself).
URLS: dict[int, str] = {}


def make_store(backend: Backend, *, damageable: bool = False) -> Store:
    store = backend.store(damageable=damageable)
    if backend.redis_url is not None:
        URLS[id(store)] = backend.redis_url
    return store


async def lock_of(store: Store) -> tuple[str, bool] | None:
    """The holder of KEY's lock and whether it lapses by itself (has a
    ttl), read where the store keeps it; None when there is no live lock."""
    if isinstance(store, MemoryStore):
        lock = store._unique._locks.get(("q", KEY))
        now = await store.now()
        if lock is None or (lock.expires_at is not None and lock.expires_at <= now):
            return None
        return lock.holder, lock.expires_at is not None
    if isinstance(store, PostgresStore):
        return await trio.to_thread.run_sync(_postgres_lock, store)
    if isinstance(store, SqliteStore):
        now = await store.now()
        return await trio.to_thread.run_sync(_sqlite_lock, store, now)
    assert isinstance(store, RedisStore)
    pk = KeySpace(store.namespace).partition("q", 1, 0)  # one partition: the backend's stores
    client = redis.Redis.from_url(URLS[id(store)])
    try:
        value: bytes | None = client.get(pk.unique_prefix + KEY)  # type: ignore[assignment]
        ttl = client.pttl(pk.unique_prefix + KEY)
    finally:
        client.close()
    return None if value is None else (value[1:].decode(), ttl > 0)  # type: ignore[operator]


def _postgres_lock(store: PostgresStore) -> tuple[str, bool] | None:
    with psycopg.connect(store.options.conninfo) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT holder, expires_at IS NOT NULL FROM {}.unique_locks"
                " WHERE queue = 'q' AND key = %s"
                " AND (expires_at IS NULL OR expires_at > {}.chronos_now())"
            ).format(sql.Identifier(store.schema), sql.Identifier(store.schema)),
            (KEY,),
        ).fetchone()
    return None if row is None else (row[0], bool(row[1]))


def _sqlite_lock(store: SqliteStore, now: float) -> tuple[str, bool] | None:
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        row = conn.execute(
            "SELECT holder, expires_at IS NOT NULL FROM unique_locks"
            " WHERE queue = 'q' AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (KEY, now),
        ).fetchone()
    return None if row is None else (row[0], bool(row[1]))


def _sqlite_delete_row(store: SqliteStore, job_id: str) -> None:
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))


def _delete_row(store: PostgresStore, job_id: str) -> None:
    with psycopg.connect(store.options.conninfo) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {}.jobs WHERE id = %s").format(sql.Identifier(store.schema)),
            (job_id,),
        )


async def lease_one(store: Store, ttl: float = 60.0) -> Settlement:
    [got] = (await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=ttl)).jobs
    return Settlement(got.ref, SettleKind.SUCCEEDED)


async def enqueued(store: Store, **kw: object) -> str:
    [made] = await store.enqueue_many([unique(**kw)])  # type: ignore[arg-type]
    assert made.created
    assert await lock_of(store) == (made.job_id, False), "the job holds its key"
    return made.job_id


async def settled(store: Store, kind: SettleKind, *, mode: str = "throttle") -> str:
    job_id = await enqueued(store, mode=mode)
    s = await lease_one(store)
    assert (await store.settle([Settlement(s.lease, kind, error="boom")])).settled == (True,)
    return job_id


async def succeeded_lock(store: Store) -> str:
    return await settled(store, SettleKind.SUCCEEDED, mode="lock")


async def succeeded_debounce(store: Store) -> str:
    return await settled(store, SettleKind.SUCCEEDED, mode="debounce")


async def dead(store: Store) -> str:
    return await settled(store, SettleKind.DEAD)


async def discarded(store: Store) -> str:
    return await settled(store, SettleKind.DISCARD)


async def aborted_leased(store: Store) -> str:
    job_id = await enqueued(store)
    s = await lease_one(store)
    assert await store.abort(job_id) is AbortResult.FLAGGED
    assert (await store.settle([Settlement(s.lease, SettleKind.ABORTED)])).settled == (True,)
    return job_id


async def aborted_waiting(store: Store) -> str:
    job_id = await enqueued(store, delay=60.0)
    assert await store.abort(job_id) is AbortResult.ABORTED
    return job_id


async def deleted(store: Store) -> str:
    job_id = await enqueued(store, delay=60.0)
    assert await store.delete_job(job_id)
    return job_id


async def expired(store: Store) -> str:
    job_id = await enqueued(store, control=JobControl(expires_in=0.1))
    await trio.sleep(0.2)
    got = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=60)
    assert got.jobs == () and [j.id for j in got.expired] == [job_id]
    return job_id


async def lost(store: Store, *, abort: bool = False) -> str:
    job_id = await enqueued(store, max_retries=0)
    await lease_one(store, ttl=0.1)
    if abort:
        assert await store.abort(job_id) is AbortResult.FLAGGED
    await trio.sleep(0.2)
    return job_id


async def recovered_dead(store: Store) -> str:
    job_id = await lost(store)
    assert [j.id for j in (await store.recover_expired(["q"], 10)).dead] == [job_id]
    return job_id


async def recovered_aborted(store: Store) -> str:
    job_id = await lost(store, abort=True)
    assert [j.id for j in (await store.recover_expired(["q"], 10)).aborted] == [job_id]
    return job_id


async def repaired(store: Store, *, abort: bool) -> str:
    job_id = await lost(store, abort=abort)
    await trio.sleep(0.5)
    report = await store.check(repair=True, lease_grace=0.3)
    assert [f.job_id for f in report.findings] == [job_id], report.findings
    return job_id


async def repaired_dead(store: Store) -> str:
    return await repaired(store, abort=False)


async def repaired_aborted(store: Store) -> str:
    return await repaired(store, abort=True)


async def damage(store: Store, job_id: str) -> None:
    if isinstance(store, PostgresStore | SqliteStore):
        pytest.skip("an SQL row cannot hold a field of the wrong type")
    assert isinstance(store, MemoryStore | RedisStore)
    client = redis_client(URLS[id(store)]) if isinstance(store, RedisStore) else None
    try:
        await damage_job(
            store, job_id, queue="q", field="attempts", how=Damage.WRONG_TYPE, client=client
        )
    finally:
        if client is not None:
            client.close()


async def damaged_leased(store: Store) -> str:
    job_id = await enqueued(store)
    await damage(store, job_id)
    got = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=60)
    assert got.jobs == () and [j.id for j in got.aside.dead] == [job_id]
    return job_id


async def damaged_repaired(store: Store) -> str:
    job_id = await enqueued(store, delay=60.0)
    await damage(store, job_id)
    report = await store.check(repair=True)
    assert [f.job_id for f in report.findings] == [job_id], report.findings
    return job_id


PATHS: dict[str, Callable[[Store], Awaitable[str]]] = {
    "succeeded-lock": succeeded_lock,
    "succeeded-debounce": succeeded_debounce,
    "dead": dead,
    "discarded": discarded,
    "aborted-leased": aborted_leased,
    "aborted-waiting": aborted_waiting,
    "deleted": deleted,
    "expired": expired,
    "recovered-dead": recovered_dead,
    "recovered-aborted": recovered_aborted,
    "repaired-dead": repaired_dead,
    "repaired-aborted": repaired_aborted,
    "damaged-by-lease": damaged_leased,
    "damaged-by-checker": damaged_repaired,
}


@pytest.mark.parametrize("path", PATHS)
async def test_a_finished_job_gives_its_key_back(
    path: str, backend: Backend, clock: object
) -> None:
    store = make_store(backend, damageable=path.startswith("damaged"))
    with trio.fail_after(backend.pick(memory=60, redis=10)):
        job_id = await PATHS[path](store)
        found = await store.get_job(job_id)
        assert found is None or found.state in (JobState.DEAD, JobState.ABORTED, JobState.SUCCEEDED)
        assert await lock_of(store) is None, f"{path}: {job_id} kept its key"


async def test_a_throttle_s_success_keeps_its_key_for_the_ttl_through_trim(
    backend: Backend, clock: object
) -> None:
    store = make_store(backend)
    with trio.fail_after(backend.pick(memory=60, redis=10)):
        job_id = await enqueued(store)
        s = await lease_one(store)
        ok = Settlement(s.lease, SettleKind.SUCCEEDED, retain_for=0.1)
        assert (await store.settle([ok])).settled == (True,)
        assert await lock_of(store) == (job_id, True), "kept, and now it lapses"
        await trio.sleep(0.2)
        assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 1
        assert await lock_of(store) == (job_id, True), "trimming the job keeps the throttle"


@pytest.mark.parametrize("again", ["requeue", "run_now"])
async def test_a_dead_job_run_again_does_not_take_its_key_back(
    again: str, backend: Backend, clock: object
) -> None:
    store = make_store(backend)
    with trio.fail_after(backend.pick(memory=60, redis=10)):
        old = await settled(store, SettleKind.DEAD)
        [new] = await store.enqueue_many([unique(1, delay=60.0)])
        assert new.created and await lock_of(store) == (new.job_id, False)
        if again == "requeue":
            assert (await store.requeue_dead("q")).count == 1
        else:
            assert await store.run_now(old)
        assert await lock_of(store) == (new.job_id, False)
        s = await lease_one(store)
        assert s.lease.job_id == old
        assert (await store.settle([s])).settled == (True,)
        assert await lock_of(store) == (new.job_id, False), "its success left the key alone"


async def test_a_debounce_replaces_its_job_and_keeps_the_lock(
    backend: Backend, clock: object
) -> None:
    store = make_store(backend)
    first = await enqueued(store, mode="debounce", delay=60.0)
    [again] = await store.enqueue_many([unique(1, mode="debounce", delay=30.0)])
    assert not again.created and again.job_id == first
    assert await lock_of(store) == (first, False)


async def test_a_throttle_s_key_is_not_taken_for_good_by_a_lost_job(
    backend: Backend, clock: object
) -> None:
    """A job removed behind the store's back (a hand edit, an eviction, a
    bug) gives no key back; a throttle's lock has no expiry until its job
    succeeds, so on main its key stayed taken for ever. A lock whose job is
    gone is stale to the next enqueue, in every mode."""
    store = make_store(backend)
    job_id = await enqueued(store, delay=60.0)
    if isinstance(store, MemoryStore):
        del store._records[job_id]
    elif isinstance(store, PostgresStore):
        await trio.to_thread.run_sync(_delete_row, store, job_id)
    elif isinstance(store, SqliteStore):
        await trio.to_thread.run_sync(_sqlite_delete_row, store, job_id)
    else:
        assert isinstance(store, RedisStore)
        client = redis.Redis.from_url(URLS[id(store)])
        try:
            client.delete(KeySpace(store.namespace).partition("q", 1, 0).job(job_id))
        finally:
            client.close()
    [again] = await store.enqueue_many([unique(1)])
    assert again.created and again.job_id != job_id
    assert await lock_of(store) == (again.job_id, False)
