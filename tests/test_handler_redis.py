"""Redis for handlers (``job.redis``): the worker's own connections, on a
single node (Trio sockets, no thread hop) and on the Cluster; error replies
raise redis-py's errors; the memory store refuses with a clear error."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import redis
import redis.exceptions
import trio

from chronos_trio import App, JobContext, MemoryStore, StoreError
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis._adapter import RedisAdapter

pytestmark = pytest.mark.redis
_ns = itertools.count()


def counting_app(store: Any) -> App:
    app = App(store)

    @app.task("hits.count")
    async def count(key: str, job: JobContext) -> int:
        n = await job.redis.execute("INCR", key)
        await job.redis.pipeline([("SADD", f"{key}:jobs", job.id), ("EXPIRE", f"{key}:jobs", 60)])
        return int(n)

    return app


@pytest.mark.parametrize("where", ["single", "cluster"])
async def test_handlers_run_their_commands_on_the_store_connections(
    where: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = request.getfixturevalue("redis_url" if where == "single" else "redis_cluster_url")
    store = RedisStore.from_url(url, namespace=f"hr-{next(_ns)}")
    app = counting_app(store)
    hops = 0
    real = RedisAdapter._run_on_node

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return real(*args, **kwargs)

    try:
        key = f"{{hits-{next(_ns)}}}"
        async with app.open_worker(poll_interval=0.2, lease_duration=5.0, concurrency=16):
            with trio.fail_after(30):
                handles = [await app.enqueue("hits.count", key) for _ in range(20)]
                if where == "single":  # the threaded path of a single node
                    monkeypatch.setattr(RedisAdapter, "_run_on_node", counted)
                got = sorted([await h.result(timeout=20) for h in handles])
        assert got == list(range(1, 21))  # every INCR ran once
        if where == "cluster":
            host, port = url.split("://")[1].split(",")[0].split(":")
            client: Any = redis.RedisCluster(host=host, port=int(port))
        else:
            client = redis.Redis.from_url(url)
        try:
            assert int(client.get(key)) == 20
            assert client.scard(f"{key}:jobs") == 20
        finally:
            client.close()
        if where == "single":
            assert hops == 0, "a handler's command took a thread hop"
    finally:
        await store.aclose()


async def test_error_replies_raise_redis_errors(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, namespace=f"hr-{next(_ns)}")
    try:
        commands = store.commands()
        with trio.fail_after(10):
            await commands.execute("SET", "hr:str", "x")
            with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
                await commands.execute("LPUSH", "hr:str", "y")
            replies = await commands.pipeline(
                [("INCR", "hr:n"), ("LPUSH", "hr:str", "y"), ("GET", "hr:str")],
                raise_on_error=False,
            )
            assert replies[0] == 1 and replies[2] == b"x"
            assert isinstance(replies[1], redis.exceptions.ResponseError)
            assert await commands.execute("PING") is True
            with pytest.raises(ValueError, match="an empty command"):
                await commands.pipeline([()])
    finally:
        await store.aclose()


async def test_an_unreachable_redis_is_a_store_error() -> None:
    store = RedisStore.from_url("redis://127.0.0.1:1/0", connect_timeout=0.5, socket_timeout=0.5)
    try:
        with trio.fail_after(10), pytest.raises(StoreError):
            await store.commands().execute("GET", "k")
    finally:
        await store.aclose()


async def test_the_memory_store_has_no_job_redis() -> None:
    app = App(MemoryStore())
    seen: list[str] = []

    @app.task("hits.none")
    async def none(args: Any, job: JobContext) -> None:
        try:
            job.redis  # noqa: B018
        except TypeError as exc:
            seen.append(str(exc))

    async with app.open_worker(poll_interval=0.2):
        with trio.fail_after(10):
            await (await none.enqueue(None)).result(timeout=5)
    assert seen == ["job.redis needs a Redis store; this app's store is a MemoryStore"]


async def test_concurrent_commands_share_round_trips(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, namespace=f"hr-{next(_ns)}")
    try:
        commands = store.commands()
        await commands.execute("DEL", "hr:shared")
        before = store._adapter.stats.round_trips
        got: list[int] = []

        async def incr() -> None:
            got.append(int(await commands.execute("INCR", "hr:shared")))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(64):
                    nursery.start_soon(incr)
        assert sorted(got) == list(range(1, 65))  # each ran once
        trips = store._adapter.stats.round_trips - before
        assert trips <= 8, f"64 concurrent commands took {trips} round trips"
        # an error reply is raised in its own call only
        await commands.execute("SET", "hr:s", "x")
        results: list[object] = []

        async def call(*c: str) -> None:
            try:
                results.append(await commands.execute(*c))
            except redis.exceptions.ResponseError as exc:
                results.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "GET", "hr:s")
            nursery.start_soon(call, "LPUSH", "hr:s", "y")
            nursery.start_soon(call, "GET", "hr:s")
        assert results.count(b"x") == 2
        assert sum(isinstance(r, redis.exceptions.ResponseError) for r in results) == 1
    finally:
        await store.aclose()
