"""Hot-path cost in CPU instructions per job, counted by callgrind.

Wall time on a shared 2-core machine moves by ±20% between runs; an
instruction count does not (the same program, inputs and environment give
the same count, whatever else the machine is doing). So a change that
touches the hot path is judged here: each case runs under
``valgrind --tool=callgrind`` twice, with ``n`` and ``2n`` jobs, and the
difference divided by ``n`` is the cost of one job, free of start-up and
import costs.

Cases (the paths every job takes):

* ``enqueue``: ``await task.enqueue(payload)`` one at a time, embedded
  memory store (producer-side building, checking and encoding);
* ``drain``: one embedded worker (c=64) draining pre-enqueued no-op jobs
  on the memory store (lease, dispatch, run, settle in the runtime);
* ``sync_enqueue``: ``SyncProducer(app=...).enqueue`` one at a time against
  a private redis-server (the Python side of one enqueue; the server's work
  is not counted);
* ``redis_enqueue``: ``await task.enqueue(payload)`` one at a time against
  a private redis-server (the Trio store's Python side of one enqueue);
* ``redis_drain``: one embedded worker (c=64) draining jobs pre-enqueued
  in bulk on a private redis-server (the worker's Python side of lease,
  run, renew and settle; the scripts' work in the server is not counted);
* ``redis_cluster_drain``: ``redis_drain`` on a local 3-master Redis
  Cluster, the queue in 8 partitions (issue 27 item 6: the worker's Python
  side of the peek, lease and settle round trips to every master);
* ``redis_cluster_drain_distinct``: the same with a due time of its own
  for every job, 1 ms apart (as jobs enqueued one at a time have them: a
  batch then comes from every partition, not one or two);
* ``asyncio_enqueue``: ``await AsyncioProducer(app=...).enqueue`` one at a
  time under ``asyncio.run`` against a private redis-server (the asyncio
  producer's Python side of one enqueue, the event loop's share included);
* ``asyncio_bulk``: ``await AsyncioProducer(app=...).enqueue_many`` in
  batches of 1,000, the same way (its Python side per job).
* ``redis_bulk``: ``await task.enqueue_many(payloads)`` from Trio in
  batches of 1,000 against a private redis-server (issue 27 item 2);
* ``sync_bulk``: ``SyncProducer(app=...).enqueue_many`` in batches of
  1,000, the same way.
* ``redis_chain``: one embedded worker (c=64) running ``n / 10`` chains
  of 10 links (each link its predecessor's result plus one), started
  before it on a private redis-server (issue 29: the worker's Python side
  of a link, its successor's making included; the starts' share, one
  ``enqueue_workflow`` per 10 links, is counted too);
* ``redis_wf_start``: ``await app.enqueue_workflow(flow)`` of one 10-link
  chain one at a time, no worker, against a private redis-server (issue 29:
  the producer's Python side of a chain's start, per start);
* ``redis_wf_result``: ``await wf.result()`` of 20 finished 10-link chains
  in turn (the worker that ran them stopped first), the same way (the
  producer's Python side of a finished chain's result read, per read);
* ``arq_enqueue`` (a peer, not run unless named): arq's own awaited
  ``ArqRedis.enqueue_job`` one at a time against the same server, in its
  venv (``benchmarks/.venv/arq``), counted once whatever the trees;
* ``huey_enqueue`` (a peer, the same way): calling a huey task,
  ``job(to, subject, n)``, one at a time on ``RedisHuey`` (its venv
  ``benchmarks/.venv/huey``): the sync callers' yardstick;
* ``saq_enqueue`` (a peer, the same way): SAQ's ``await queue.enqueue``
  one at a time on ``Queue.from_url`` (``benchmarks/.venv/saq``), the
  fastest asyncio peer's call.

Each peer gets the same three fields as ours (``to``, ``subject``, ``n``)
in its own call's form (arguments, keyword arguments or a dict). Make a
peer's venv with ``python -m benchmarks --setup-peers --peers huey,saq``.

Compare two trees (say a commit checked out in a worktree) in one run::

    python -m benchmarks.hotpath --trees /path/to/old:/path/to/new [--n 2000]

Each tree's own ``chronos_trio`` is imported (``PYTHONPATH``), with this
file's cases. Needs ``valgrind`` (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = (
    "enqueue", "drain", "sync_enqueue", "redis_enqueue", "redis_drain", "asyncio_enqueue",
    "asyncio_bulk", "redis_bulk", "sync_bulk", "redis_chain", "redis_wf_start", "redis_wf_result",
    "redis_cluster_drain", "redis_cluster_drain_distinct",
)  # fmt: skip
#: The cases that need a Redis Cluster (their URL is the cluster's).
CLUSTER_CASES = {"redis_cluster_drain", "redis_cluster_drain_distinct"}
#: The cases that need a redis-server.
REDIS_CASES = {
    "arq_enqueue",
    "huey_enqueue",
    "saq_enqueue",
    "sync_enqueue",
    "redis_enqueue",
    "redis_drain",
    "asyncio_enqueue",
    "asyncio_bulk",
    "redis_bulk",
    "sync_bulk",
    "redis_chain",
    "redis_wf_start",
    "redis_wf_result",
}
HERE = Path(__file__).resolve()
#: Cases of another system, run in its own venv (once, whatever the trees).
PEER_CASES = {
    f"{peer}_enqueue": HERE.parent / ".venv" / peer / "bin" / "python"
    for peer in ("arq", "huey", "saq")
}


def _run_case(case: str, n: int, redis_url: str | None) -> None:
    """The workload itself (run in the measured process)."""
    if case in PEER_CASES:
        assert redis_url is not None
        _PEER_RUNS[case](n, redis_url)
        return
    import attrs
    import trio

    import chronos_trio

    @attrs.frozen
    class Payload:
        to: str
        subject: str
        n: int

    app = chronos_trio.App()

    ran = [0]
    all_ran = trio.Event()

    @app.task("bench.job")
    async def job(p: Payload, ctx: chronos_trio.JobContext) -> None:
        # The drains wait for this, not for wait_idle alone: wait_idle polls
        # the store every 50 ms, a cost that grows with how long the run
        # takes (valgrind, a loaded machine), not with the jobs.
        ran[0] += 1
        if ran[0] == n:
            all_ran.set()

    payloads = [Payload("someone@example.com", "hello", i) for i in range(n)]
    if case == "enqueue":

        async def enqueue() -> None:
            for p in payloads:
                await job.enqueue(p)

        trio.run(enqueue)
    elif case == "drain":

        async def drain() -> None:
            await job.enqueue_many(payloads)
            async with app.open_worker(concurrency=64) as worker:
                await all_ran.wait()
                await worker.wait_idle()  # the last settle

        trio.run(drain)
    elif case in ("redis_drain", "redis_cluster_drain", "redis_cluster_drain_distinct"):
        assert redis_url is not None
        from chronos_trio.store.redis import RedisStore

        app = chronos_trio.App(RedisStore.from_url(redis_url))
        app.task("bench.job")(job.fn)

        async def redis_drain() -> None:
            task = app.tasks["bench.job"]
            if case == "redis_cluster_drain_distinct":
                now = await app.store.now()
                jobs = [
                    attrs.evolve(j, run_at=now - 60 + i * 0.001)
                    for i, j in enumerate(task.new_jobs(payloads))
                ]
                await app.enqueue_jobs(jobs)
            else:
                await task.enqueue_many(payloads)
            async with app.open_worker(concurrency=64) as worker:
                await all_ran.wait()
                await worker.wait_idle()  # the last settle
            await app.aclose()

        trio.run(redis_drain)
    elif case == "redis_chain":
        assert redis_url is not None
        from chronos_trio.store.redis import RedisStore

        app = chronos_trio.App(RedisStore.from_url(redis_url))

        async def link_fn(p: int, ctx: chronos_trio.JobContext) -> int:
            ran[0] += 1
            if ran[0] == n:
                all_ran.set()
            return p + 1

        # its types as objects: the annotations' names are this function's locals
        link_fn.__annotations__ = {"p": int, "ctx": chronos_trio.JobContext, "return": int}
        link = app.task("bench.link")(link_fn)

        async def redis_chain() -> None:
            flow = chronos_trio.chain(link.s(0), *(link.s() for _ in range(9)))
            for _ in range(n // 10):
                await app.enqueue_workflow(flow)
            async with app.open_worker(concurrency=64) as worker:
                await all_ran.wait()
                await worker.wait_idle()  # the last settle
            await app.aclose()

        trio.run(redis_chain)
    elif case in ("redis_wf_start", "redis_wf_result"):
        assert redis_url is not None
        from chronos_trio.store.redis import RedisStore

        app = chronos_trio.App(RedisStore.from_url(redis_url))

        async def link_fn(p: int, ctx: chronos_trio.JobContext) -> int:
            return p + 1

        link_fn.__annotations__ = {"p": int, "ctx": chronos_trio.JobContext, "return": int}
        link = app.task("bench.link")(link_fn)

        async def redis_wf() -> None:
            # n starts of a 10-link chain (no worker), or n result() reads
            # of 20 finished chains in turn (the worker stopped first)
            flow = chronos_trio.chain(link.s(0), *(link.s() for _ in range(9)))
            if case == "redis_wf_start":
                for _ in range(n):
                    await app.enqueue_workflow(flow)
            else:
                async with app.open_worker(concurrency=64):
                    started = [await app.enqueue_workflow(flow) for _ in range(20)]
                    for wf in started:
                        await wf.result(timeout=60)
                for k in range(n):
                    await started[k % 20].result(timeout=60)
            await app.aclose()

        trio.run(redis_wf)
    elif case == "redis_enqueue":
        assert redis_url is not None
        from chronos_trio.store.redis import RedisStore

        app = chronos_trio.App(RedisStore.from_url(redis_url))
        task = app.task("bench.job")(job.fn)

        async def redis_enqueue() -> None:
            for p in payloads:
                await task.enqueue(p)
            await app.aclose()

        trio.run(redis_enqueue)
    elif case == "redis_bulk":
        assert redis_url is not None
        from chronos_trio.store.redis import RedisStore

        app = chronos_trio.App(RedisStore.from_url(redis_url))
        task = app.task("bench.job")(job.fn)

        async def redis_bulk() -> None:
            for i in range(0, len(payloads), 1000):
                await task.enqueue_many(payloads[i : i + 1000])
            await app.aclose()

        trio.run(redis_bulk)
    elif case == "sync_bulk":
        assert redis_url is not None
        from chronos_trio.producers import SyncProducer

        with SyncProducer(redis_url, app=app) as producer:
            for i in range(0, len(payloads), 1000):
                producer.enqueue_many("bench.job", payloads[i : i + 1000])
    elif case == "sync_enqueue":
        assert redis_url is not None
        from chronos_trio.producers import SyncProducer

        with SyncProducer(redis_url, app=app) as producer:
            for p in payloads:
                producer.enqueue("bench.job", p)
    elif case in ("asyncio_enqueue", "asyncio_bulk"):
        assert redis_url is not None
        import asyncio

        from chronos_trio.producers import AsyncioProducer

        async def asyncio_enqueue() -> None:
            async with AsyncioProducer(redis_url, app=app) as producer:
                if case == "asyncio_enqueue":
                    for p in payloads:
                        await producer.enqueue("bench.job", p)
                else:
                    for i in range(0, len(payloads), 1000):
                        await producer.enqueue_many("bench.job", payloads[i : i + 1000])

        asyncio.run(asyncio_enqueue())
    else:
        raise ValueError(f"unknown case {case!r}")


def _run_arq(n: int, redis_url: str) -> None:
    """arq's awaited ``enqueue_job``, one at a time (the payload as a dict)."""
    import asyncio

    from arq import create_pool  # type: ignore[import-not-found]
    from arq.connections import RedisSettings  # type: ignore[import-not-found]

    payloads = [{"to": "someone@example.com", "subject": "hello", "n": i} for i in range(n)]

    async def arq_enqueue() -> None:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        for p in payloads:
            await pool.enqueue_job("bench.job", p)
        await pool.aclose()

    asyncio.run(arq_enqueue())


