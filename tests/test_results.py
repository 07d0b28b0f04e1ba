"""Job results and handles end to end: a handler's return value, encoded by
its return annotation inside the fenced success settle, read back typed
through the handle ``enqueue`` returns or ``app.job(job_id)``; failures,
expiry, unknown jobs, bad results; pushed waiting (with a race test for the
wake-up between the check and the block) on memory, Redis and the Cluster."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio

from chronos_trio import (
    App,
    JobContext,
    JobFailed,
    JobNotFound,
    JobState,
    MemoryStore,
    PayloadError,
    QueueWeight,
    ResultExpired,
    ResultTimeout,
    Task,
)
from chronos_trio.records import JobRef
from chronos_trio.store import SettleKind, Settlement
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis import _results as redis_results
from chronos_trio.store.redis._native import MAX_BLOCKING_IDLE, MAX_OPEN, NativeNode
from chronos_trio.testing import run_until_idle
from tests._backends import Backend


@attrs.frozen
class Sum:
    a: int
    b: int


@attrs.frozen
class Total:
    value: int
    note: str = ""


def results_app(store: Any) -> App:
    app = App(store)

    @app.task("add")
    async def add(args: Sum, job: JobContext) -> Total:
        return Total(args.a + args.b, note=job.id[:4])

    @app.task("echo.bytes")
    async def echo(args: bytes, job: JobContext) -> bytes:
        return args[::-1]

    @app.task("plain.json")
    def square(n: int, job: JobContext) -> list[int]:  # a plain def: in a thread
        return [n, n * n]

    @app.task("no.result")
    async def nothing(args: Any, job: JobContext) -> None:
        return None

    @app.task("fails", max_retries=1, retry=None)
    async def fails(args: Any, job: JobContext) -> int:
        raise RuntimeError(f"bad {args}")

    @app.task("lies")
    async def lies(args: Any, job: JobContext) -> Total:
        return {"value": 1}  # type: ignore[return-value]  # not a Total

    @app.task("huge")
    async def huge(n: int, job: JobContext) -> str:
        return "x" * n

    @app.task("short.lived", result_ttl=0.5)
    async def short_lived(args: Any, job: JobContext) -> int:
        return 7

    @app.task("slow")
    async def slow(seconds: float, job: JobContext) -> str:
        await trio.sleep(seconds)
        return "late"

    return app


async def test_results_round_trip_typed(backend: Backend, clock: object) -> None:
    app = results_app(backend.store())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        with trio.fail_after(20):
            handle = await app.enqueue("add", Sum(2, 3))
            total = await handle.result(timeout=10)
            assert total == Total(5, note=handle.job_id[:4])
            assert await (await app.enqueue("echo.bytes", b"abc")).result(timeout=10) == b"cba"
            # A task that keeps no result leaves nothing once it succeeded, so
            # the wait must begin before it runs (on a real clock a worker
            # can finish it first: JobNotFound, as result() documents); due
            # a moment later, it runs after the handle registered its wait.
            kept_nothing = await app.enqueue("no.result", None, delay=0.3)
            assert await kept_nothing.result(timeout=10) is None
            # a handle made elsewhere from the ID alone reads the same result
            again = app.job(handle.job_id)
            assert await again.result(timeout=1) == total
            status = await again.status()
            assert status.state is JobState.SUCCEEDED and status.attempts == 1
            assert status.kind == "add" and status.queue == "default"


async def test_keep_outcome_reads_a_job_that_ended_before_the_wait(
    backend: Backend, clock: object
) -> None:
    """A task that keeps no result, its job finished before any wait began
    (a worker ran until idle first): enqueued with ``keep_outcome`` its
    ``result()`` is None; without it the record is gone (JobNotFound)."""
    app = results_app(backend.store())
    with trio.fail_after(60):
        marked = await app.enqueue("no.result", None, keep_outcome=True)
        plain = await app.enqueue("no.result", None)
        await run_until_idle(app, **backend.timing(poll_interval=0.5))
        assert await marked.result(timeout=5) is None
        assert (await marked.status()).state is JobState.SUCCEEDED
        with pytest.raises(JobNotFound):
            await plain.result(timeout=0)
    with pytest.raises(ValueError, match="keep_outcome must be a bool, got 'yes'"):
        await app.enqueue("no.result", None, keep_outcome="yes")  # type: ignore[typeddict-item]


async def test_memory_keep_outcome_keeps_the_record_waited_keep_seconds(
    autojump_clock: object,
) -> None:
    """The mark keeps a finished no-result job exactly as a waiter does:
    WAITED_KEEP seconds, then the trim drops it (uncounted, as ever)."""
    from chronos_trio.records._jobs import NewJob
    from chronos_trio.store._settling import WAITED_KEEP

    store = MemoryStore()
    await store.enqueue_many([NewJob("a", "q", "k", b"1", keep_outcome=True)])
    [leased] = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)).jobs
    await store.settle([Settlement(leased.ref, SettleKind.SUCCEEDED)])
    await trio.sleep(WAITED_KEEP - 1)
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 0
    assert await store.outcome(JobRef("a", "q")) is not None
    await trio.sleep(2)
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 0
    assert await store.outcome(JobRef("a", "q")) is None


async def test_a_plain_handler_returns_its_result_from_its_thread() -> None:
    # the real clock: under autojump_clock, a wait on a worker thread lets
    # virtual time run ahead to the result's timeout
    app = results_app(MemoryStore())
    async with app.open_worker(poll_interval=0.5):
        with trio.fail_after(10):
            assert await (await app.enqueue("plain.json", 4)).result(timeout=5) == [4, 16]


async def test_a_dead_job_raises_job_failed(backend: Backend, clock: object) -> None:
    app = results_app(backend.store())
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        with trio.fail_after(30):
            handle = await app.enqueue("fails", "x", max_retries=0)
            with pytest.raises(JobFailed) as failed:
                await handle.result(timeout=20)
    assert failed.value.attempts == 1 and "RuntimeError: bad x" in failed.value.last_error
    assert failed.value.job_id == handle.job_id


async def test_results_that_do_not_encode_fail_the_job_not_the_worker(
    backend: Backend, clock: object
) -> None:
    store = backend.store()
    app = results_app(store)
    app.max_payload_bytes = 10_000
    app.registry.tasks["huge"] = attrs.evolve(app.registry.tasks["huge"], max_result_bytes=1000)
    async with app.open_worker(**backend.timing(poll_interval=0.5)) as worker:
        with trio.fail_after(20):
            lies = await app.enqueue("lies", None)
            with pytest.raises(JobFailed, match="expected a Total result, got dict"):
                await lies.result(timeout=10)
            huge = await app.enqueue("huge", 5000)
            with pytest.raises(JobFailed, match="over the 1000-byte limit"):
                await huge.result(timeout=10)
            ok = await app.enqueue("huge", 10)
            assert await ok.result(timeout=10) == "x" * 10  # the worker goes on
        assert worker.statistics().dead == 2
    # dead at once: side effects ran, so no retry
    assert (await app.job(lies.job_id).status()).attempts == 1


async def test_unknown_expired_and_timed_out(backend: Backend, clock: object) -> None:
    app = results_app(backend.store())
    with pytest.raises(JobNotFound, match="no job nope"):
        await app.job("nope").result(timeout=0)
    with pytest.raises(JobNotFound):
        await app.job("nope", queue="default").status()
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        with trio.fail_after(30):
            slow = await app.enqueue("slow", 1.5)  # longer than the 0.5 s wait
            with pytest.raises(ResultTimeout, match=r"did not finish within 0\.5s"):
                await slow.result(timeout=0.5)
            assert await slow.result(timeout=10) == "late"  # it went on
            short = await app.enqueue("short.lived", None)
            assert await short.result(timeout=10) == 7
            await trio.sleep(0.8)
            # past its result_ttl: gone (or, until trimmed, expired)
            with pytest.raises((ResultExpired, JobNotFound)):
                await short.result(timeout=0)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        await slow.result(timeout=-1)


async def test_a_retained_job_outlives_its_result(backend: Backend, clock: object) -> None:
    app = results_app(backend.store())
    async with app.open_worker(**backend.timing(poll_interval=0.5), retain_succeeded=60):
        with trio.fail_after(20):
            short = await app.enqueue("short.lived", None)
            assert await short.result(timeout=10) == 7
            await trio.sleep(0.8)
            with pytest.raises(ResultExpired, match="expired"):
                await short.result(timeout=0)
            status = await short.status()
            assert status.state is JobState.SUCCEEDED and status.result_expired


async def test_many_waiters_on_many_jobs(
    backend: Backend, clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.store()
    app = results_app(store)
    opened = 0
    real_open = NativeNode._open_once

    async def counted_open(self: NativeNode) -> Any:
        nonlocal opened
        opened += 1
        return await real_open(self)

    monkeypatch.setattr(NativeNode, "_open_once", counted_open)
    n = backend.pick(memory=1000, redis=1000)
    got: dict[int, Total] = {}
    async with app.open_worker(**backend.timing(poll_interval=0.5), concurrency=64):
        with trio.fail_after(60):
            add = Task(app, app.registry.tasks["add"])
            handles = await add.enqueue_many([Sum(i, i) for i in range(n)])

            async def wait(i: int) -> None:
                got[i] = await handles[i].result(timeout=50)

            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(wait, i)
    assert {i: t.value for i, t in got.items()} == {i: 2 * i for i in range(n)}
    if isinstance(store, RedisStore):
        # one subscription for them all, no waiter left registered
        assert store._done.subscriptions == 1 and store._done.waiting() == 0
        # their reads share the pool: never a connection per waiter (the
        # pool, plus the worker's blocking waits on connections of their own)
        assert opened <= MAX_OPEN + MAX_BLOCKING_IDLE + 2, opened


# -- the wake-up between the check and the block -----------------------------------------
async def test_memory_finish_right_after_the_check_is_not_missed(autojump_clock: object) -> None:
    store = MemoryStore()
    app = results_app(store)
    handle = await app.enqueue("add", Sum(1, 1))
    [leased] = (await store.lease([app_queue()], 1, worker_id="w", lease_duration=60)).jobs

    async def finish_soon() -> None:
        await trio.sleep(1)
        await store.settle(
            [Settlement(leased.ref, SettleKind.SUCCEEDED, result=b'{"value":2}', result_ttl=60)]
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finish_soon)
        with trio.fail_after(5):
            assert await handle.result(timeout=100) == Total(2)


def app_queue() -> QueueWeight:
    return QueueWeight("default")


_ns = itertools.count()


@pytest.mark.redis
@pytest.mark.parametrize("where", ["single", "cluster"])
async def test_redis_finish_between_the_check_and_the_block_is_not_missed(
    where: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job finishes after the waiter's watch read it as running and
    before the waiter blocks: the published wake-up must still reach it
    (it registered, and subscribed, before the watch)."""
    url = request.getfixturevalue("redis_url" if where == "single" else "redis_cluster_url")
    store = RedisStore.from_url(url, namespace=f"race-{next(_ns)}")
    try:
        app = results_app(store)
        handle = await app.enqueue("add", Sum(20, 22))
        [leased] = (await store.lease([app_queue()], 1, worker_id="w", lease_duration=30)).jobs
        real_watch = redis_results._watch
        finished = trio.Event()

        async def watch_then_finish(ctx: Any, ref: JobRef, channel: str) -> Any:
            found = await real_watch(ctx, ref, channel)
            if channel and not finished.is_set():
                assert found[0] is not None and found[0].state is JobState.LEASED
                ok = Settlement(
                    leased.ref, SettleKind.SUCCEEDED, result=b'{"value":42}', result_ttl=60
                )
                assert (await store.settle([ok])).settled == (True,)
                finished.set()
                # let the listener take the published wake-up before the
                # waiter goes on to block
                await trio.sleep(0.3)
            return found

        monkeypatch.setattr(redis_results, "_watch", watch_then_finish)
        with trio.fail_after(10):
            start = trio.current_time()
            assert await handle.result(timeout=8) == Total(42)
            # woken by the publish, not by the end of the wait
            assert trio.current_time() - start < 4
        assert finished.is_set()
    finally:
        await store.aclose()


