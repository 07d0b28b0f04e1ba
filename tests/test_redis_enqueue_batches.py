"""enqueue.lua's one path for every job, its zset entries gathered into one
ZADD per zset (lib/enqueue_head.lua), and its one KEYS entry: what it
stores is byte for byte what the script before it stored, for single jobs,
delayed ones, and batches that mix plain jobs with unique, workflow,
limited, chunked, duplicate and existing ones.

The reference is the enqueue script as composed at commit 1ffeee3
(``tests/data/enqueue_1ffeee3.lua``, six KEYS): the same jobs go through
the store once with it and once with today's script, on one redis-server
whose clock stands still (libfaketime, see ``chronos_trio.testing.faketime``),
each into its own database; every key (but the wake-up streams, whose
entry IDs are not ours) must ``DUMP`` to the same bytes, and every
EnqueueResult must be the same. A lone plain job (due now, nothing but a
record) takes ``enqueue_plain.lua`` today (``store.redis._enqueue_one``):
the single jobs below hold it to the same bytes as well, the reference
side sending every job through the reference script.

The reference is pinned to record format 2: when the format changes on
purpose, delete these tests rather than pin a new reference. It was made
(and can be checked) by composing the script in a checkout of 1ffeee3:
``git worktree add /tmp/old 1ffeee3 && cd /tmp/old && python -c "from
chronos_trio.store.redis import _scripts; import sys;
sys.stdout.buffer.write(_scripts.ENQUEUE.source)" | cmp - OURS/tests/data/enqueue_1ffeee3.lua``
(from the old checkout's directory, so its package is the one imported).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import NewJob
from chronos_trio.records import Unique
from chronos_trio.records._control import JobControl
from chronos_trio.records._jobs import EnqueueResult
from chronos_trio.store import QueueWeight, StoreError
from chronos_trio.store.redis import RedisStore, _enqueue_one, _scripts
from chronos_trio.store.redis._codec import PAYLOAD_CHUNK
from chronos_trio.store.redis.keys import KeySpace, PartitionKeys
from chronos_trio.testing.faketime import FrozenClock
from chronos_trio.testing.redis_server import RedisServer, RedisUnavailable, in_ci

pytestmark = pytest.mark.redis

_REFERENCE_SOURCE = (Path(__file__).parent / "data" / "enqueue_1ffeee3.lua").read_bytes()
REFERENCE = _scripts.Script("enqueue")
REFERENCE.__dict__["source"] = _REFERENCE_SOURCE  # the old composition, not lua/ as it is now


def _reference_keys(pk: PartitionKeys) -> list[str]:
    """The six KEYS the reference script takes (its header)."""
    return [pk.scheduled, pk.ready, pk.closed, pk.job_prefix, pk.unique_prefix, pk.retry]


@pytest.fixture(scope="module")
def clock() -> Iterator[FrozenClock]:
    c = FrozenClock()
    yield c
    c.close()


@pytest.fixture(scope="module")
def frozen_server(clock: FrozenClock) -> Iterator[RedisServer]:
    try:
        server = RedisServer(env=clock.server_env()).start()
    except RedisUnavailable as exc:
        if in_ci():
            pytest.fail(f"libfaketime and Redis are required under CI=true: {exc}")
        pytest.skip(str(exc))
    yield server
    server.close()


def job(job_id: str, **kw: object) -> NewJob:
    kw.setdefault("payload", b'{"n": 1}')
    kw.setdefault("queue", "q")
    return NewJob(id=job_id, kind="k", **kw)  # type: ignore[arg-type]


def _dump_all(client: redis.Redis) -> dict[bytes, tuple[object, object]]:
    """Every key but the wake-up streams: (type, DUMP)."""
    out: dict[bytes, tuple[object, object]] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"stream":
            continue
        out[key] = (kind, client.dump(key))
    return out


async def _run_both(
    server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    steps: Sequence[Sequence[NewJob]],
    clock: FrozenClock,
) -> tuple[list[list[EnqueueResult]], list[list[EnqueueResult]]]:
    """Each batch of ``steps`` enqueued in turn, at one instant, through
    the reference script into db 1 and today's into db 2 (the clock moves
    on between batches); the results of each."""
    base = f"redis://127.0.0.1:{server.port}"
    for db in (1, 2):
        redis.Redis(port=server.port, db=db).flushdb()
    ref = RedisStore.from_url(f"{base}/1", default_partitions=1)
    new = RedisStore.from_url(f"{base}/2", default_partitions=1)
    got_ref: list[list[EnqueueResult]] = []
    got_new: list[list[EnqueueResult]] = []
    try:
        for batch in steps:
            with monkeypatch.context() as m:
                m.setattr(_scripts, "ENQUEUE", REFERENCE)
                m.setattr(PartitionKeys, "enqueue_keys", property(_reference_keys))
                # every job through the reference script: a lone plain job
                # would take enqueue_plain.lua (today's, on both sides)
                m.setattr(_enqueue_one, "is_plain", lambda job: False)
                m.setattr(_enqueue_one, "_HEADS", {})
                got_ref.append(await ref.enqueue_many(list(batch)))
            got_new.append(await new.enqueue_many(list(batch)))
            clock.advance(0.25)
    finally:
        await ref.aclose()
        await new.aclose()
    return got_ref, got_new


def _assert_same(server: RedisServer) -> int:
    ref = _dump_all(redis.Redis(port=server.port, db=1))
    new = _dump_all(redis.Redis(port=server.port, db=2))
    assert sorted(ref) == sorted(new)
    for key in ref:
        assert ref[key] == new[key], key
    return len(ref)


async def _check(
    server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    clock: FrozenClock,
    steps: Sequence[Sequence[NewJob]],
) -> list[list[EnqueueResult]]:
    with trio.fail_after(60):
        ref, new = await _run_both(server, monkeypatch, steps, clock)
    assert new == ref
    assert _assert_same(server) > 0
    return new


async def test_single_jobs_due_and_delayed_store_the_same_bytes(
    frozen_server: RedisServer, monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    steps = [
        [job("due")],
        [job("delay", delay=30.0)],
        [job("at", run_at=clock.now() + 100.0)],
        [job("past", run_at=clock.now() - 5.0)],
        [job("headers", headers=(("trace", "abc"),))],
        [job("due")],  # exists: not stored again, its due time reported
        [job("big-delayed", delay=60.0, payload=b"y" * (3 * PAYLOAD_CHUNK + 7))],
        [job("big-due", payload=b"z" * (3 * PAYLOAD_CHUNK + 7))],
    ]
    client = redis.Redis(port=frozen_server.port)
    client.script_flush()
    new = await _check(frozen_server, monkeypatch, clock, steps)
    assert [r.created for [r] in new] == [True] * 5 + [False, True, True]
    # today's side took the plain script for its lone plain jobs
    assert client.script_exists(_scripts.ENQUEUE_PLAIN.sha) == [True]


async def test_batches_of_a_thousand_store_the_same_bytes(
    frozen_server: RedisServer, monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    steps = [
        # a listpack ready zset of 3, then runs of 1000, 128 and 129 entries
        [job(f"e{i}") for i in range(3)],
        [job(f"d{i}") for i in range(1000)],
        [job(f"s{i}", delay=10.0 + i % 7) for i in range(1000)],
        [job(f"q{i}", delay=5.0, queue="q128") for i in range(128)],
        [job(f"r{i}", delay=5.0, queue="q129") for i in range(129)],
        # 1200 jobs: three looks before the loop; one ID of the second look
        # and one of the third exist already
        [job(f"w{i}" if i not in (700, 1100) else f"d{i % 1000}") for i in range(1200)],
    ]
    new = await _check(frozen_server, monkeypatch, clock, steps)
    assert all(r.created for batch in new[:5] for r in batch)
    assert [i for i, r in enumerate(new[5]) if not r.created] == [700, 1100]
    client = redis.Redis(port=frozen_server.port, db=2)
    space = KeySpace("chronos")
    encodings = {
        queue: client.object("encoding", space.partition(queue, 1, 0).scheduled)
        for queue in ("q", "q128", "q129")
    }
    # 128 entries stay a listpack, as one ZADD leaves them; 129 do not
    assert encodings == {"q": b"skiplist", "q128": b"listpack", "q129": b"skiplist"}
    assert client.zcard(space.partition("q129", 1, 0).scheduled) == 129


async def test_a_mixed_batch_stores_the_same_bytes(
    frozen_server: RedisServer, monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    """Plain jobs between unique, debounced, workflow, limited, chunked,
    duplicate and existing ones: each way reads what the jobs before it in
    the batch stored."""
    mixed = [
        job("p1"),
        job("u1", unique=Unique(key="lock-a")),
        job("p2", delay=20.0),
        job("u2", unique=Unique(key="lock-a")),  # held by u1: not stored
        job("p1"),  # earlier in this batch: not stored again
        job("wf", then='{"next": 1}'),
        job("db1", delay=50.0, unique=Unique(key="deb", mode="debounce")),
        job("p3", headers=(("h", "v"),)),
        job("db2", delay=70.0, unique=Unique(key="deb", mode="debounce"), payload=b"new"),
        job("prio", control=JobControl(priority=3)),
        job("big", delay=40.0, payload=b"q" * (2 * PAYLOAD_CHUNK + 1)),
        job("p4"),
        job("old"),  # stored by the batch before
        job("ttl", unique=Unique(key="t", mode="throttle", ttl=5.0)),
        job("p2"),
        job("p5", run_at=clock.now() + 3.0),
    ]
    steps = [[job("old", delay=9.0)], mixed, [job("p6"), *mixed[:4]]]
    new = await _check(frozen_server, monkeypatch, clock, steps)
    created = [r.created for r in new[1]]
    assert created == [
        True, True, True, False, False, True, True, True, False, True, True, True, False,
        True, False, True,
    ]  # fmt: skip
    assert new[1][3].job_id == "u1" and new[1][8].job_id == "db1"


async def test_plain_and_unique_jobs_on_a_cluster_are_all_stored_and_leased(
    redis_cluster_url: str,
) -> None:
    """One KEYS entry routes each partition's call to its node (8
    partitions over 3 masters); a mixed batch is stored whole."""
    store = RedisStore.from_url(redis_cluster_url, default_partitions=8)
    try:
        with trio.fail_after(30):
            jobs = [job(f"c{i}") for i in range(300)]
            jobs += [
                job(f"cu{i}", unique=Unique(key=f"k{i % 5}"), id_given=False) for i in range(10)
            ]
            jobs += [job(f"cd{i}", delay=600.0) for i in range(20)]
            got = await store.enqueue_many(jobs)
            assert sum(r.created for r in got) == 300 + 5 + 20
            again = await store.enqueue_many(jobs[:50])
            assert not any(r.created for r in again)
            ids: list[str] = []
            while True:
                got_l = await store.lease([QueueWeight("q")], 400, worker_id="w", lease_duration=30)
                if not got_l.jobs:
                    break
                ids += [lj.job.id for lj in got_l.jobs]
            assert len(ids) == len(set(ids)) == 305
            assert set(ids) >= {f"c{i}" for i in range(300)}
    finally:
        await store.aclose()


async def test_a_batch_refuses_a_zset_of_another_type_before_writing(redis_url: str) -> None:
    """A call of several jobs adds their zset entries after their records:
    it checks both zsets first, so a key of the wrong type fails it with
    nothing written (a single job, as before, fails at its ZADD)."""
    store = RedisStore.from_url(redis_url, default_partitions=1)
    client = redis.Redis.from_url(redis_url)
    try:
        with trio.fail_after(30):
            await store.enqueue_many([job("first")])  # the queue's topology
            pk = store._ctx.keys.partition("q", 1, 0)
            for wrong in (pk.ready, pk.scheduled):
                client.set(wrong, "not a zset")
                before = set(client.scan_iter(match=pk.job_prefix + "*"))
                with pytest.raises(StoreError, match="WRONGTYPE"):
                    await store.enqueue_many([job("a"), job("b", delay=60.0), job("c")])
                assert set(client.scan_iter(match=pk.job_prefix + "*")) == before
                client.delete(wrong)
            got = await store.enqueue_many([job("a"), job("b", delay=60.0), job("c")])
            assert all(r.created for r in got)
    finally:
        client.close()
        await store.aclose()
