"""The benchmark's own redis-server (``chronos_trio.testing.redis_server``): a
free loopback port, a temp dir, no persistence. Never a shared instance."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

    def counter(self, key: str) -> int:
        """The integer at ``key`` (0 when missing): what ``INCR`` handlers did."""
        return int(self.client.get(key) or 0)

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    @property
    def port(self) -> int:
        return int(self.client.connection_pool.connection_kwargs["port"])

    def clients(self) -> list[dict[str, Any]]:
        """``CLIENT LIST``, one dict per connection (``addr``, ``sub``, ``cmd``...)."""
        return list(self.client.client_list())

    def connections_received(self) -> int:
        """Connections the server accepted since it started (``INFO stats``)."""
        return int(self.client.info("stats")["total_connections_received"])


def own_ports(server_port: int) -> set[int]:
    """Local ports of this process's established TCP connections to
    ``server_port`` on this machine: the sockets among ``/proc/self/fd``
    matched by inode in ``/proc/net/tcp{,6}`` (Linux only; empty elsewhere).
    With ``CLIENT LIST``'s ``addr`` they tell which of the server's clients
    are this process's."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/self/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                # local_address rem_address st ... inode (hex ports; 01 = ESTABLISHED)
                if len(f) > 9 and f[3] == "01" and f[9] in inodes:
                    if int(f[2].rsplit(":", 1)[1], 16) == server_port:
                        ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


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
