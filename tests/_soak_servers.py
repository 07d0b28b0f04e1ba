"""The servers a fault soak runs against, behind one small interface: start
(and start again on the same port and data after a kill -9), kill -9, the
store URL for a port (the server's own or the proxy's), and a kill of some
of the server's client connections.

* :class:`SoakRedis`: a redis-server with ``appendfsync always`` (see
  ``tests/_soak.py`` for why); clients killed with ``CLIENT KILL``.
* :class:`SoakPostgres`: a private PostgreSQL cluster (synchronous commit:
  nothing acknowledged is lost to a kill -9 of the server); clients killed
  with ``pg_terminate_backend``.
* :class:`SoakSqlite`: no server, one SQLite file every process opens
  (``networked`` False: no proxy, and no server or connection faults; the
  soak's faults are then kill -9 of the worker processes).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Protocol

import psycopg
import redis

from chronos_trio.testing.postgres_server import PostgresServer
from chronos_trio.testing.redis_server import RedisServer

#: The soak's PostgreSQL database and the store's schema in it.
PG_DATABASE = "chronos"
PG_SCHEMA = "soak"


class SoakServer(Protocol):
    #: "redis" or "postgres": names the faults (``kill -9 <name>``).
    name: str
    #: The fault that kills some of the server's client connections.
    client_kill_name: str
    #: A server reached over TCP (through the soak's proxy for some workers),
    #: which the server and connection faults can hit; False: a local file.
    networked: bool

    @property
    def port(self) -> int: ...

    @property
    def running(self) -> bool: ...

    def url(self, port: int) -> str: ...

    def start(self) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...

    def kill_clients(self, rng: random.Random) -> int:
        """Cut some of the server's client connections (never the asker's);
        how many. Raises OSError or :attr:`errors` when the server is down."""
        ...

    errors: tuple[type[Exception], ...]


class SoakRedis:
    name = "redis"
    client_kill_name = "CLIENT KILL"
    networked = True
    errors: tuple[type[Exception], ...] = (redis.RedisError,)

    def __init__(self, directory: Path, partitions: int) -> None:
        (directory / "redis").mkdir(exist_ok=True)
        self.server = RedisServer(aof="always", directory=directory / "redis")
        self._partitions = partitions

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def running(self) -> bool:
        return self.server.running

    def url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}/0?partitions={self._partitions}"

    def start(self) -> None:
        self.server.start()

    def kill(self) -> None:
        self.server.kill()

    def close(self) -> None:
        self.server.close()

    def kill_clients(self, rng: random.Random) -> int:
        admin = redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)
        try:
            me = admin.client_id()
            others = sorted(int(c["id"]) for c in admin.client_list() if int(c["id"]) != me)
            if not others:
                return 0
            victims = rng.sample(others, rng.randint(1, len(others)))
            return sum(int(admin.client_kill_filter(_id=str(v))) for v in victims)
        finally:
            admin.close()


class SoakPostgres:
    """A private cluster, made at the first :meth:`start`; every later
    start is a restart on the same port and data directory."""

    name = "postgres"
    client_kill_name = "pg_terminate_backend"
    networked = True
    errors: tuple[type[Exception], ...] = (psycopg.Error,)

    def __init__(self, directory: Path) -> None:
        self.server = PostgresServer(database=PG_DATABASE)
        self._made = False
        self._up = False
        self.directory = directory

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def running(self) -> bool:
        return self._up

    def url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{PG_DATABASE}?schema={PG_SCHEMA}"

    def start(self) -> None:
        if self._made:
            self.server.restart()
        else:
            self.server.start()
            self._made = True
        self._up = True

    def kill(self) -> None:
        self._up = False
        self.server.kill()

    def close(self) -> None:
        self._up = False
        if self._made:  # keep the server's log with the soak's records
            log = self.server.directory / "server.log"
            if log.exists():
                (self.directory / "postgres.log").write_bytes(log.read_bytes())
        self.server.close()

    def kill_clients(self, rng: random.Random) -> int:
        with psycopg.connect(
            self.server.url_for(PG_DATABASE), autocommit=True, connect_timeout=2
        ) as admin:
            others = sorted(
                int(row[0])
                for row in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).fetchall()
            )
            if not others:
                return 0
            victims = rng.sample(others, rng.randint(1, len(others)))
            killed = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                " FROM unnest(%s::int[]) AS pid",
                (victims,),
            ).fetchone()
            return int(killed[0]) if killed else 0


class SoakSqlite:
    """One SQLite file in the soak's directory (``soak.db``, with its -wal
    and -shm files beside it, left there for a post-mortem). There is no
    server to start, kill or cut off: ``port`` is 0 and ignored."""

    name = "sqlite"
    client_kill_name = "none"
    networked = False
    errors: tuple[type[Exception], ...] = ()

    def __init__(self, directory: Path) -> None:
        self.path = directory / "soak.db"

    @property
    def port(self) -> int:
        return 0

    @property
    def running(self) -> bool:
        return True

    def url(self, port: int) -> str:
        return f"sqlite:///{self.path}"

    def start(self) -> None:
        pass

    def kill(self) -> None:
        raise NotImplementedError("a SQLite file has no server to kill")

    def close(self) -> None:
        pass

    def kill_clients(self, rng: random.Random) -> int:
        raise NotImplementedError("a SQLite file has no client connections to kill")