@pytest.mark.redis
async def test_redis_waiters_resubscribe_after_the_connection_drops(redis_url: str) -> None:
    """CLIENT KILL of the subscription: the listener subscribes again and
    every waiter reads its job again, so a finish while it was down is seen."""
    import redis as redis_py

    store = RedisStore.from_url(redis_url, namespace=f"drop-{next(_ns)}")
    admin = redis_py.Redis.from_url(redis_url)
    try:
        app = results_app(store)
        handle = await app.enqueue("add", Sum(1, 2))
        [leased] = (await store.lease([app_queue()], 1, worker_id="w", lease_duration=30)).jobs
        got: list[Any] = []

        async def wait() -> None:
            got.append(await handle.result(timeout=15))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                while store._done.waiting() == 0:
                    await trio.sleep(0.01)
                # kill every pub/sub connection, then finish the job while it is down
                for client in admin.client_list():
                    if client.get("cmd") in ("subscribe", "ssubscribe") or int(
                        client.get("sub", 0)
                    ):
                        admin.client_kill_filter(_id=client["id"])
                ok = Settlement(
                    leased.ref, SettleKind.SUCCEEDED, result=b'{"value":3}', result_ttl=60
                )
                assert (await store.settle([ok])).settled == (True,)
        assert got == [Total(3)]
        assert store._done.subscriptions >= 2
    finally:
        admin.close()
        await store.aclose()


