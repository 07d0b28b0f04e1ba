"""Redis for handlers: the store's own connections, for a handler's commands.

A handler on Trio has no good Redis client of its own: a blocking redis-py
call stalls the event loop for its round trip, a thread hop costs more than
the round trip. ``job.redis`` hands it the worker's store connections
instead (arq hands its Redis to every job as ``ctx['redis']``): on a single
node and behind Sentinel, pooled Trio sockets with hiredis (no thread, never
blocking the loop); on a Cluster or over TLS, the store's redis-py path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._adapter import RedisAdapter
from ._group_commit import GroupCommit
from ._scripts import Op

#: Commands whose first argument is not a key (routed to any node on a Cluster).
_KEYLESS = frozenset(
    {"PING", "ECHO", "TIME", "INFO", "DBSIZE", "PUBLISH", "SCRIPT", "FUNCTION", "CLIENT"}
)


def _route(command: Sequence[Any]) -> str | bytes | None:
    if len(command) < 2:
        return None
    name = command[0]
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name.upper() in _KEYLESS:
        return None
    key = command[1]
    return key if isinstance(key, str | bytes) else str(key)


#: Most commands sent in one coalesced pipeline (more wait for the next).
MAX_COALESCED = 1000


class RedisCommands:
    """Run Redis commands on the store's connections: ``await
    job.redis.execute("INCR", "hits")``, or several in one round trip with
    :meth:`pipeline`. Replies are what redis-py returns for the command.

    On a Cluster a command is routed by its first argument after the name
    (its key), so a pipeline's commands may go to several nodes (one round
    trip per node, in parallel) and multi-key commands need keys of one
    slot (a hash tag), as always on a Cluster.

    Raises redis-py's ``ResponseError`` (and subclasses) for an error reply,
    :class:`~chronos_trio.StoreError` when Redis cannot be reached or does
    not answer within the store's socket timeout. Blocking commands (BLPOP,
    XREAD BLOCK...) would hold a pooled connection for their whole wait: use
    a client of your own for those."""

    def __init__(self, adapter: Any) -> None:
        # (the store makes it: ``store.commands()``; the adapter is private)
        self._adapter: RedisAdapter = adapter
        self._calls: GroupCommit[Op, Any] = GroupCommit(adapter.execute, max_items=MAX_COALESCED)

    async def execute(self, *command: Any) -> Any:
        """One command; its reply.

        Concurrent calls share round trips (group commit, as concurrent
        enqueues do): while one batch is in flight, the calls that arrive
        wait, then go as the next pipeline. So 64 handlers each running one
        command cost a few round trips, not 64. A call that was sent, or is
        waiting to be, completes (cancellation is delivered after it)."""
        if not command:
            raise ValueError("an empty command")
        [reply] = await self._calls.submit([Op(_route(command), tuple(command), soft=True)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[Any]], *, raise_on_error: bool = True
    ) -> list[Any]:
        """Several commands in one round trip (per node); their replies in
        order. With ``raise_on_error`` False, an error reply is returned in
        its place as the exception instead of raised (the others still ran)."""
        if not commands:
            return []
        for command in commands:
            if not command:
                raise ValueError("an empty command")
        ops = [Op(_route(c), tuple(c), soft=True) for c in commands]
        replies = await self._adapter.execute(ops)
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies
