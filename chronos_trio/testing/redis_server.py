"""Throwaway ``redis-server`` processes for tests and benchmarks.

:class:`RedisServer` runs one server on a free loopback port with no
persistence, in a temporary directory; :class:`RedisCluster` builds a
3-master Redis Cluster the same way. Neither ever touches a Redis it did not
start (in particular not the usual 127.0.0.1:6379). Both are context managers
and clean up after themselves, killing their processes at the latest when the
interpreter exits.

If ``redis-server`` (or ``redis-cli``, for a cluster) is not installed they
raise :class:`RedisUnavailable` with a message saying what to install.

:class:`RedisReplicaSet` is a master with replicas (asynchronous
replication, for ``WAIT``); :class:`RedisSentinel` adds sentinels
(``redis-server --sentinel``) that fail the master over to a replica within
a few seconds of its death.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple

import hiredis

__all__ = [
    "FsyncPolicy",
    "RedisCluster",
    "RedisReplicaSet",
    "RedisSentinel",
    "RedisServer",
    "RedisUnavailable",
    "TlsFiles",
    "call",
    "free_port",
]

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
        config_file: str | Path | None = None,
        sentinel: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if aof is not None and aof not in ("always", "everysec", "no"):
            raise ValueError(f"aof must be 'always', 'everysec' or 'no', got {aof!r}")
        self.binary = _binary("redis-server")
        #: A config file read before the command-line options (a sentinel
        #: rewrites its own, so it must be writable and private).
        self.config_file = None if config_file is None else Path(config_file)
        self.sentinel = sentinel
        #: Variables added to the server's environment (e.g. a libfaketime
        #: preload, see ``testing.faketime``); None: it inherits ours as is.
        self.env = None if env is None else dict(env)
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
            *([str(self.config_file)] if self.config_file is not None else []),
            *(["--sentinel"] if self.sentinel else []),
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
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=None if self.env is None else {**os.environ, **self.env},
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
                proc.send_signal(signal.SIGCONT)  # a paused server must see the signal
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

    def pause(self) -> None:
        """SIGSTOP: the server stops answering (a stalled node) until :meth:`resume`."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

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

    ``url`` is a ``redis+cluster://`` URL naming every node. The slots are
    split as ``redis-cli --cluster create`` splits them. A new master reports
    ``cluster_state:ok`` only about 2 s after it started (Redis's writable
    delay): :meth:`start` waits for it; :meth:`launch` starts and joins the
    nodes without waiting, so a cluster can warm up while something else
    runs, and :meth:`wait_ok` then waits for the rest of the delay.
    """

    def __init__(
        self,
        *,
        masters: int = 3,
        start_timeout: float = 30.0,
        node_timeout_ms: int = 5000,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters")
        self.cli = _binary("redis-cli")
        self.masters = masters
        self.start_timeout = start_timeout
        #: ``cluster-node-timeout``: how long a silent node takes to be
        #: suspected (a cluster whose clock jumps, see ``testing.faketime``,
        #: needs a long one).
        self.node_timeout_ms = node_timeout_ms
        #: Every node's extra environment (see :class:`RedisServer`).
        self.env = env
        self.directory = Path(tempfile.mkdtemp(prefix="chronos-cluster-"))
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def start(self) -> RedisCluster:
        """Launch the cluster and wait until every node reports ``cluster_state:ok``."""
        self.launch()
        try:
            self.wait_ok()
        except BaseException:
            self.close()
            raise
        return self

    def launch(self) -> RedisCluster:
        """Start the nodes, give each its slots and config epoch, and make
        them meet (what ``redis-cli --cluster create`` does, without its
        one-second polls); returns before the cluster is ok (see :meth:`wait_ok`)."""
        try:
            cluster_args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
            ]  # fmt: skip
            for i in range(self.masters):
                port = free_port(with_bus=True)
                node_dir = self.directory / f"node{i}"
                node_dir.mkdir()
                node = RedisServer(
                    port=port, directory=node_dir, extra_args=cluster_args, env=self.env
                )
                self.nodes.append(node.start())
            ranges = self._slot_ranges()
            for i, (node, (first, last)) in enumerate(zip(self.nodes, ranges, strict=True)):
                for args in (
                    ("CLUSTER", "ADDSLOTS", *range(first, last + 1)),
                    ("CLUSTER", "SET-CONFIG-EPOCH", i + 1),
                ):
                    if call(node.port, *args) != b"OK":
                        raise RedisUnavailable(f"{args[:2]} refused on port {node.port}")
            for node in self.nodes[1:]:
                if call(node.port, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port) != b"OK":
                    raise RedisUnavailable(f"CLUSTER MEET refused on port {node.port}")
        except BaseException:
            self.close()
            raise
        return self

    def _slot_ranges(self) -> list[tuple[int, int]]:
        """Each master's slots, first and last, as redis-cli splits them."""
        per_node = 16384 / self.masters
        ranges, first, cursor = [], 0, 0.0
        for i in range(self.masters):
            last = round(cursor + per_node - 1)
            if last > 16383 or i == self.masters - 1:
                last = 16383
            ranges.append((first, last))
            first, cursor = last + 1, cursor + per_node
        return ranges

    def wait_ok(self) -> None:
        """Until every node reports ``cluster_state:ok`` (RedisUnavailable
        after ``start_timeout``)."""
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


