"""Processes of the SQLite process and fault tests, run as
``python -m tests._sqlite_child MODE ...`` (cwd: the repository root):

* ``produce sync|asyncio|trio URL OUT N``: enqueue ``N`` jobs of
  ``soak.work`` (``tests.soak_app``) into ``URL`` with a SyncProducer, an
  AsyncioProducer or a Trio App, alternating batches of ``enqueue_many``
  and single enqueues; after each batch the acknowledged job ids go to
  ``OUT``, one a line (flushed). Prints ``done`` at the end. A StoreError
  is not caught: it ends the process with a traceback (the test reads it).
* ``big URL PREFIX N``: one ``enqueue_many`` of ``N`` jobs with ids
  ``PREFIX-<i>`` (one write transaction); prints ``begin`` just before the
  call and ``done`` after it (the test kills it in between).
* ``readonly URL``: every module the store needs is loaded (one full round
  on a scratch file beside ``$CHRONOS_SCRATCH``), then, when run as root,
  the process drops to user ``nobody``; it tries an enqueue, a claim and a
  read of ``URL`` and prints one JSON line: for each, ``"ok"`` or the
  StoreError's message.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import trio

from chronos_trio import NewJob
from chronos_trio.records import StoreError
from chronos_trio.store import QueueWeight
from tests import soak_app

#: Jobs per batch; even batches go through enqueue_many, odd ones one by one.
BATCH = 20
SINGLES = 5

NOBODY = 65534


def _batches(n: int) -> list[tuple[bool, int]]:
    """(many?, size) of each batch of ``n`` jobs."""
    out: list[tuple[bool, int]] = []
    left, index = n, 0
    while left > 0:
        many = index % 2 == 0
        size = min(left, BATCH if many else SINGLES)
        out.append((many, size))
        left -= size
        index += 1
    return out


def _record(out: Path, ids: list[str]) -> None:
    with out.open("a") as f:
        f.write("".join(f"{i}\n" for i in ids))
        f.flush()


def produce_sync(url: str, out: Path, n: int) -> None:
    from chronos_trio.producers import SyncProducer

    app = soak_app.make_app(url, schedules=False)
    with SyncProducer(url, app=app) as producer:
        for many, size in _batches(n):
            payloads = [soak_app.Spec() for _ in range(size)]
            if many:
                handles = producer.enqueue_many("soak.work", payloads)
            else:
                handles = [producer.enqueue("soak.work", p) for p in payloads]
            _record(out, [h.job_id for h in handles])


def produce_asyncio(url: str, out: Path, n: int) -> None:
    from chronos_trio.producers import AsyncioProducer

    async def main() -> None:
        app = soak_app.make_app(url, schedules=False)
        async with AsyncioProducer(url, app=app) as producer:
            for many, size in _batches(n):
                payloads = [soak_app.Spec() for _ in range(size)]
                if many:
                    handles = await producer.enqueue_many("soak.work", payloads)
                else:
                    handles = list(
                        await asyncio.gather(*(producer.enqueue("soak.work", p) for p in payloads))
                    )
                _record(out, [h.job_id for h in handles])

    asyncio.run(main())


def produce_trio(url: str, out: Path, n: int) -> None:
    async def main() -> None:
        app = soak_app.make_app(url, schedules=False)
        work = app.tasks["soak.work"]
        try:
            for many, size in _batches(n):
                payloads = [soak_app.Spec() for _ in range(size)]
                if many:
                    results = await work.enqueue_many(payloads)
                    ids = [r.job_id for r in results]
                else:
                    handles = []
                    for p in payloads:
                        handles.append(await work.enqueue(p))
                    ids = [h.job_id for h in handles]
                _record(out, ids)
        finally:
            await app.aclose()

    trio.run(main)


def big(url: str, prefix: str, n: int) -> None:
    async def main() -> None:
        app = soak_app.make_app(url, schedules=False)
        work = app.tasks["soak.work"]
        await work.enqueue(soak_app.Spec())  # the file and schema exist: the next call is one write
        jobs: list[NewJob] = [
            work.new_job(soak_app.Spec(), job_id=f"{prefix}-{i}", delay=3600) for i in range(n)
        ]
        print("begin", flush=True)
        await app.enqueue_jobs(jobs)
        print("done", flush=True)
        await app.aclose()

    trio.run(main)


async def _round(url: str) -> dict[str, str]:
    """An enqueue, a claim and a read on ``url``: "ok" or the StoreError's text."""
    from chronos_trio.store.sqlite import SqliteStore

    store = SqliteStore.from_url(url)
    app = soak_app.make_app(url, schedules=False)
    job = app.tasks["soak.work"].new_job(soak_app.Spec())
    said: dict[str, str] = {}
    try:
        for name, call in (
            ("enqueue", lambda: store.enqueue_many([job])),
            (
                "lease",
                lambda: store.lease(
                    [QueueWeight("default")], 1, worker_id="ro:1:0", lease_duration=30
                ),
            ),
            ("read", lambda: store.stats(["default"])),
        ):
            try:
                await call()
                said[name] = "ok"
            except StoreError as exc:
                said[name] = str(exc)
    finally:
        await store.aclose()
        await app.aclose()
    return said


def readonly(url: str) -> None:
    scratch = Path(os.environ["CHRONOS_SCRATCH"])
    # load every module a round uses while this process can still read them
    warm = trio.run(_round, f"sqlite:///{scratch}/warm.db")
    assert all(v == "ok" for v in warm.values()), warm
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    said = trio.run(_round, url)
    print(json.dumps({"uid": os.geteuid(), **said}), flush=True)


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    if mode == "produce":
        kind, url, out, n = rest
        {"sync": produce_sync, "asyncio": produce_asyncio, "trio": produce_trio}[kind](
            url, Path(out), int(n)
        )
        print("done", flush=True)
    elif mode == "big":
        url, prefix, n = rest
        big(url, prefix, int(n))
    elif mode == "readonly":
        readonly(rest[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
