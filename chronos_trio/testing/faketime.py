"""A frozen store clock that a test moves by hand, shared by a MemoryStore
and ``redis-server`` processes run under libfaketime.

Redis scripts read the server's ``TIME``, so a test that jumps the clock of
a RedisStore in step with a MemoryStore must control the server's clock.
:class:`FrozenClock` keeps one time, in whole microseconds, and writes it
to a file that libfaketime (Debian package ``libfaketime``) reads on every
clock call of the servers started with :meth:`FrozenClock.server_env`
(``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``, ``FAKETIME_FMT=%s``:
an absolute epoch time). Their wall clock then stands still between two
:meth:`FrozenClock.advance` calls, so both stores read exactly the same
``now`` (a MemoryStore takes :meth:`FrozenClock.now` as its ``clock``) and
no due time or lease expiry can drift across a comparison instant.
Monotonic clocks are left real (``FAKETIME_DONT_FAKE_MONOTONIC=1``): the
server's event loop and script time limits keep working.

Two consequences of a frozen wall clock, both handled here or by callers:

* Debian's ``redis-server`` links the system jemalloc, whose start-up
  calls ``clock_gettime`` while libfaketime initialises (libfaketime then
  aborts the call); glibc is preloaded after libfaketime, so the server
  allocates with glibc's malloc and the clash never happens.
* Redis measures some delays on the wall clock: a new Cluster turns ok only
  2 s after its first check (:func:`start_cluster` moves the clock on
  until it does), a node silent for ``cluster-node-timeout`` is suspected
  (give a long one, as :func:`start_cluster` does, so jumps never trip it),
  and blocking commands' timeouts never expire while it stands still (do
  not wait on such a store).

Times are kept to a 1/64 s grid plus whole microseconds the caller chooses:
the server reads seconds and microseconds (``TIME``) and a script computes
``sec + usec / 1e6``, which :meth:`FrozenClock.now` computes the same way,
so both stores hold bit-identical floats.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from pathlib import Path

from .redis_server import RedisCluster, RedisUnavailable, call

__all__ = ["FakeTimeUnavailable", "FrozenClock", "find_libfaketime", "start_cluster"]

#: Where distributions install libfaketime (Debian: /usr/lib/<arch>/faketime).
_SEARCH = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class FakeTimeUnavailable(RedisUnavailable):
    """libfaketime is not installed (or would not start a server)."""


def find_libfaketime() -> str:
    """The path of ``libfaketime.so.1`` (``CHRONOS_LIBFAKETIME`` names it
    explicitly). Raises :class:`FakeTimeUnavailable` saying what to install."""
    given = os.environ.get("CHRONOS_LIBFAKETIME")
    if given:
        if not Path(given).is_file():
            raise FakeTimeUnavailable(f"CHRONOS_LIBFAKETIME={given} is not a file")
        return given
    for pattern in _SEARCH:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise FakeTimeUnavailable(
        "libfaketime.so.1 not found: install it (e.g. `apt-get install libfaketime`) "
        "to run the differential tests against Redis"
    )


class FrozenClock:
    """A store clock that stands still until :meth:`advance` moves it.

    ``start`` (epoch seconds, default: now rounded down to a whole second)
    is where it begins. ``path`` is the file libfaketime reads (a fresh
    temporary file by default); it is written at once, so servers started
    with :meth:`server_env` begin at ``start``.
    """

    def __init__(self, start: float | None = None, path: str | Path | None = None) -> None:
        if path is None:
            fd, name = tempfile.mkstemp(prefix="chronos-faketime-")
            os.close(fd)
            path = name
        self.path = Path(path)
        self._us = int(time.time() if start is None else start) * 1_000_000
        self._write()

    def now(self) -> float:
        """The time, as a Redis script computes it from ``TIME``."""
        seconds, micros = divmod(self._us, 1_000_000)
        return float(seconds) + micros / 1_000_000

    @property
    def micros(self) -> int:
        """The time in whole microseconds since the epoch."""
        return self._us

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` (>= 0, rounded to whole microseconds)
        on; servers see it from their next clock call. A clock never goes
        back: ValueError for a negative step."""
        step = round(seconds * 1_000_000)
        if step < 0:
            raise ValueError(f"a frozen clock only moves forward, got {seconds!r}")
        self._us += step
        self._write()

    def _write(self) -> None:
        seconds, micros = divmod(self._us, 1_000_000)
        # written whole, then renamed: a server never reads half a line
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{seconds}.{micros:06d}\n")
        tmp.replace(self.path)

    def server_env(self) -> dict[str, str]:
        """The environment that makes a server read this clock. Raises
        :class:`FakeTimeUnavailable` when libfaketime is not installed."""
        return {
            # glibc after libfaketime: see the module docstring (jemalloc)
            "LD_PRELOAD": f"{find_libfaketime()}:libc.so.6",
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_FMT": "%s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "TZ": "UTC",
        }

    def close(self) -> None:
        """Remove the file (servers reading it must be stopped first)."""
        self.path.unlink(missing_ok=True)


def server_time(port: int) -> float:
    """A server's ``TIME``, as a script computes it."""
    seconds, micros = call(port, "TIME")
    return float(int(seconds)) + int(micros) / 1_000_000


def start_cluster(clock: FrozenClock, *, masters: int = 3, timeout: float = 30.0) -> RedisCluster:
    """A Redis Cluster whose nodes read ``clock``, ready to use.

    Its ``cluster-node-timeout`` is 30 days, so clock jumps never make a
    node suspect another. A new cluster turns ok 2 s (wall clock) after its
    first check, so the clock is moved on a second at a time until every
    node reports ok. Raises :class:`FakeTimeUnavailable` or
    ``RedisUnavailable`` when it cannot start.
    """
    cluster = RedisCluster(
        masters=masters, node_timeout_ms=30 * 86_400_000, env=clock.server_env()
    ).launch()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            infos = [call(node.port, "CLUSTER", "INFO") for node in cluster.nodes]
            if all(b"cluster_state:ok" in bytes(info) for info in infos):
                return cluster
            clock.advance(1.0)
            time.sleep(0.1)
        raise RedisUnavailable("the frozen-clock Redis Cluster did not reach cluster_state:ok")
    except BaseException:
        cluster.close()
        raise
