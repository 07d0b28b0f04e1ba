"""The benchmark's own redis-server: a free loopback port in a temp dir.

Uses ``chronos_trio.testing.redis_server.RedisServer`` when the package has it,
otherwise starts ``redis-server`` itself the same way (no persistence, bound to
127.0.0.1). Never touches a shared instance.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchRedis:
    """A running redis-server and a sync admin client."""

    def __init__(self, url: str, process: Any | None = None) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)
        self._process = process

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
    try:
        from chronos_trio.testing.redis_server import RedisServer  # type: ignore[import-not-found]
    except ImportError:
        RedisServer = None
    if RedisServer is not None:
        with _project_server(RedisServer) as url:
            yield BenchRedis(url)
        return
    with _own_server() as url:
        yield BenchRedis(url)


@contextlib.contextmanager
def _project_server(server_cls: Any) -> Iterator[str]:
    server = server_cls()
    if hasattr(server, "__enter__"):
        with server as running:
            yield str(getattr(running, "url", None) or server.url)
        return
    server.start()
    try:
        yield str(server.url)
    finally:
        server.stop()


@contextlib.contextmanager
def _own_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found (apt-get install redis-server)")
    with tempfile.TemporaryDirectory(prefix="chronos-bench-redis-") as tmp:
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("redis-server did not start") from None
                    time.sleep(0.05)
            client.close()
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
