"""Redis's instructions per job in a drain: one node against a local
3-master Cluster, every ``redis-server`` under callgrind.

Each server runs under ``valgrind --tool=callgrind``, counting only inside
``call()`` (every command run, the scripts and the commands they call; not
networking or parsing), its counters dumped before every ``ECHO``. The
workload (in this process) enqueues ``n`` no-op jobs, marks every server
(``ECHO``), drains them with one embedded worker at c=64 and marks again:
the counts between the marks, summed over the servers, per job, are
Redis's work for the drain, whatever else runs on the machine. The first
call of each script on a server is in it (``SCRIPT LOAD``'s compile,
``luaCreateFunction``: shown apart), as in any fresh worker's drain.

``--distinct`` gives every job a due time of its own, 1 ms apart (as jobs
enqueued one at a time have them), instead of one for all (one
``enqueue_many``): on a Cluster a batch then comes from every partition.
``--payload N`` gives every job a str argument of N characters (N + 2
bytes of JSON) instead of its number; ``--result`` has the handler return
a small result (``"ok"``), kept for the task's ``result_ttl`` (an hour):
the settle then keeps the record instead of deleting it; ``--retain``
sets ``retain_succeeded`` to an hour (the record kept in the succeeded
index).

    python -m benchmarks.drain_redis_cost [--cluster] [--distinct] [--n 3000]
        [--payload 100] [--result] [--retain]

Needs ``valgrind`` and ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def _count(path: Path) -> tuple[int, int]:
    """The dump's total and ``luaCreateFunction``'s inclusive count."""
    text = path.read_text()
    match = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    total = int(match.group(1)) if match else 0
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    compile_ = re.search(r"^\s*([\d,]+) .*:luaCreateFunction ", out, re.M)
    return total, int(compile_.group(1).replace(",", "")) if compile_ else 0


async def _drain(
    url: str,
    ports: list[int],
    n: int,
    distinct: bool,
    payload: int,
    result: bool,
    retain: bool,
    compact: bool = False,
) -> dict[str, int]:
    import attrs
    import redis
    import trio

    import chronos_trio
    from chronos_trio.store.redis import RedisStore

    done = trio.Event()
    ran = [0]
    app = chronos_trio.App(RedisStore.from_url(url, compact_succeeded=compact))

    async def job(p: Any, ctx: chronos_trio.JobContext) -> str | None:
        ran[0] += 1
        if ran[0] == n:
            done.set()
        return "ok" if result else None

    arg: type = str if payload else int
    job.__annotations__ = {
        "p": arg, "ctx": chronos_trio.JobContext, "return": str if result else type(None),
    }  # fmt: skip
    task = app.task("bench.job", retain_succeeded=3600.0 if retain else None)(job)
    args: list[Any] = (
        [f"{i:08d}".ljust(payload, "x") for i in range(n)] if payload else list(range(n))
    )
    if distinct:
        now = await app.store.now()
        jobs = task.new_jobs(args)
        await app.enqueue_jobs(
            [attrs.evolve(j, run_at=now - 60 + i * 0.001) for i, j in enumerate(jobs)]
        )
    else:
        await task.enqueue_many(args)
    clients = [redis.Redis(port=p) for p in ports]
    for c in clients:
        c.config_resetstat()
        c.echo("mark")
    async with app.open_worker(concurrency=64) as worker:
        await done.wait()
        await worker.wait_idle()
    calls: dict[str, int] = {}
    for c in clients:
        c.echo("mark")
        for name, stat in c.info("commandstats").items():
            key = name.removeprefix("cmdstat_")
            calls[key] = calls.get(key, 0) + int(stat["calls"])
        c.close()
    await app.aclose()
    return calls


def measure(
    n: int,
    *,
    cluster: bool,
    distinct: bool,
    payload: int = 0,
    result: bool = False,
    retain: bool = False,
    compact: bool = False,
) -> dict[str, Any]:
    """Redis's instructions per job in the drain (see the module's doc)."""
    import trio

    from chronos_trio.testing.redis_server import RedisCluster, RedisServer

    with tempfile.TemporaryDirectory(prefix="chronos-cg-") as tmp:
        wrapper = Path(tmp) / "bin" / "redis-server"
        wrapper.parent.mkdir()
        wrapper.write_text(
            "#!/bin/sh\nexec valgrind --tool=callgrind --toggle-collect=call "
            f"--dump-before=echoCommand --callgrind-out-file={tmp}/cg.%p "
            f'{shutil.which("redis-server")} "$@"\n'
        )
        wrapper.chmod(0o755)
        path = os.environ["PATH"]
        os.environ["PATH"] = f"{wrapper.parent}:{path}"
        try:
            server: Any = (
                RedisCluster(start_timeout=120) if cluster else RedisServer(start_timeout=60)
            )
            server.start()
        finally:
            os.environ["PATH"] = path
        try:
            nodes = server.nodes if cluster else [server]
            pids = [node.pid for node in nodes]
            url = f"{server.url}?partitions=8" if cluster else server.url
            ports = [node.port for node in nodes]
            calls = trio.run(_drain, url, ports, n, distinct, payload, result, retain, compact)
        finally:
            server.close()
        total = compile_ = 0
        for pid in pids:
            dumps = sorted(
                Path(tmp).glob(f"cg.{pid}.*"), key=lambda p: int(p.name.rsplit(".", 1)[1])
            )
            got = _count(dumps[1])  # dump 1: to the first mark; dump 2: the drain
            total, compile_ = total + got[0], compile_ + got[1]
    return {"per_job": total / n, "compile_per_job": compile_ / n, "calls": calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="jobs")
    parser.add_argument("--cluster", action="store_true", help="3 masters, 8 partitions")
    parser.add_argument("--distinct", action="store_true", help="a due time per job")
    parser.add_argument("--payload", type=int, default=0, help="a str argument of N chars")
    parser.add_argument("--result", action="store_true", help="return a result (kept an hour)")
    parser.add_argument("--retain", action="store_true", help="retain_succeeded an hour")
    parser.add_argument("--compact", action="store_true", help="a compact_succeeded store")
    args = parser.parse_args()
    got = measure(
        args.n,
        cluster=args.cluster,
        distinct=args.distinct,
        payload=args.payload,
        result=args.result,
        retain=args.retain,
        compact=args.compact,
    )
    where = "3-master Cluster, 8 partitions" if args.cluster else "one node, 1 partition"
    due = "distinct due times" if args.distinct else "one due time"
    what = f"payload {args.payload + 2} B, " if args.payload else ""
    what += "a result kept, " if args.result else ""
    what += "retained, " if args.retain else ""
    what += "compact_succeeded, " if args.compact else ""
    print(f"Redis instructions per job in call(), drain of {args.n:,} ({where}, {what}{due})")
    print(
        f"  all: {got['per_job']:,.0f}   of which first-call compiles: "
        f"{got['compile_per_job']:,.0f}"
    )
    scripts = got["calls"].get("evalsha", 0) + got["calls"].get("fcall", 0)
    print(f"  script calls per 64 jobs: {scripts / args.n * 64:.1f}")


if __name__ == "__main__":
    main()
