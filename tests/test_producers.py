"""Producers outside Trio: a threaded synchronous program and an asyncio
program enqueue against the test Redis (and the Cluster) while a Trio
worker runs in the test; their jobs and typed results round-trip, in bulk
too; status, dead jobs, unknown jobs and timeouts read as JobHandle reads
them; the subscribe-first wake-up is not lost; the memory store is refused;
an unreachable Redis is a StoreError; and nothing imports Trio.

The programs run in threads (``trio.to_thread``, and ``asyncio.run`` in a
thread) because the tests themselves run under pytest-trio; every wait is
bounded by ``trio.fail_after`` and by the programs' own timeouts."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis as redis_py
import trio

from chronos_trio import (
    App,
    JobContext,
    JobFailed,
    JobNotFound,
    JobState,
    MemoryStore,
    ResultTimeout,
    StoreError,
)
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.producers import asyncio as asyncio_producer
from chronos_trio.producers import sync as sync_producer
from chronos_trio.testing import run_until_idle
from chronos_trio.testing.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.redis


@attrs.frozen
class Sum:
    a: int
    b: int


@attrs.frozen
class Total:
    value: int
    by: str = ""


def producer_app(url: str) -> App:
    app = App(url)

    @app.task("add")
    async def add(args: Sum, job: JobContext) -> Total:
        return Total(args.a + args.b, by=job.kind)

    @app.task("echo.bytes")
    async def echo(args: bytes, job: JobContext) -> bytes:
        return args[::-1]

    @app.task("fails", max_retries=0)
    async def fails(args: Any, job: JobContext) -> int:
        raise RuntimeError(f"bad {args}")

    @app.task("slow")
    async def slow(seconds: float, job: JobContext) -> str:
        await trio.sleep(seconds)
        return "late"

    return app


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    """The test Redis or the test Cluster, its queues in 4 partitions (so a
    batch spans partitions, and nodes on the Cluster)."""
    base = request.getfixturevalue(
        "redis_url" if request.param == "single" else "redis_cluster_url"
    )
    return f"{base}?partitions=4"


async def in_thread(fn: Callable[[], Any]) -> Any:
    """Run a program in a thread; the test's fail_after may abandon it (its
    own timeouts end it)."""
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


def threaded_program(producer: SyncProducer, threads: int, jobs_each: int) -> list[Any]:
    """Several threads share one producer, each enqueueing and then waiting."""
    got: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        try:
            handles = [producer.enqueue("add", Sum(t, i)) for i in range(jobs_each)]
            values = [h.result(timeout=20) for h in handles]
            with lock:
                got.extend(values)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    if errors:
        raise errors[0]
    return got


async def test_a_threaded_sync_program_round_trips_with_a_trio_worker(url: str) -> None:
    app = producer_app(url)
    with SyncProducer(app=app) as producer:
        async with app.open_worker(poll_interval=0.5):
            with trio.fail_after(60):
                got = await in_thread(lambda: threaded_program(producer, 6, 5))
                assert sorted(got, key=lambda t: t.value) == sorted(
                    (Total(t + i, by="add") for t in range(6) for i in range(5)),
                    key=lambda t: t.value,
                )

                def more() -> None:
                    # bulk, bytes, a Task object, status, a handle from the ID alone
                    [add] = [t for k, t in app.tasks.items() if k == "add"]
                    many = producer.enqueue_many(add, [Sum(i, 100) for i in range(20)])
                    assert len({(h.queue_version, h.partition) for h in many}) > 1
                    assert [h.result(timeout=20) for h in many] == [
                        Total(i + 100, by="add") for i in range(20)
                    ]
                    assert producer.enqueue("echo.bytes", b"abc").result(timeout=20) == b"cba"
                    status = many[0].status()
                    assert status.state is JobState.SUCCEEDED and status.kind == "add"
                    assert producer.job(many[1].job_id).result(timeout=5) == Total(101, by="add")
                    with pytest.raises(JobFailed) as failed:
                        producer.enqueue("fails", "x").result(timeout=20)
                    assert "RuntimeError: bad x" in failed.value.last_error
                    assert failed.value.attempts == 1

                await in_thread(more)
        stats = producer.statistics()
        # every thread waited through the one subscription
        assert stats.subscriptions == 1 and stats.waiting == 0


async def test_trio_and_sync_producers_read_each_others_jobs(url: str) -> None:
    app = producer_app(url)
    with SyncProducer(url) as bare:  # no app: kinds by name, JSON payloads and results
        async with app.open_worker(poll_interval=0.5):
            with trio.fail_after(60):
                from_trio = await app.enqueue("add", Sum(1, 2))
                assert await in_thread(lambda: bare.job(from_trio.job_id).result(timeout=20)) == {
                    "value": 3,
                    "by": "add",
                }
                from_sync = await in_thread(lambda: bare.enqueue("add", {"a": 2, "b": 5}))
                assert from_sync.queue == "default" and from_sync.created
                assert await app.job(from_sync.job_id).result(timeout=20) == Total(7, by="add")
                # an idempotent enqueue by job_id, seen by both sides
                again = await in_thread(
                    lambda: bare.enqueue("add", {"a": 0, "b": 0}, job_id=from_sync.job_id)
                )
                assert not again.created and again.job_id == from_sync.job_id


async def asyncio_program(url: str, app: App) -> dict[str, Any]:
    """Shaped like FastAPI endpoints: one producer, many concurrent requests."""
    out: dict[str, Any] = {}
    async with AsyncioProducer(url, app=app) as producer:

        async def request(i: int) -> Total:
            handle = await producer.enqueue("add", Sum(i, i), delay=0.1 * (i % 3))
            result: Total = await handle.result(timeout=20)
            return result

        out["concurrent"] = await asyncio.gather(*(request(i) for i in range(15)))
        many = await producer.enqueue_many("add", [Sum(i, 1) for i in range(10)])
        out["bulk"] = [await h.result(timeout=20) for h in many]
        out["partitions"] = len({h.partition for h in many})
        out["status"] = (await many[0].status()).state
        out["by_id"] = await producer.job(many[2].job_id).result(timeout=5)
        try:
            await (await producer.enqueue("fails", "y")).result(timeout=20)
        except JobFailed as exc:
            out["failed"] = exc.last_error
        try:
            await producer.job("nope", queue="default").status()
        except JobNotFound:
            out["not_found"] = True
        # long enough to outlast both waits below (the worker's shutdown waits for it)
        slow = await producer.enqueue("slow", 1.5)
        started = time.monotonic()
        try:
            await slow.result(timeout=0.3)
        except ResultTimeout:
            out["timeout_after"] = time.monotonic() - started
        # a wait can be cancelled (a client went away) and leaves nothing behind
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow.result(), 0.2)
        out["stats"] = producer.statistics()
    return out


async def test_an_asyncio_program_round_trips_with_a_trio_worker(url: str) -> None:
    app = producer_app(url)
    async with app.open_worker(poll_interval=0.5):
        with trio.fail_after(60):
            out = await in_thread(lambda: asyncio.run(asyncio_program(url, app)))
    assert sorted(out["concurrent"], key=lambda t: t.value) == [
        Total(2 * i, by="add") for i in range(15)
    ]
    assert out["bulk"] == [Total(i + 1, by="add") for i in range(10)]
    assert out["partitions"] > 1
    assert out["status"] is JobState.SUCCEEDED
    assert out["by_id"] == Total(3, by="add")
    assert "RuntimeError: bad y" in out["failed"]
    assert out["not_found"]
    assert 0.3 <= out["timeout_after"] < 3
    assert out["stats"].subscriptions == 1 and out["stats"].waiting == 0


async def test_producers_keep_outcome_reads_a_job_that_ended_before_the_wait(url: str) -> None:
    """A SyncProducer's and an AsyncioProducer's job of a task that keeps no
    result, finished before any wait began: with ``keep_outcome`` its
    ``result()`` is None; without it, JobNotFound."""
    app = producer_app(url)

    @app.task("note")
    async def note(args: Any, job: JobContext) -> None:
        return None

    async def enqueued() -> list[str]:
        async with AsyncioProducer(url, app=app) as producer:
            handles = [
                await producer.enqueue("note", 1, keep_outcome=True),
                await producer.enqueue("note", 2),
            ]
        return [h.job_id for h in handles]

    with SyncProducer(url, app=app) as producer:
        with trio.fail_after(60):
            marked = await in_thread(lambda: producer.enqueue("note", 3, keep_outcome=True))
            plain = await in_thread(lambda: producer.enqueue("note", 4))
            from_asyncio = await in_thread(lambda: asyncio.run(enqueued()))
            await run_until_idle(app, poll_interval=0.2)
            assert await in_thread(lambda: marked.result(timeout=5)) is None
            with pytest.raises(JobNotFound):
                await in_thread(lambda: plain.result(timeout=0))

            async def read(job_id: str) -> Any:
                async with AsyncioProducer(url, app=app) as again:
                    return await again.job(job_id, queue="default").result(timeout=0)

            assert await in_thread(lambda: asyncio.run(read(from_asyncio[0]))) is None
            with pytest.raises(JobNotFound):
                await in_thread(lambda: asyncio.run(read(from_asyncio[1])))
        with pytest.raises(ValueError, match="keep_outcome must be a bool"):
            producer.enqueue("note", 5, keep_outcome=1)  # type: ignore[typeddict-item]


# -- the wake-up between the check and the block ------------------------------------
_ns = itertools.count()
#: How long the racing waiter waits (it times out: no worker runs the job).
RACE_TIMEOUT = 2.5


class _Race:
    """Makes the first watch that names the channel publish the job's key
    right after reading it unfinished (as a finishing script would, between
    the waiter's check and its block), then pause so the listener takes the
    message before the waiter goes on; records when each watch ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, url: str) -> None:
        self.times: list[float] = []
        self.pending: bytes | None = None
        self.admin = redis_py.Redis.from_url(url.partition("?")[0])
        real = module.watch_plan

        def watch(core: Any, ref: Any, channel: str) -> Any:
            found, key = yield from real(core, ref, channel)
            if channel:
                self.channel = channel
                self.times.append(time.monotonic())
                if len(self.times) == 1:
                    assert found is not None and found.state is JobState.READY
                    self.pending = key
            return found, key

        monkeypatch.setattr(module, "watch_plan", watch)

    def publish(self) -> bool:
        """Publish the pending key (once); True if it did."""
        key, self.pending = self.pending, None
        if key is None:
            return False
        self.admin.publish(self.channel, key)
        return True

    def check(self) -> None:
        self.admin.close()
        # woken: watched again at once (after the 0.3 s pause), long before
        # RACE_TIMEOUT, where a lost wake-up would leave the waiter blocked
        assert len(self.times) >= 2 and self.times[1] - self.times[0] < 1.2, self.times


