"""Throwaway PostgreSQL clusters for tests and benchmarks.

:class:`PostgresServer` runs one private cluster (``initdb`` + ``pg_ctl``)
in a temporary directory, on a free loopback port with its socket in that
directory, trust authentication and ``fsync`` off unless asked for (commits
still reach the OS before their reply, so a kill -9 of the server loses
nothing acknowledged; only a machine crash could). It never
touches a server it did not start (in particular not the shared one on
5432). The binaries are taken from ``pg_config --bindir`` (or
``$CHRONOS_PG_BINDIR``, or the newest ``/usr/lib/postgresql/*/bin``).

``initdb`` refuses to run as root: as root, the cluster is made and run as
the ``postgres`` OS user (``runuser -u postgres --``), which must exist (the
Debian package creates it). The server is killed at the latest when the
interpreter exits.

Without the binaries it raises :class:`PostgresUnavailable` saying what to
install.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from .redis_server import free_port

__all__ = ["PostgresServer", "PostgresUnavailable", "postgres_bindir"]

_FORBIDDEN_PORTS = {5432}
_LIVE: set[PostgresServer] = set()


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing or the cluster would not start."""


def postgres_bindir() -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are.

    Raises :class:`PostgresUnavailable` when none is found."""
    candidates: list[str] = []
    if env := os.environ.get("CHRONOS_PG_BINDIR"):
        candidates.append(env)
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(out.stdout.strip())
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for candidate in candidates:
        path = Path(candidate)
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL "
        "(e.g. `apt-get install postgresql`) to run the PostgreSQL tests and benchmarks"
    )


def _as_owner() -> list[str]:
    """The command prefix that runs a binary as the cluster's owner."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root without runuser: cannot start initdb")
    return [runuser, "-u", "postgres", "--"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children_of(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(Path(stat).parent.name))
    return found


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.kill()


class PostgresServer:
    """One private PostgreSQL cluster on a free loopback port.

    ``with PostgresServer() as pg: pg.url`` gives a ``postgresql://`` URL of
    its database ``chronos`` (made at start). :meth:`kill` (SIGKILL of the
    postmaster) and :meth:`restart` keep the data directory, for fault tests.
    ``settings`` are extra ``postgresql.conf`` lines (name -> value);
    ``env`` extra environment variables of the server process (not of
    ``initdb``), e.g. libfaketime's (``FrozenClock.server_env``).
    """

    def __init__(
        self,
        *,
        fsync: bool = False,
        settings: Mapping[str, str] | None = None,
        database: str = "chronos",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.bindir = postgres_bindir()
        self.port = 0
        self.database = database
        self._fsync = fsync
        self._settings = dict(settings or {})
        self._env = dict(env or {})
        self._tmp: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- paths -----------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        assert self._tmp is not None, "the server is not started"
        return Path(self._tmp)

    @property
    def datadir(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "socket"

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DB`` (TCP over loopback)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- lifecycle -------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> PostgresServer:
        """Make the cluster and start it; returns self.

        Raises :class:`PostgresUnavailable` if it does not come up."""
        self._tmp = tempfile.mkdtemp(prefix="chronos-pg-")
        os.chmod(self._tmp, 0o777)
        self.socket_dir.mkdir()
        os.chmod(self.socket_dir, 0o777)
        if os.geteuid() == 0:
            shutil.chown(self._tmp, "postgres")
            shutil.chown(self.socket_dir, "postgres")
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            timeout=120,
        )
        self.port = self._free_port()
        self._write_conf()
        self._start(timeout)
        self._psql("postgres", f'CREATE DATABASE "{self.database}"')
        _LIVE.add(self)
        return self

    def _free_port(self) -> int:
        for _ in range(100):
            port = free_port()
            if port not in _FORBIDDEN_PORTS:
                return port
        raise PostgresUnavailable("could not find a free loopback port")

    def _write_conf(self) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "fsync": "on" if self._fsync else "off",
            # on even without fsync: a commit's WAL reaches the OS before the
            # reply, so a kill -9 of the server loses nothing acknowledged
            "synchronous_commit": "on",
            "full_page_writes": "on" if self._fsync else "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
            "log_min_messages": "warning",
            "logging_collector": "off",
        }
        settings.update(self._settings)
        with open(self.datadir / "postgresql.conf", "a") as conf:
            conf.write("\n# chronos_trio test settings\n")
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")

    def _start(self, timeout: float) -> None:
        log = self.directory / "server.log"
        with open(log, "ab") as stderr:
            self._proc = subprocess.Popen(
                [*_as_owner(), str(self.bindir / "postgres"), "-D", str(self.datadir)],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                env={**os.environ, **self._env} if self._env else None,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PostgresUnavailable(
                    f"postgres exited with {self._proc.returncode}: {self.log_tail()}"
                )
            if self._ready():
                return
            time.sleep(0.05)
        self.kill()
        raise PostgresUnavailable(f"postgres did not accept connections: {self.log_tail()}")

    def _ready(self) -> bool:
        pg_isready = self.bindir / "pg_isready"
        if not pg_isready.is_file():
            return (self.socket_dir / f".s.PGSQL.{self.port}").exists()
        done = subprocess.run(
            [str(pg_isready), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"],
            capture_output=True,
            timeout=10,
        )
        return done.returncode == 0

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.directory / "server.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _run(self, argv: Sequence[str], *, timeout: float) -> None:
        done = subprocess.run([*_as_owner(), *argv], capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"{Path(argv[0]).name} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-2000:]}"
            )

    def _psql(self, database: str, sql: str) -> None:
        self._run(
            [
                str(self.bindir / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                str(self.socket_dir),
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ],
            timeout=60,
        )

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        self._psql("postgres", f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (data kept; :meth:`restart`)."""
        proc = self._proc
        if proc is None:
            return
        postmaster = self._postmaster_pid()
        victims = [proc.pid]
        if postmaster is not None:
            # Stopped first, the postmaster forks no backend between the
            # listing of its children and the kill (backends call setsid, so
            # the process group below does not reach them; one left alive
            # keeps the shared memory block and a restart refuses to start).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(postmaster, signal.SIGSTOP)
            victims += [postmaster, *_children_of(postmaster)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in victims) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._proc = None

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.datadir / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first)
        except (OSError, ValueError):
            return None

    def restart(self, timeout: float = 30.0) -> None:
        """Start it again on the same port and data directory (after :meth:`kill`)."""
        if self._proc is not None:
            self.kill()
        for stale in (self.datadir / "postmaster.pid", *self.socket_dir.glob(".s.PGSQL.*")):
            with contextlib.suppress(OSError):
                stale.unlink()
        self._start(timeout)

    def close(self) -> None:
        """Kill the server and delete its directory."""
        self.kill()
        _LIVE.discard(self)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> PostgresServer:
        return self.start() if self._tmp is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