def call(port: int, *args: str | int, password: str | None = None, timeout: float = 2.0) -> Any:
    """Run one command on the loopback ``port`` (after AUTH when ``password``
    is given) and return its reply, decoded by hiredis (an error reply comes
    back as a ``hiredis.ReplyError`` instance). ``OSError`` when nobody answers."""
    commands: list[tuple[str | int, ...]] = [args]
    if password is not None:
        commands.insert(0, ("AUTH", password))
    data = b"".join(hiredis.pack_command(tuple(str(a) for a in c)) for c in commands)  # type: ignore[arg-type]
    reader = hiredis.Reader()
    replies: list[Any] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionResetError(f"127.0.0.1:{port} closed the connection")
                reader.feed(chunk)
                continue
            replies.append(reply)
    return replies[-1]


def _fields(reply: Any) -> dict[str, str]:
    """A flat [key, value, ...] reply (SENTINEL MASTER) as a dict of strings."""
    items = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
    return dict(zip(items[::2], items[1::2], strict=True))


def _info(port: int, section: str, password: str | None) -> dict[str, str]:
    reply = call(port, "INFO", section, password=password)
    if not isinstance(reply, bytes):
        raise RedisUnavailable(f"INFO on port {port} failed: {reply!r}")
    pairs = (line.partition(":") for line in reply.decode().splitlines() if ":" in line)
    return {k: v for k, _, v in pairs}


class TlsFiles(NamedTuple):
    """A self-signed certificate for 127.0.0.1 that is also its own CA."""

    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: str | Path) -> TlsFiles:
        """Generate one with ``openssl`` in ``directory`` (RedisUnavailable
        when openssl is missing or fails)."""
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RedisUnavailable("openssl not found on PATH: it makes the test certificate")
        cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
        done = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RedisUnavailable(f"openssl failed: {done.stderr[-2000:]!r}")
        return cls(cert, key)

    def server_args(self, tls_port: int) -> list[str]:
        """Options serving TLS on ``tls_port`` and replicating over TLS."""
        return [
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.cert), "--tls-auth-clients", "no",
            "--tls-replication", "yes",
        ]  # fmt: skip


