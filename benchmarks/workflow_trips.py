"""Where a chain link's store traffic goes (issue 29): the chains workload of
``benchmarks.workflows`` (``C`` 10-link chains at once, one embedded worker,
c=64, on a private redis-server), counted instead of timed:

* round trips per link (requests the store's connections sent, all
  callers: worker and producer);
* per store method: calls per link and the mean batch (jobs, entries);
* Redis commands per link (``INFO commandstats``: what the scripts ran
  inside the server counts too) and the server's microseconds per link.

Counts barely move with the machine's load, unlike rates::

    python -m benchmarks.workflow_trips [--chains 500]
"""

from __future__ import annotations

import argparse
import collections
import statistics
from collections.abc import Callable
from typing import Any

import trio

from chronos_trio.store.redis import RedisStore, _native

from . import workflows
from ._redis import open_redis

#: Store methods counted, and the size of one call (its batch).
METHODS: dict[str, Callable[[tuple[Any, ...], Any], int]] = {
    "lease": lambda args, result: len(result.jobs),
    "settle": lambda args, result: len(args[0]),
    "enqueue_many": lambda args, result: len(args[0]),
    "continuations": lambda args, result: len(result),
    "next_continuations": lambda args, result: len(result),
    "finish_continuations": lambda args, result: len(args[0]),
    "group_arrive": lambda args, result: len(args[0]),
    "wait_outcome": lambda args, result: 1,
}


def _count(calls: dict[str, list[int]], trips: collections.Counter[str]) -> Callable[[], None]:
    """Patch the store and its connections to count; returns the undo."""
    undo: list[Callable[[], None]] = []
    begin = _native._Connection.begin

    def counted_begin(self: Any, commands: Any) -> None:
        trips["round trips"] += 1
        begin(self, commands)

    _native._Connection.begin = counted_begin  # type: ignore[method-assign]
    undo.append(lambda: setattr(_native._Connection, "begin", begin))
    for name, size in METHODS.items():
        method = getattr(RedisStore, name, None)
        if method is None:  # an older tree without it
            continue

        def wrap(method: Any = method, name: str = name, size: Any = size) -> Any:
            async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = await method(self, *args, **kwargs)
                calls[name].append(size(args, result))
                return result

            return counted

        setattr(RedisStore, name, wrap())
        undo.append(lambda name=name, method=method: setattr(RedisStore, name, method))
    return lambda: [u() for u in reversed(undo)] and None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=500)
    args = parser.parse_args()
    calls: dict[str, list[int]] = collections.defaultdict(list)
    trips: collections.Counter[str] = collections.Counter()
    links = args.chains * workflows.LINKS
    with open_redis() as redis:
        workflows.flushall(redis)
        trio.run(workflows.chains, redis.url, 20)  # scripts loaded, imports done
        workflows.flushall(redis)
        redis.reset_stats()
        undo = _count(calls, trips)
        try:
            rate = trio.run(workflows.chains, redis.url, args.chains)
        finally:
            undo()
        info = redis.client.info("commandstats")
    print(f"{args.chains} chains of {workflows.LINKS} links: {rate:,.0f} links/s (load-bound)")
    print(f"round trips per link: {trips['round trips'] / links:.3f}")
    for name, sizes in calls.items():
        print(
            f"  {name:22s} {len(sizes) / links:.3f} calls/link, "
            f"mean batch {statistics.mean(sizes):.1f}"
        )
    skip = {"cmdstat_info", "cmdstat_config|resetstat"}
    stats = {k: v for k, v in info.items() if k not in skip}
    total = sum(int(v["calls"]) for v in stats.values())
    usec = sum(float(v["usec"]) for v in stats.values())
    print(f"Redis commands per link: {total / links:.2f} ({usec / links:.1f} us of server time)")
    for key, v in sorted(stats.items(), key=lambda kv: -int(kv[1]["calls"]))[:8]:
        print(f"  {key.removeprefix('cmdstat_'):14s} {int(v['calls']) / links:.2f}")


if __name__ == "__main__":
    main()