async def test_result_of_a_bad_stored_value_is_a_payload_error(autojump_clock: object) -> None:
    store = MemoryStore()
    app = results_app(store)
    handle = await app.enqueue("add", Sum(1, 1))
    [leased] = (await store.lease([app_queue()], 1, worker_id="w", lease_duration=60)).jobs
    await store.settle(
        [Settlement(leased.ref, SettleKind.SUCCEEDED, result=b'{"nope":1}', result_ttl=60)]
    )
    with pytest.raises(PayloadError, match=f"result of job {handle.job_id}"):
        await handle.result(timeout=1)


@pytest.mark.redis
async def test_results_on_the_cluster(redis_cluster_url: str) -> None:
    """Jobs spread over 8 partitions of a 3-master Cluster: each handle's
    waiter is woken from whichever node settles its job."""
    store = RedisStore.from_url(
        redis_cluster_url, namespace=f"cluster-results-{next(_ns)}", default_partitions=8
    )
    try:
        app = results_app(store)
        add = Task(app, app.registry.tasks["add"])
        async with app.open_worker(poll_interval=0.2, lease_duration=5.0, concurrency=16):
            with trio.fail_after(30):
                handles = await add.enqueue_many([Sum(i, 1) for i in range(40)])
                assert len({h.partition for h in handles}) > 1
                got = [None] * len(handles)

                async def wait(i: int) -> None:
                    got[i] = await handles[i].result(timeout=20)  # type: ignore[call-overload]

                async with trio.open_nursery() as nursery:
                    for i in range(len(handles)):
                        nursery.start_soon(wait, i)
                dead = await app.enqueue("fails", "c", max_retries=0)
                with pytest.raises(JobFailed):
                    await dead.result(timeout=20)
        assert [t.value for t in got] == [i + 1 for i in range(40)]  # type: ignore[union-attr]
        assert await app.job(handles[3].job_id).result(timeout=1) == got[3]
    finally:
        await store.aclose()