def _run_huey(n: int, redis_url: str) -> None:
    """huey's ``task(...)`` call, one at a time (the fields as arguments)."""
    from huey import RedisHuey  # type: ignore[import-not-found]

    huey = RedisHuey("bench", url=redis_url)

    @huey.task()  # type: ignore[misc]
    def job(to: str, subject: str, n: int) -> None:
        pass

    payloads = [("someone@example.com", "hello", i) for i in range(n)]
    for p in payloads:
        job(*p)
    huey.storage.pool.disconnect()


def _run_saq(n: int, redis_url: str) -> None:
    """SAQ's awaited ``queue.enqueue``, one at a time (the fields as keywords)."""
    import asyncio

    from saq import Queue  # type: ignore[import-not-found]

    payloads = [{"to": "someone@example.com", "subject": "hello", "n": i} for i in range(n)]

    async def saq_enqueue() -> None:
        queue = Queue.from_url(redis_url)
        await queue.connect()
        for p in payloads:
            await queue.enqueue("bench.job", **p)
        await queue.disconnect()

    asyncio.run(saq_enqueue())


_PEER_RUNS = {"arq_enqueue": _run_arq, "huey_enqueue": _run_huey, "saq_enqueue": _run_saq}


def _flush(redis_url: str) -> None:
    """Every run from an empty server (every master of a Cluster)."""
    import redis

    if redis_url.startswith("redis+cluster://"):
        for node in redis_url.split("://", 1)[1].split("?", 1)[0].split(","):
            redis.Redis.from_url(f"redis://{node}").flushall()
    else:
        redis.Redis.from_url(redis_url).flushall()


