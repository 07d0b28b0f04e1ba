"""Throwaway ``redis-server`` processes for tests and benchmarks.

:class:`RedisServer` runs one server on a free loopback port with no
persistence, in a temporary directory; :class:`RedisCluster` builds a
3-master Redis Cluster the same way. Neither ever touches a Redis it did not
start (in particular not the usual 127.0.0.1:6379). Both are context managers
and clean up after themselves, killing their processes at the latest when the
interpreter exits.

If ``redis-server`` (or ``redis-cli``, for a cluster) is not installed they
raise :class:`RedisUnavailable` with a message saying what to install.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Literal

__all__ = ["FsyncPolicy", "RedisCluster", "RedisServer", "RedisUnavailable", "free_port"]

_FORBIDDEN_PORTS = {6379}

#: ``appendfsync`` policies: ``always`` fsyncs (and writes) the AOF before
#: any reply goes out; ``everysec`` may postpone even the write(2) by up to
#: 2 s while a background fsync is slow, so a kill -9 can then lose writes
#: that were already acknowledged; ``no`` leaves flushing to the kernel.
FsyncPolicy = Literal["always", "everysec", "no"]
_LIVE: set[subprocess.Popen[bytes]] = set()


class RedisUnavailable(RuntimeError):
    """``redis-server``/``redis-cli`` is missing or would not start."""


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RedisUnavailable(
            f"{name} not found on PATH: install Redis (e.g. `apt-get install redis-server`) "
            "to run the Redis tests and benchmarks"
        )
    return path


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A free loopback port (never 6379); ``with_bus``: port + 10000 free as well,
    for a Cluster node's bus."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port in _FORBIDDEN_PORTS:
            continue
        if with_bus and (port + 10000 > 65535 or not _port_is_free(port + 10000)):
            continue
        return port
    raise RedisUnavailable("could not find a free loopback port")


def _ping(port: int, timeout: float = 0.2) -> bytes | None:
    """Send one inline command; the raw reply, or None if nobody answered."""
    return _command(port, b"PING", timeout)


def _command(port: int, command: bytes, timeout: float = 0.5) -> bytes | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(command + b"\r\n")
            return s.recv(65536)
    except OSError:
        return None


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(OSError):
            proc.kill()


class RedisServer:
    """One ``redis-server`` on a free loopback port, without persistence
    unless ``aof`` is given.

    ``start()`` returns once it answers PING (after loading its data).
    ``stop()`` shuts it down (SIGTERM), ``kill()`` SIGKILLs it (simulating a
    crash), ``restart()`` starts it again on the same port. Without ``aof``
    a restarted server is empty; with ``aof`` (an ``appendfsync`` policy,
    see :data:`FsyncPolicy`) it writes an append-only file in ``directory``
    and a restart on the same directory loads it back: with ``"always"``
    every write it acknowledged survives a ``kill()``.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        extra_args: list[str] | None = None,
        directory: str | Path | None = None,
        start_timeout: float = 10.0,
        aof: FsyncPolicy | None = None,
    ) -> None:
        if aof is not None and aof not in ("always", "everysec", "no"):
            raise ValueError(f"aof must be 'always', 'everysec' or 'no', got {aof!r}")
        self.binary = _binary("redis-server")
        if port in _FORBIDDEN_PORTS:
            raise ValueError("refusing to use port 6379: it may be someone else's Redis")
        self.port = port if port is not None else free_port()
        self.extra_args = list(extra_args or [])
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="chronos-redis-"))
        self.start_timeout = start_timeout
        self.aof = aof
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    def start(self) -> RedisServer:
        if self.running:
            return self
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            *self._persistence_args(),
            "--daemonize", "no",
            "--dir", str(self.directory),
            "--logfile", "redis.log",
            *self.extra_args,
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _LIVE.add(self._proc)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RedisUnavailable(
                    f"redis-server exited with {self._proc.returncode} on port {self.port}; "
                    f"see {self.directory / 'redis.log'}"
                )
            reply = _ping(self.port)
            # any reply but LOADING means it serves (-NOAUTH with a password set)
            if reply and not reply.startswith(b"-LOADING"):
                return self
            time.sleep(0.02)
        self.kill()
        raise RedisUnavailable(f"redis-server on port {self.port} did not answer PING in time")

    def _persistence_args(self) -> list[str]:
        if self.aof is None:
            return ["--appendonly", "no"]
        # aof-load-truncated: a kill -9 mid-write leaves a torn last command,
        # which was never acknowledged; load the rest instead of refusing.
        return ["--appendonly", "yes", "--appendfsync", self.aof, "--aof-load-truncated", "yes"]

    def _reap(self, sig: int, wait: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _LIVE.discard(proc)
        self._proc = None

    def stop(self) -> None:
        """Shut down gracefully (SIGTERM; SIGKILL after 5 s)."""
        self._reap(signal.SIGTERM, 5.0)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash."""
        self._reap(signal.SIGKILL, 5.0)

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RedisCluster:
    """A Redis Cluster of ``masters`` nodes (no replicas) on free loopback ports.

    ``url`` is a ``redis+cluster://`` URL naming every node.
    """

    def __init__(self, *, masters: int = 3, start_timeout: float = 30.0) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters")
        self.cli = _binary("redis-cli")
        self.masters = masters
        self.start_timeout = start_timeout
        self.directory = Path(tempfile.mkdtemp(prefix="chronos-cluster-"))
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def start(self) -> RedisCluster:
        try:
            cluster_args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000",
            ]  # fmt: skip
            for i in range(self.masters):
                port = free_port(with_bus=True)
                node_dir = self.directory / f"node{i}"
                node_dir.mkdir()
                node = RedisServer(port=port, directory=node_dir, extra_args=cluster_args)
                self.nodes.append(node.start())
            create = [
                self.cli, "--cluster", "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas", "0", "--cluster-yes",
            ]  # fmt: skip
            done = subprocess.run(
                create, capture_output=True, timeout=self.start_timeout, check=False
            )
            if done.returncode != 0:
                raise RedisUnavailable(
                    f"redis-cli --cluster create failed: {done.stdout[-2000:]!r}"
                    f" {done.stderr[-2000:]!r}"
                )
            self._wait_ok()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            infos = [_command(n.port, b"CLUSTER INFO") or b"" for n in self.nodes]
            if all(b"cluster_state:ok" in info for info in infos):
                return
            time.sleep(0.05)
        raise RedisUnavailable("the Redis Cluster did not reach cluster_state:ok in time")

    def flushall(self) -> None:
        """Empty every node (keeps the cluster's slot map)."""
        for n in self.nodes:
            _command(n.port, b"FLUSHALL")

    def close(self) -> None:
        for n in self.nodes:
            n.close()
        self.nodes = []
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def in_ci() -> bool:
    """True when the environment says this is a CI run (CI=true)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