def test_sync_wake_up_between_the_check_and_the_block_is_not_lost(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker: the job stays ready. The key published after the waiter's
    watch must wake it at once (it subscribed and registered before the
    watch), so it watches again long before its timeout."""
    race = _Race(monkeypatch, sync_producer, redis_url)
    with SyncProducer(redis_url, namespace=f"race-{next(_ns)}") as producer:
        handle = producer.enqueue("add", {"a": 1, "b": 1})
        real_run = producer._exec.run

        def run(plan: Any) -> Any:
            result = real_run(plan)
            if race.publish():
                time.sleep(0.3)  # the listener thread takes it meanwhile
            return result

        monkeypatch.setattr(producer._exec, "run", run)
        with pytest.raises(ResultTimeout):
            handle.result(timeout=RACE_TIMEOUT)
    race.check()


def test_asyncio_wake_up_between_the_check_and_the_block_is_not_lost(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    race = _Race(monkeypatch, asyncio_producer, redis_url)

    async def program() -> None:
        async with AsyncioProducer(redis_url, namespace=f"race-{next(_ns)}") as producer:
            handle = await producer.enqueue("add", {"a": 1, "b": 1})
            real_run = producer._exec.run

            async def run(plan: Any) -> Any:
                result = await real_run(plan)
                if race.publish():
                    await asyncio.sleep(0.3)  # the listener task takes it meanwhile
                return result

            monkeypatch.setattr(producer._exec, "run", run)
            with pytest.raises(ResultTimeout):
                await handle.result(timeout=RACE_TIMEOUT)

    asyncio.run(asyncio.wait_for(program(), 20))
    race.check()


# -- refusals and failures -----------------------------------------------------------
@pytest.mark.parametrize("make", [SyncProducer, AsyncioProducer])
def test_the_memory_store_is_refused(make: Callable[..., Any]) -> None:
    for kwargs in ({"url": "memory://"}, {"app": App()}, {"app": App("memory://")}):
        with pytest.raises(ValueError, match="lives in one process and cannot be shared"):
            make(**kwargs)
    with pytest.raises(ValueError, match="lives in one process and cannot be shared"):
        make(app=App(MemoryStore()))
    with pytest.raises(ValueError, match="store object, not a URL"):
        make(app=_app_with_a_redis_object())
    with pytest.raises(ValueError, match="needs the store's URL"):
        make()
    with pytest.raises(ValueError, match="unsupported store URL"):
        make("http://example.com")


def _app_with_a_redis_object() -> App:
    from chronos_trio.store.redis import RedisStore

    return App(RedisStore.from_url("redis://127.0.0.1:1/0"))


def test_an_unreachable_redis_is_a_store_error() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with SyncProducer(dead, connect_timeout=1) as producer:
        with pytest.raises(StoreError, match="Redis at"):
            producer.enqueue("add", {"a": 1, "b": 2})
        started = time.monotonic()
        with pytest.raises(StoreError):
            producer.job("x", queue="default").result(timeout=10)
        assert time.monotonic() - started < 5, "the waiter's subscription failed at once"

    async def program() -> None:
        async with AsyncioProducer(dead, connect_timeout=1) as producer:
            with pytest.raises(StoreError, match="Redis at"):
                await producer.enqueue("add", {"a": 1, "b": 2})
            with pytest.raises(StoreError):
                await producer.job("x", queue="default").result(timeout=10)

    asyncio.run(asyncio.wait_for(program(), 20))


def test_options_are_checked_as_task_enqueue_checks_them(redis_url: str) -> None:
    app = producer_app(redis_url)
    with SyncProducer(app=app) as producer:
        with pytest.raises(ValueError, match="either delay or run_at"):
            producer.enqueue("add", Sum(1, 2), delay=1, run_at=time.time())
        with pytest.raises(ValueError, match="max_retries"):
            producer.enqueue("add", Sum(1, 2), max_retries=-1)
        from chronos_trio import PayloadError

        with pytest.raises(PayloadError, match="expected a Sum"):
            producer.enqueue("add", {"a": 1})  # the registered task's payload type
        with pytest.raises(PayloadError, match="over the"):
            producer.enqueue("echo.bytes", b"x" * (app.max_payload_bytes + 1))
        with pytest.raises(ValueError, match="job_id"):
            producer.job("")
        # nothing was sent
        assert producer.statistics().round_trips == 0
        handle = producer.enqueue("add", Sum(1, 2), delay=60, queue="later", job_id="j-1")
        assert (handle.job_id, handle.queue, handle.created) == ("j-1", "later", True)
        assert handle.status().state is JobState.SCHEDULED
        with pytest.raises(ResultTimeout):
            handle.result(timeout=0)


# -- no Trio ---------------------------------------------------------------------------
_NO_TRIO = """
import asyncio, sys
from chronos_trio.producers import SyncProducer
url = sys.argv[1]
with SyncProducer(url) as p:
    h = p.enqueue("k", {"x": 1})
    p.enqueue_many("k", [1, 2, 3])
    assert h.status().state.value == "ready"
    assert "chronos_trio.producers.asyncio" not in sys.modules
from chronos_trio.producers import AsyncioProducer
async def main():
    async with AsyncioProducer(url) as p:
        h = await p.enqueue("k", b"raw")
        await p.enqueue_many("k", [4, 5])
        assert (await h.status()).state.value == "ready"
asyncio.run(main())
import chronos_trio
chronos_trio.JobFailed  # an eagerly loaded record
print("trio" in sys.modules, "trio_util" in sys.modules, "chronos_trio.app" in sys.modules)
"""


def _runs_without_trio(url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TRIO, url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "False"], proc.stdout


def test_the_producers_import_and_run_without_trio(redis_url: str) -> None:
    _runs_without_trio(redis_url)


@pytest.mark.sqlite
def test_producers_on_sqlite_import_and_run_without_trio(sqlite_url: str) -> None:
    """A SQL store's producers open its Trio-free part (the scheme's
    producer opener), not the store: the contract "producers outside Trio
    do not import trio" holds at run time too."""
    _runs_without_trio(sqlite_url)


