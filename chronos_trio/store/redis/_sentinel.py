"""Which node is the master of a Redis Sentinel service, as the sentinels say.

redis-py asks the sentinels only when it opens a connection, so a client
keeps writing to a master that lost its role for as long as its connections
live: after a manual failover (``SENTINEL FAILOVER``) or a partition, the old
master accepts writes until the sentinels convert it into a replica (about
10 s here), and everything written to it meanwhile is lost when it resyncs.
A :class:`MasterWatch` bounds that window: the adapter asks it before a round
trip, and once every ``recheck`` seconds it asks the sentinels again; when
the answer changed, the connections to the old master are closed (those of
the native path and the idle ones of redis-py's pool), so the next round
trip goes to the new one.

Guarantees:

* a lookup is redis-py's ``discover_master`` (the first sentinel that knows
  a master in good standing: not subjectively or objectively down), run in
  a worker thread, one at a time;
* a failed periodic recheck (no sentinel answers) keeps the known address:
  the sentinels being away is no reason to stop using a master that works;
  a lookup with no known address raises redis-py's ``MasterNotFoundError``
  (a ``ConnectionError``, so callers see a StoreError);
* :meth:`forget` (a connection died, a READONLY reply, a node that is not a
  master) makes the next connection ask the sentinels first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
import redis.sentinel

if TYPE_CHECKING:
    import trio

#: Seconds between two periodic lookups (at most one round trip to a sentinel
#: per second per store, off the Redis round trip itself).
RECHECK = 1.0

Address = tuple[str, int]


class SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """redis-py's Sentinel connection, reconnecting through the sentinels.

    redis-py 8.1 reopens a dropped connection in ``send_packed_command`` with
    ``connect_check_health``, which skips the lookup that ``connect`` makes:
    after a READONLY reply (the master was demoted) a pipeline's retry went
    back to the same, demoted node three times, and the batch failed. Here
    every reconnect asks the sentinels first.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._connecting_to = False
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect_to(self, address: Address) -> None:
        self._connecting_to = True
        try:
            super().connect_to(address)  # type: ignore[no-untyped-call]
        finally:
            self._connecting_to = False

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self._sock is None and not self._connecting_to:
            self.connect()  # type: ignore[no-untyped-call]  # looks up, then connect_to
            return
        super().connect_check_health(check_health, retry_socket_connect)


class SentinelSSLConnection(SentinelConnection, redis.sentinel.SentinelManagedSSLConnection):
    """:class:`SentinelConnection` over TLS."""


class MasterWatch:
    """The master's address for one ``SentinelConnectionPool`` (see the module doc)."""

    def __init__(
        self, pool: redis.sentinel.SentinelConnectionPool, *, recheck: float = RECHECK
    ) -> None:
        self.pool = pool
        self.recheck = recheck
        self.address: Address | None = None
        self._last_found: Address | None = None  # survives forget(), to count switches
        self._checked = float("-inf")
        self._lock = threading.Lock()
        self._looking = False
        #: Lookups made, and how many found a different master than the one before.
        self.lookups = 0
        self.switches = 0

    @classmethod
    def for_client(cls, client: redis.Redis) -> MasterWatch | None:
        """A watch for a client made by ``Sentinel.master_for``; None for any other."""
        pool = client.connection_pool
        if isinstance(pool, redis.sentinel.SentinelConnectionPool) and pool.is_master:
            return cls(pool)
        return None

    @property
    def service(self) -> str:
        return str(self.pool.service_name)

    def due(self) -> bool:
        """Whether a periodic lookup is due (and none is running)."""
        return not self._looking and time.monotonic() - self._checked >= self.recheck

    def forget(self) -> None:
        """Ask the sentinels before the next connection."""
        self.address = None

    def lookup_sync(self) -> Address:
        """Ask the sentinels now (blocking; call it in a thread). redis-py's
        pool closes its idle connections when the master changed."""
        with self._lock:
            self._looking = True
            try:
                host, port = self.pool.get_master_address()  # type: ignore[no-untyped-call]
            finally:
                self._looking = False
                self._checked = time.monotonic()
            found = (str(host), int(port))
            self.lookups += 1
            if self._last_found is not None and found != self._last_found:
                self.switches += 1
            self._last_found = self.address = found
            return found

    def recheck_sync(self) -> None:
        """A periodic lookup when one is due (blocking). A failure keeps the
        known address (see the module doc)."""
        if self.due():
            with contextlib.suppress(redis.exceptions.RedisError):
                self.lookup_sync()

    def poke(self) -> None:
        """Start a periodic lookup in a thread when one is due, and return at
        once: the round trip that pokes never waits for the sentinels; the
        ones after it see the new address."""
        if self.due():
            import trio  # here: the connection classes above serve producers without Trio

            self._looking = True
            trio.lowlevel.start_thread_soon(self._recheck_thread, _ignore)

    def _recheck_thread(self) -> None:
        self._looking = False  # lookup_sync sets it again, under the lock
        self.recheck_sync()

    async def current(self, limiter: trio.CapacityLimiter | None = None) -> Address:
        """The known address, or a lookup in a thread when there is none."""
        address = self.address
        if address is not None:
            return address
        import trio

        return await trio.to_thread.run_sync(self.lookup_sync, limiter=limiter)

    def close(self) -> None:
        """Close the connections to the sentinels."""
        self.pool.sentinel_manager.close()


def _ignore(result: Any) -> None:
    """A background lookup's outcome: nothing waits for it (errors are
    swallowed in ``recheck_sync``)."""