def callgrind_instructions(tree: Path, command: list[str]) -> int:
    """The instructions ``command`` (a program and its arguments) runs under
    callgrind, in ``tree`` with that tree's ``chronos_trio`` imported
    (``PYTHONPATH``) and a fixed hash seed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command]
        subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True)
        text = out.read_text()
    match = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    if match is None:
        raise RuntimeError("callgrind wrote no summary")
    return int(match.group(1))


def _instructions(tree: Path, case: str, n: int, redis_url: str | None) -> int:
    if redis_url:
        _flush(redis_url)
    command = [str(PEER_CASES.get(case, sys.executable)), str(HERE), "--run", case, "--n", str(n)]
    if redis_url:
        command += ["--redis-url", redis_url]
    return callgrind_instructions(tree, command)


def per_job(tree: Path, case: str, n: int, redis_url: str | None) -> float:
    """Instructions of one job: (I(2n) - I(n)) / n."""
    one = _instructions(tree, case, n, redis_url)
    two = _instructions(tree, case, 2 * n, redis_url)
    return (two - one) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(HERE.parent.parent), help="tree[:tree...]")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--n", type=int, default=2000, help="jobs in the smaller run")
    parser.add_argument("--run", choices=(*CASES, *PEER_CASES), help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run_case(args.run, args.n, args.redis_url)
        return
    trees = [Path(t).resolve() for t in args.trees.split(":")]
    cases = [c for c in args.cases.split(",") if c]
    redis_url = cluster_url = None
    server = cluster = None
    sys.path.insert(0, str(HERE.parent.parent))
    if REDIS_CASES & set(cases):
        from chronos_trio.testing.redis_server import RedisServer

        server = RedisServer().start()
        redis_url = server.url
    if CLUSTER_CASES & set(cases):
        from chronos_trio.testing.redis_server import RedisCluster

        cluster = RedisCluster().start()
        cluster_url = f"{cluster.url}?partitions=8"
    try:
        header = f"{'case':<16}" + "".join(f"{t.name[-18:]:>20}" for t in trees)
        if len(trees) > 1:
            header += f"{'last/first':>12}"
        print(f"instructions per job (callgrind; n={args.n} and {2 * args.n})")
        print(header)
        for case in cases:
            url = cluster_url if case in CLUSTER_CASES else redis_url
            if case in PEER_CASES:
                counts = [per_job(trees[0], case, args.n, url)] * len(trees)
            else:
                counts = [per_job(t, case, args.n, url) for t in trees]
            row = f"{case:<16}" + "".join(f"{c:>20,.0f}" for c in counts)
            if len(trees) > 1:
                row += f"{counts[-1] / counts[0]:>12.3f}"
            print(row, flush=True)
    finally:
        if server is not None:
            server.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