@pytest.mark.postgres
def test_producers_on_postgresql_import_and_run_without_trio(postgres_url: str) -> None:
    _runs_without_trio(postgres_url)


def test_the_lazy_top_level_names_are_the_type_checked_ones() -> None:
    """chronos_trio/__init__.py lists its lazy names twice (for type
    checkers, and for __getattr__): the two lists must agree."""
    import ast

    import chronos_trio

    tree = ast.parse((ROOT / "chronos_trio" / "__init__.py").read_text())
    checked = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert checked == set(chronos_trio._LAZY)
    assert len(chronos_trio.__all__) == len(set(chronos_trio.__all__))


async def test_sync_waiters_resubscribe_after_the_connection_drops(redis_url: str) -> None:
    """CLIENT KILL of the producer's subscription while a thread waits: the
    listener subscribes again and the waiter reads its job again, so the
    result arrives whether its finish was published during the drop or not."""
    app = producer_app(redis_url)
    admin = redis_py.Redis.from_url(redis_url)
    with SyncProducer(app=app) as producer:
        async with app.open_worker(poll_interval=0.5):
            with trio.fail_after(60):
                handle = await in_thread(lambda: producer.enqueue("slow", 1.0))
                got: list[Any] = []
                waiter = threading.Thread(target=lambda: got.append(handle.result(timeout=20)))
                waiter.start()
                while producer.statistics().waiting == 0:
                    await trio.sleep(0.01)
                for client in admin.client_list():
                    if int(client.get("sub", 0)):
                        admin.client_kill_filter(_id=client["id"])
                await in_thread(lambda: waiter.join(25))
        assert got == ["late"]
        assert producer.statistics().subscriptions >= 2
    admin.close()