@pytest.mark.redis
async def test_redis_keeps_a_result_only_record_out_of_the_indexes(redis_url: str) -> None:
    """Kept only for its result (no retain_succeeded), a succeeded record is
    in no index and expires by itself: nothing for the janitor to trim, and
    the checker does not call it an orphan. Retained, it is indexed."""
    import redis as redis_py

    store = RedisStore.from_url(redis_url, namespace=f"ttl-{next(_ns)}")
    client = redis_py.Redis.from_url(redis_url)
    try:
        app = results_app(store)
        a = await app.enqueue("add", Sum(1, 1))
        b = await app.enqueue("add", Sum(2, 2))
        leased = {
            lj.job.id: lj
            for lj in (await store.lease([app_queue()], 2, worker_id="w", lease_duration=30)).jobs
        }
        await store.settle(
            [
                Settlement(leased[a.job_id].ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=30),
                Settlement(
                    leased[b.job_id].ref,
                    SettleKind.SUCCEEDED,
                    retain_for=60,
                    result=b"2",
                    result_ttl=30,
                ),
            ]
        )
        pk = store._ctx.keys.partition("default", 1, 0)
        assert 0 < client.pttl(pk.job(a.job_id)) <= 30_000
        assert client.zscore(pk.succeeded, a.job_id) is None
        assert client.pttl(pk.job(b.job_id)) == -1  # retained: trimmed by the janitor
        assert client.zscore(pk.succeeded, b.job_id) is not None
        report = await store.check()
        assert report.findings == (), report.findings
        assert (await a.status()).result == b"1"
    finally:
        client.close()
        await store.aclose()