class RedisReplicaSet:
    """A master and ``replicas`` replicas of it, on free loopback ports, with
    asynchronous replication as in production (for ``WAIT`` and failovers).

    ``password`` protects every node (``requirepass``, and ``masterauth`` so
    any node can replicate from any other). With ``tls``, every node also
    serves TLS on a port of its own and replicates over TLS; the plain port
    stays open for the launcher's own checks. ``start()`` returns once every
    replica has synced.
    """

    def __init__(
        self,
        *,
        replicas: int = 1,
        password: str | None = None,
        tls: TlsFiles | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.replica_count = replicas
        self.password = password
        self.tls = tls
        self.start_timeout = start_timeout
        self.directory = Path(tempfile.mkdtemp(prefix="chronos-replicas-"))
        #: Every data node, the first started as the master.
        self.nodes: list[RedisServer] = []
        #: The port clients use for each node (its TLS port with ``tls``), by plain port.
        self.data_ports: dict[int, int] = {}

    @property
    def first_master(self) -> RedisServer:
        return self.nodes[0]

    @property
    def url(self) -> str:
        """A plain URL of the first master (``rediss://`` with TLS)."""
        node = self.first_master
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{node.port}/0"
        return (
            f"rediss://{auth}127.0.0.1:{self.data_ports[node.port]}/0?ssl_ca_certs={self.tls.cert}"
        )

    def node_by_data_port(self, port: int) -> RedisServer:
        for node in self.nodes:
            if self.data_ports[node.port] == port:
                return node
        raise KeyError(f"no node of this set serves port {port}")

    def _node_args(self, data_port: int, replica_of: int | None) -> list[str]:
        args = [
            # Replicas sync at once (7.0 waits 5 s by default for more to join).
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if self.password is not None:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        if self.tls is not None:
            args += self.tls.server_args(data_port)
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        return args

    def start(self) -> RedisReplicaSet:
        try:
            master_data_port = 0
            for i in range(1 + self.replica_count):
                port = free_port()
                data_port = port if self.tls is None else free_port()
                node_dir = self.directory / f"node{i}"
                node_dir.mkdir()
                node = RedisServer(
                    port=port,
                    directory=node_dir,
                    extra_args=self._node_args(data_port, master_data_port if i else None),
                    start_timeout=self.start_timeout,
                )
                self.nodes.append(node.start())
                self.data_ports[port] = data_port
                if i == 0:
                    master_data_port = data_port
            self.wait_synced(self.first_master, self.replica_count)
        except BaseException:
            self.close()
            raise
        return self

    def wait_synced(self, master: RedisServer, replicas: int, timeout: float | None = None) -> None:
        """Until ``master`` has ``replicas`` connected replicas, each with its link up."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                info = _info(master.port, "replication", self.password)
                online = [v for k, v in info.items() if k.startswith("slave") and "online" in v]
                if info.get("role") == "master" and len(online) >= replicas:
                    return
            time.sleep(0.05)
        raise RedisUnavailable(f"the replicas of port {master.port} did not sync in time")

    def flushall(self, master: RedisServer | None = None) -> None:
        """Empty the master (replicas follow) and its script cache."""
        port = (master or self.first_master).port
        for command in (("FLUSHALL",), ("SCRIPT", "FLUSH")):
            call(port, *command, password=self.password)

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisReplicaSet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RedisSentinel:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels
    (``redis-server --sentinel`` with a generated ``sentinel.conf``) watching
    them as ``service``, all on free loopback ports in temporary directories.

    Failover is tuned to take a few seconds: a master that does not answer
    for ``down_after_ms`` is down for a sentinel, ``quorum`` sentinels agree,
    one is elected and promotes a replica; a failover that stalls is retried
    after ``2 * failover_timeout_ms``. ``sentinel_password`` protects the
    sentinels themselves (``requirepass``, and ``sentinel sentinel-pass`` among
    them); ``password`` and ``tls`` apply to the data nodes as in
    :class:`RedisReplicaSet` (with ``tls`` the sentinels serve TLS too).
    ``start()`` returns once every sentinel sees the master, every replica and
    every other sentinel, so a failover can happen at once. Each sentinel's
    config names the others (by address and run ID) and the replicas, as a
    sentinel's own config rewrite would, so that takes a few milliseconds,
    not the 2 s of hello messages it takes to discover them (a master killed
    within a second of the start may take up to a second longer to fail
    over: the sentinels count its downtime from their first link to it).
    """

    def __init__(
        self,
        *,
        service: str = "chronos",
        replicas: int = 1,
        sentinels: int = 3,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        password: str | None = None,
        sentinel_password: str | None = None,
        tls: TlsFiles | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        if sentinels < quorum:
            raise ValueError(f"{sentinels} sentinels cannot reach a quorum of {quorum}")
        self.service = service
        self.sentinel_count = sentinels
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.sentinel_password = sentinel_password
        self.start_timeout = start_timeout
        self.data = RedisReplicaSet(
            replicas=replicas, password=password, tls=tls, start_timeout=start_timeout
        )
        self.sentinels: list[RedisServer] = []
        #: The port clients use for each sentinel (its TLS port with ``tls``).
        self.sentinel_ports: dict[int, int] = {}

    @property
    def tls(self) -> TlsFiles | None:
        return self.data.tls

    @property
    def password(self) -> str | None:
        return self.data.password

    @property
    def nodes(self) -> list[RedisServer]:
        return self.data.nodes

    @property
    def url(self) -> str:
        """``redis+sentinel://`` (``rediss+sentinel://`` with TLS) naming every
        sentinel, the service and db 0, with whatever credentials it needs."""
        auth = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{self.sentinel_ports[s.port]}" for s in self.sentinels)
        query = []
        if self.sentinel_password is not None:
            query.append(f"sentinel_password={self.sentinel_password}")
        if self.tls is not None:
            query.append(f"ssl_ca_certs={self.tls.cert}")
        scheme = "redis+sentinel" if self.tls is None else "rediss+sentinel"
        tail = "?" + "&".join(query) if query else ""
        return f"{scheme}://{auth}{hosts}/{self.service}/0{tail}"

    def _sentinel_conf(
        self, directory: Path, tls_port: int | None, myid: str, others: dict[str, int]
    ) -> Path:
        """``others``: the other sentinels' run IDs and the ports they talk on."""
        master_port = self.data.data_ports[self.data.first_master.port]
        s = self.service
        lines = [
            f"sentinel monitor {s} 127.0.0.1 {master_port} {self.quorum}",
            f"sentinel down-after-milliseconds {s} {self.down_after_ms}",
            f"sentinel failover-timeout {s} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {s} 1",
            f"sentinel myid {myid}",
        ]
        lines += [f"sentinel known-sentinel {s} 127.0.0.1 {p} {i}" for i, p in others.items()]
        lines += [
            f"sentinel known-replica {s} 127.0.0.1 {self.data.data_ports[n.port]}"
            for n in self.nodes
            if n is not self.data.first_master
        ]
        if self.password is not None:
            lines.append(f"sentinel auth-pass {s} {self.password}")
        if self.sentinel_password is not None:
            lines += [
                f"requirepass {self.sentinel_password}",
                f"sentinel sentinel-pass {self.sentinel_password}",
            ]
        if self.tls is not None and tls_port is not None:
            t = self.tls
            lines += [
                f"tls-port {tls_port}", f"tls-cert-file {t.cert}", f"tls-key-file {t.key}",
                f"tls-ca-cert-file {t.cert}", "tls-auth-clients no", "tls-replication yes",
            ]  # fmt: skip
        path = directory / "sentinel.conf"
        path.write_text("\n".join(lines) + "\n")  # the sentinel rewrites it as it learns
        return path

    def start(self) -> RedisSentinel:
        try:
            self.data.start()
            ports = [free_port() for _ in range(self.sentinel_count)]
            tls_ports = [None if self.tls is None else free_port() for _ in ports]
            ids = [secrets.token_hex(20) for _ in ports]
            # the port a sentinel announces, where the others reach it
            talk = {ids[i]: tls_ports[i] or ports[i] for i in range(len(ports))}
            for i, (port, tls_port) in enumerate(zip(ports, tls_ports, strict=True)):
                directory = self.data.directory / f"sentinel{i}"
                directory.mkdir()
                others = {k: v for k, v in talk.items() if k != ids[i]}
                sentinel = RedisServer(
                    port=port,
                    directory=directory,
                    config_file=self._sentinel_conf(directory, tls_port, ids[i], others),
                    sentinel=True,
                    start_timeout=self.start_timeout,
                )
                self.sentinels.append(sentinel.start())
                self.sentinel_ports[port] = tls_port or port
            self.wait_settled()
        except BaseException:
            self.close()
            raise
        return self

    def sentinel_call(self, sentinel: RedisServer, *args: str | int) -> Any:
        return call(sentinel.port, *args, password=self.sentinel_password)

    def _view(self, sentinel: RedisServer) -> dict[str, str] | None:
        with contextlib.suppress(OSError):
            reply = self.sentinel_call(sentinel, "SENTINEL", "MASTER", self.service)
            if isinstance(reply, list):
                return _fields(reply)
        return None

    def wait_settled(self, timeout: float | None = None) -> RedisServer:
        """Until every running sentinel agrees on one master that is up and
        sees every running replica of it and every other running sentinel;
        returns that master."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        alive = [s for s in self.sentinels if s.running]
        while time.monotonic() < deadline:
            views = [self._view(s) for s in alive]
            ports = {v.get("port") for v in views if v is not None}
            if None not in views and len(ports) == 1:
                master = self.data.node_by_data_port(int(ports.pop() or 0))
                replicas = sum(1 for n in self.nodes if n.running and n is not master)
                if master.running and all(
                    v is not None
                    and v.get("flags") == "master"
                    and int(v["num-other-sentinels"]) >= len(alive) - 1
                    and self._replicas_up(v, replicas)
                    for v in views
                ):
                    return master
            time.sleep(0.05)
        raise RedisUnavailable("the sentinels did not agree on a master in time")

    def _replicas_up(self, view: dict[str, str], replicas: int) -> bool:
        if replicas == 0:
            return True
        sentinel = next(s for s in self.sentinels if s.running)
        reply = self.sentinel_call(sentinel, "SENTINEL", "REPLICAS", self.service)
        ups = [f for r in reply if (f := _fields(r)).get("flags") == "slave"]
        return len(ups) >= replicas and int(view.get("num-slaves", 0)) >= replicas

    def master(self) -> RedisServer:
        """The node the first answering sentinel names as the master."""
        for sentinel in self.sentinels:
            with contextlib.suppress(OSError):
                reply = self.sentinel_call(
                    sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                )
                if isinstance(reply, list) and reply:
                    return self.data.node_by_data_port(int(reply[1]))
        raise RedisUnavailable("no sentinel answered")

    def kill_master(self) -> RedisServer:
        """SIGKILL the current master (a crash: nothing it did not replicate
        survives); returns it (stopped)."""
        master = self.master()
        master.kill()
        return master

    def wait_for_failover(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Until every running sentinel names a master other than ``old`` and
        that node says it is a master; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            named: set[str] = set()
            for sentinel in (s for s in self.sentinels if s.running):
                with contextlib.suppress(OSError):
                    reply = self.sentinel_call(
                        sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                    )
                    named.add(reply[1].decode() if isinstance(reply, list) else "?")
            if len(named) == 1 and (port := named.pop()).isdigit():
                new = self.data.node_by_data_port(int(port))
                if new is not old and new.running:
                    with contextlib.suppress(OSError):
                        role = call(new.port, "ROLE", password=self.password)
                        if isinstance(role, list) and role[0] == b"master":
                            return new
            time.sleep(0.02)
        raise RedisUnavailable(f"no failover away from port {old.port} in {timeout:g}s")

    def flushall(self) -> None:
        """Empty the current master (its replicas follow) and its script cache."""
        self.data.flushall(self.master())

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        self.sentinels = []
        self.data.close()

    def __enter__(self) -> RedisSentinel:
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