def test_a_forked_child_starts_its_own_listener(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-forking server (gunicorn --preload) forks after the producer
    waited once: the child has no listener thread, so it starts its own
    (here the fork is simulated by a new pid)."""
    from chronos_trio.store.redis import _blocking

    with SyncProducer(redis_url) as producer:
        handle = producer.enqueue("k", 1)  # no worker: it stays ready
        with pytest.raises(ResultTimeout):
            handle.result(timeout=0.2)
        parent_thread = producer._done._thread
        assert parent_thread is not None and producer.statistics().subscriptions == 1
        real_pid = _blocking.os.getpid()
        monkeypatch.setattr(_blocking.os, "getpid", lambda: real_pid + 1)
        with pytest.raises(ResultTimeout):
            handle.result(timeout=0.5)
        assert producer._done._thread is not parent_thread
        assert producer.statistics().subscriptions == 2


def test_an_asyncio_producer_belongs_to_one_event_loop(redis_url: str) -> None:
    producer = AsyncioProducer(redis_url)

    async def use() -> None:
        await producer.enqueue("k", 1)

    asyncio.run(use())
    with pytest.raises(RuntimeError, match="belongs to the event loop"):
        asyncio.run(use())


async def test_producers_behind_sentinel(redis_sentinel_url: str) -> None:
    app = producer_app(redis_sentinel_url)

    async def asyncio_side() -> Total:
        async with AsyncioProducer(app=app) as producer:
            handle = await producer.enqueue("add", Sum(4, 5))
            result: Total = await handle.result(timeout=20)
            return result

    with SyncProducer(app=app) as producer:
        async with app.open_worker(poll_interval=0.5):
            with trio.fail_after(60):
                got = await in_thread(lambda: producer.enqueue("add", Sum(1, 1)).result(timeout=20))
                assert got == Total(2, by="add")
                assert await in_thread(lambda: asyncio.run(asyncio_side())) == Total(9, by="add")


async def test_headers_and_the_apps_producer_hooks_travel_with_producer_jobs(
    redis_url: str,
) -> None:
    app = producer_app(redis_url)

    @app.task("headers.echo")
    async def echo_headers(args: Any, job: JobContext) -> dict[str, str]:
        return dict(job.headers)

    @app.producer_hook
    def trace(kind: str, headers: dict[str, str]) -> None:
        headers.setdefault("traceparent", f"t-{kind}")

    async def asyncio_side() -> list[Any]:
        async with AsyncioProducer(app=app) as producer:
            one = await producer.enqueue("headers.echo", None, headers={"tenant": "b"})
            [many] = await producer.enqueue_many(echo_headers, [None])
            return [await one.result(timeout=20), await many.result(timeout=20)]

    with SyncProducer(app=app) as producer:
        async with app.open_worker(poll_interval=0.5):
            with trio.fail_after(60):
                got = await in_thread(
                    lambda: producer.enqueue("headers.echo", None, headers={"tenant": "a"}).result(
                        timeout=20
                    )
                )
                assert got == {"tenant": "a", "traceparent": "t-headers.echo"}
                with pytest.raises(ValueError, match="headers"):
                    producer.enqueue("headers.echo", None, headers={"n": 1})  # type: ignore[dict-item]
                assert await in_thread(lambda: asyncio.run(asyncio_side())) == [
                    {"tenant": "b", "traceparent": "t-headers.echo"},
                    {"traceparent": "t-headers.echo"},
                ]
