"""Redis's own cost of the store's Lua scripts, in instructions per job.

A private ``redis-server`` runs under ``valgrind --tool=callgrind``,
counting only inside ``evalGenericCommand`` (the running of ``EVAL`` /
``EVALSHA``: the script and the Redis commands it calls, not networking or
command parsing) and ``scriptCommand`` (``SCRIPT LOAD``: compiling).
The counters are dumped whenever the server runs ``ECHO``
(``--dump-before=echoCommand``), which the workload sends between its
phases, so each phase's count is exact, whatever else runs around it (an
instruction count does not move with the machine's load).

The workload drives ``RedisStore`` on one queue of one partition, ``n``
jobs (20-byte payloads) in batches of 64, each phase over all of them:

* ``load``: the first call of each script (``NOSCRIPT``, then ``SCRIPT
  LOAD`` and the call again), on a small warm-up batch: per script, not
  per job;
* ``enqueue`` (due now), ``lease``, ``renew``, ``settle`` (succeeded);
* ``enqueue_delayed`` (due a few seconds on), ``promote`` (once due);
* ``recover``: those jobs leased for 1 s and never settled, taken back
  once the leases expired (``recover_expired``: the peek and the script).

Compare trees (say a commit checked out in a worktree) in one run::

    python -m benchmarks.redis_scripts --trees /path/to/old:/path/to/new [--n 2000]

``--enqueue-batch k`` measures enqueue alone, in calls of ``k`` jobs each
(1: one enqueue at a time; 1000: a bulk enqueue): the phases are ``load``,
``enqueue`` (due now) and ``enqueue_delayed`` (due an hour on, so none
becomes due while they are stored), no other script runs.

Each tree's own ``chronos_trio`` is imported (``PYTHONPATH``), so its own
scripts are loaded; the table also gives each script's size as sent
(bytes, the text ``SCRIPT LOAD`` compiles). Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PHASES = ("load", "enqueue", "lease", "renew", "settle", "enqueue_delayed", "promote", "recover")
BATCH = 64


def _workload(url: str, n: int, out: Path, enqueue_batch: int = 0) -> None:
    """Run the phases against ``url`` (in the measured tree's process) and
    write the phases' job counts, script call counts and script sizes.
    ``enqueue_batch`` > 0: the enqueue phases only, in calls of that many
    jobs (see the module's docstring)."""
    import redis as redis_py
    import trio

    from chronos_trio.records import NewJob
    from chronos_trio.store import QueueWeight, SettleKind, Settlement
    from chronos_trio.store.redis import RedisStore, _check, _scripts

    marker = redis_py.Redis.from_url(url)
    queue = "bench"
    calls: dict[str, int] = {}

    def evalsha_calls() -> int:
        stats = marker.info("commandstats")
        return sum(
            int(stats.get(k, {}).get("calls", 0)) for k in ("cmdstat_evalsha", "cmdstat_eval")
        )

    def mark() -> int:
        marker.echo("phase")  # the server dumps its counters before this runs
        return evalsha_calls()

    def jobs(prefix: str, count: int) -> list[NewJob]:
        return [
            NewJob(id=f"{prefix}{i:06d}", queue=queue, kind="bench.job", payload=b"x" * 20)
            for i in range(count)
        ]

    async def lease_all(store: RedisStore, duration: float) -> list[Any]:
        got: list[Any] = []
        while True:
            batch = await store.lease(
                [QueueWeight(queue)], BATCH, worker_id="bench", lease_duration=duration
            )
            # a LeaseResult's jobs; a plain list from trees before issue 24
            leased = getattr(batch, "jobs", batch)
            if not leased:
                return got
            got.extend(leased)

    async def main() -> dict[str, dict[str, int]]:
        store = RedisStore.from_url(url, default_partitions=1)
        phase_jobs: dict[str, int] = {}
        before = mark()

        async def phase(name: str, count: int) -> None:
            nonlocal before
            now_calls = mark()
            calls[name] = calls.get(name, 0) + now_calls - before
            phase_jobs[name] = phase_jobs.get(name, 0) + count
            before = now_calls

        # load: every script the phases use, first called on a small batch
        await store.enqueue_many(jobs("w", 4))
        await store.enqueue_many(
            [NewJob(id="wd", queue=queue, kind="bench.job", payload=b"x", delay=0.2)]
        )
        if enqueue_batch:
            await phase("load", 1)
            for start in range(0, n, enqueue_batch):
                await store.enqueue_many(jobs(f"n{start}-", min(enqueue_batch, n - start)))
            await phase("enqueue", n)
            due = await store.now() + 3600.0
            for start in range(0, n, enqueue_batch):
                batch = [
                    NewJob(id=f"d{start}-{i}", queue=queue, kind="bench.job",
                           payload=b"x" * 20, run_at=due)
                    for i in range(min(enqueue_batch, n - start))
                ]  # fmt: skip
                await store.enqueue_many(batch)
            await phase("enqueue_delayed", n)
            await store.aclose()
            return {
                "jobs": phase_jobs,
                "calls": calls,
                "sizes": {"enqueue": len(_scripts.ENQUEUE.source)},
            }
        warm = await lease_all(store, 30.0)
        await store.renew([j.ref for j in warm], 30.0)
        await store.settle([Settlement(j.ref, SettleKind.SUCCEEDED) for j in warm])
        await trio.sleep(0.3)
        await store.promote_due([queue], BATCH)
        for j in await lease_all(store, 30.0):
            await store.settle([Settlement(j.ref, SettleKind.SUCCEEDED)])
        await store.recover_expired([queue], BATCH)
        await phase("load", 1)

        for start in range(0, n, BATCH):
            await store.enqueue_many(jobs(f"n{start}-", min(BATCH, n - start)))
        await phase("enqueue", n)
        leased = await lease_all(store, 30.0)
        await phase("lease", len(leased))
        for start in range(0, len(leased), BATCH):
            await store.renew([j.ref for j in leased[start : start + BATCH]], 30.0)
        await phase("renew", len(leased))
        for start in range(0, len(leased), BATCH):
            chunk = leased[start : start + BATCH]
            await store.settle([Settlement(j.ref, SettleKind.SUCCEEDED) for j in chunk])
        await phase("settle", len(leased))

        # due once every batch is stored (under valgrind the server is slow)
        due = await store.now() + 3.0 + n / 1000
        for start in range(0, n, BATCH):
            batch = [
                NewJob(id=f"d{start}-{i}", queue=queue, kind="bench.job", payload=b"x" * 20,
                       run_at=due)
                for i in range(min(BATCH, n - start))
            ]  # fmt: skip
            await store.enqueue_many(batch)
        await phase("enqueue_delayed", n)
        await trio.sleep(due + 0.1 - await store.now())
        await phase("other", 1)  # the wait's idle looks, if any: not promote's
        promoted = 0
        while True:
            got = await store.promote_due([queue], BATCH)
            promoted += got.promoted
            if got.promoted == 0:
                break
        await phase("promote", promoted)

        assert promoted == n, (promoted, n)
        expiring = await lease_all(store, 1.0)
        await trio.sleep(1.2)  # past the leases' expiry
        await phase("other", 1)  # that lease and the wait
        recovered = 0
        while True:
            got_r = await store.recover_expired([queue], BATCH)
            if not got_r.requeued:
                break
            recovered += len(got_r.requeued)
        assert recovered == len(expiring), (recovered, len(expiring))
        await phase("recover", recovered)
        await store.aclose()
        sizes = {
            s.name: len(s.source)
            for s in [*vars(_scripts).values(), _check.INSPECT, _check.REPAIR]
            if isinstance(s, _scripts.Script)
        }
        return {"jobs": phase_jobs, "calls": calls, "sizes": sizes}

    out.write_text(json.dumps(trio.run(main)))
    marker.close()


def _summary(path: Path) -> int:
    text = path.read_text()
    match = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    return int(match.group(1)) if match else 0


def wait_until_serving(server: subprocess.Popen[bytes], port: int) -> None:
    """Until the redis-server ``server`` (slow under valgrind) answers a
    PING on ``port``; RuntimeError if it exits or 60 s pass first."""
    from chronos_trio.testing.redis_server import _ping

    deadline = time.monotonic() + 60
    while _ping(port, 1.0) is None:
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("redis-server under valgrind did not start")
        time.sleep(0.2)


def measure(tree: Path, n: int, enqueue_batch: int = 0) -> dict[str, Any]:
    """Run the workload of ``tree`` against a fresh server under callgrind:
    per phase its instructions, jobs and script calls; the script sizes.
    ``enqueue_batch`` > 0: the enqueue phases only, in calls of that many jobs."""
    sys.path.insert(0, str(HERE.parent.parent))
    from chronos_trio.testing.redis_server import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="chronos-cg-") as tmp:
        dumps = Path(tmp) / "cg.out"
        argv = [
            shutil.which("valgrind") or "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={dumps}",
            "--dump-before=echoCommand",
            "--toggle-collect=evalGenericCommand",
            "--toggle-collect=scriptCommand",
            shutil.which("redis-server") or "redis-server",
            "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", tmp, "--logfile", "redis.log",
        ]  # fmt: skip
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until_serving(server, port)
            report = Path(tmp) / "report.json"
            env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
            subprocess.run(
                [sys.executable, str(HERE), "--run", f"redis://127.0.0.1:{port}/0",
                 "--n", str(n), "--out", str(report), "--enqueue-batch", str(enqueue_batch)],
                cwd=tree, env=env, check=True,
            )  # fmt: skip
            result: dict[str, Any] = json.loads(report.read_text())
            marks = sorted((int(p.name.rsplit(".", 1)[1]), p) for p in Path(tmp).glob("cg.out.*"))
        finally:
            server.terminate()
            server.wait(60)
        # dump k (1-based) ends phase k - 1 of the order the workload marked
        # them in; the first covers start-up
        counts = [_summary(p) for _, p in marks]
    order = ["start", *(_ENQUEUE_ONLY if enqueue_batch else _phase_order())]
    per_phase: dict[str, int] = {}
    for name, count in zip(order, counts, strict=True):
        per_phase[name] = per_phase.get(name, 0) + count
    result["instructions"] = per_phase
    return result


#: The phases of ``--enqueue-batch``, in the order the workload marks them.
_ENQUEUE_ONLY = ["load", "enqueue", "enqueue_delayed"]


def _phase_order() -> list[str]:
    """The phases in the order the workload marks them (``other``: the
    waits for due times and lease expiry, and the lease recover takes back)."""
    return [
        "load", "enqueue", "lease", "renew", "settle", "enqueue_delayed", "other",
        "promote", "other", "recover",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(HERE.parent.parent), help="tree[:tree...]")
    parser.add_argument("--n", type=int, default=2000, help="jobs per phase")
    parser.add_argument(
        "--enqueue-batch",
        type=int,
        default=0,
        metavar="K",
        help="measure enqueue alone, K jobs a call (due now, and delayed)",
    )
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _workload(args.run, args.n, Path(args.out), args.enqueue_batch)
        return
    trees = [Path(t).resolve() for t in args.trees.split(":")]
    results = [measure(t, args.n, args.enqueue_batch) for t in trees]
    batch = args.enqueue_batch or BATCH
    phases = _ENQUEUE_ONLY if args.enqueue_batch else PHASES
    if args.json:
        Path(args.json).write_text(json.dumps(dict(zip(map(str, trees), results, strict=True))))
    names = [t.name[-18:] for t in trees]
    for unit in ("jobs", "calls"):
        print(
            f"Redis instructions per {unit[:-1]} inside EVALSHA (callgrind; n={args.n}, "
            f"batches of {batch})"
        )
        print(
            f"{'phase':<16}"
            + "".join(f"{n:>20}" for n in names)
            + ("  last/first" if len(trees) > 1 else "")
        )
        for phase in phases[1:]:
            figures = [r["instructions"][phase] / r[unit][phase] for r in results]
            row = f"{phase:<16}" + "".join(f"{f:>20,.0f}" for f in figures)
            if len(trees) > 1:
                row += f"  {figures[-1] / figures[0]:>10.3f}"
            print(row)
        print()
    loads = [r["instructions"]["load"] for r in results]
    print(f"{'load (all, once)':<16}" + "".join(f"{x:>20,}" for x in loads))
    print()
    print("script size as sent (bytes)")
    sizes = [r["sizes"] for r in results]
    every: set[str] = set().union(*sizes)
    for name in sorted(every):
        row = f"{name:<20}" + "".join(f"{s.get(name, 0):>16,}" for s in sizes)
        print(row)


if __name__ == "__main__":
    main()
