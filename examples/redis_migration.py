"""Queue topology migration on Redis: show, promote, complete.

Repartition a live queue without stopping anything: promote a new version
(new jobs go there), let workers drain the old one, then complete it::

    python examples/redis_migration.py redis://127.0.0.1:6379/0 show orders
    python examples/redis_migration.py redis://127.0.0.1:6379/0 promote orders --partitions 8
    python examples/redis_migration.py redis://127.0.0.1:6379/0 complete orders --version 1

``complete`` refuses (exit code 1) while the old version still holds jobs;
``--wait`` retries until it is drained. Cluster URLs work the same:
``redis+cluster://host:7000,host:7001``.
"""

from __future__ import annotations

import argparse
import sys

import trio

from chronos_trio.store import TopologyError
from chronos_trio.store.redis import RedisStore


async def show(store: RedisStore, queue: str) -> None:
    topo = await store.topology(queue)
    [stats] = await store.stats([queue])
    paused = " (paused)" if stats.paused else ""
    print(f"queue {queue!r}{paused}: {stats.total} job(s)")
    for v in topo.versions:
        held = {p: n for (ver, p), n in stats.by_partition.items() if ver == v.version}
        spread = ", ".join(f"p{p}={n}" for p, n in sorted(held.items())) or "empty"
        print(f"  v{v.version}  {v.state.value:<8}  {v.partitions} partition(s)  {spread}")
    counts = ", ".join(f"{s.value}={n}" for s, n in stats.counts.items() if n)
    print(f"  by state: {counts or 'none'}")


async def promote(store: RedisStore, queue: str, version: int | None, partitions: int) -> None:
    if version is None:
        version = max(v.version for v in (await store.topology(queue)).versions) + 1
    topo = await store.promote_queue_version(queue, version, partitions)
    print(f"v{version} ({partitions} partitions) is now active for {queue!r}")
    for v in topo.versions:
        print(f"  v{v.version}  {v.state.value}  {v.partitions} partition(s)")


async def complete(store: RedisStore, queue: str, version: int, wait: float | None) -> None:
    deadline = trio.current_time() + (wait or 0.0)
    while True:
        try:
            await store.complete_draining_version(queue, version)
        except TopologyError as exc:
            if "still holds" not in str(exc) or trio.current_time() >= deadline:
                raise
            print(f"waiting: {exc}", file=sys.stderr)
            await trio.sleep(1.0)
            continue
        print(f"v{version} of {queue!r} completed and removed")
        return


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="redis://, rediss:// or redis+cluster:// URL")
    parser.add_argument("--namespace", default="chronos")
    sub = parser.add_subparsers(dest="command", required=True)
    p_show = sub.add_parser("show", help="versions, partitions and job counts")
    p_show.add_argument("queue")
    p_promote = sub.add_parser("promote", help="make a new version active")
    p_promote.add_argument("queue")
    p_promote.add_argument("--partitions", type=int, required=True)
    p_promote.add_argument("--version", type=int, help="default: highest existing + 1")
    p_complete = sub.add_parser("complete", help="remove a drained version")
    p_complete.add_argument("queue")
    p_complete.add_argument("--version", type=int, required=True)
    p_complete.add_argument("--wait", type=float, help="retry for this many seconds")
    args = parser.parse_args(argv)

    store = RedisStore.from_url(args.url, namespace=args.namespace)
    try:
        if args.command == "show":
            await show(store, args.queue)
        elif args.command == "promote":
            await promote(store, args.queue, args.version, args.partitions)
        else:
            await complete(store, args.queue, args.version, args.wait)
    except TopologyError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
