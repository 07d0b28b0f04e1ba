"""The benchmark's own redis-server (``chronos_trio.testing.redis_server``): a
free loopback port, a temp dir, no persistence. Never a shared instance."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis


class BenchRedis:
    """A running redis-server and a sync admin client."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)

    def flush(self) -> None:
        self.client.flushdb()
        self.client.script_flush()
        self.client.config_resetstat()

    def commandstats(self) -> dict[str, int]:
        """Calls per command since the last reset (``INFO commandstats``)."""
        info = self.client.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}

    def reset_stats(self) -> None:
        self.client.config_resetstat()

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])


@contextlib.contextmanager
def open_redis() -> Iterator[BenchRedis]:
    """Start a private redis-server for the benchmark; stop it on exit."""
    from chronos_trio.testing.redis_server import RedisServer

    with RedisServer() as server:
        bench = BenchRedis(server.url)
        try:
            yield bench
        finally:
            bench.client.close()