async def test_redis_keep_outcome_names_the_done_channel_in_the_record(redis_url: str) -> None:
    """enqueue.lua stores a job marked as waited on with field w (the
    namespace's done channel, as watch.lua writes it), beside whatever
    else its extras hold (a unique key, flow control, a chunked payload),
    which it stores as it does without the mark; an unmarked job has no w.
    A duplicate of a held unique key is left untouched."""
    import redis as redis_py

    from chronos_trio.records import Unique
    from chronos_trio.records._control import JobControl
    from chronos_trio.records._jobs import NewJob
    from chronos_trio.store.redis._codec import PAYLOAD_CHUNK

    store = RedisStore.from_url(redis_url, namespace=f"mark-{next(_ns)}")
    client = redis_py.Redis.from_url(redis_url)
    try:
        unique = Unique(key="u", mode="lock", ttl=None)
        big = b'"' + b"x" * (2 * PAYLOAD_CHUNK) + b'"'
        jobs = [
            NewJob("plain", "q", "k", b"1", keep_outcome=True),
            NewJob("unique", "q", "k", b"1", unique=unique, keep_outcome=True),
            NewJob("prio", "q", "k", b"1", control=JobControl(priority=3), keep_outcome=True),
            NewJob("chunked", "q", "k", big, delay=60, keep_outcome=True),
            NewJob("unmarked", "q", "k", b"1"),
        ]
        for new in jobs:  # lone enqueues (the one-job path), then a batch
            [made] = await store.enqueue_many([new])
            assert made.created
        more = [NewJob(f"b{n}", "q", "k", b"1", keep_outcome=n % 2 == 0) for n in range(4)]
        await store.enqueue_many(more)
        [dup] = await store.enqueue_many(
            [NewJob("dup", "q", "k", b"1", unique=unique, keep_outcome=True)]
        )
        assert not dup.created and dup.job_id == "unique"
        pk = store._ctx.keys.partition("q", 1, 0)
        channel = store._ctx.keys.done_channel.encode()

        def fields(job_id: str) -> dict[bytes, bytes]:
            return client.hgetall(pk.job(job_id))  # type: ignore[return-value]

        for job_id in ("plain", "unique", "prio", "chunked", "b0", "b2"):
            assert fields(job_id).get(b"w") == channel, job_id
        for job_id in ("unmarked", "b1", "b3"):
            assert b"w" not in fields(job_id), job_id
        assert fields("unique")[b"x"].startswith(b"l|u\0"), "its unique spec, no mark"
        assert client.get(f"{pk.job_prefix[:-2]}u:u") == b"lunique", "the key is taken"
        assert fields("prio")[b"fc"] and b"x" not in fields("prio")
        assert fields("chunked")[b"pn"] == b"2"
        assert client.exists(pk.job("dup")) == 0
        got = await store.get_job("chunked")
        assert got is not None and got.payload == big
        # its success, with no waiter ever registered, keeps it WAITED_KEEP
        leased = (await store.lease([QueueWeight("q")], 20, worker_id="w", lease_duration=30)).jobs
        [plain] = [lj for lj in leased if lj.job.id == "plain"]
        await store.settle([Settlement(plain.ref, SettleKind.SUCCEEDED)])
        assert 55_000 < client.pttl(pk.job("plain")) <= 60_000
    finally:
        client.close()
        await store.aclose()
