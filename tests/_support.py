"""Helpers shared by the runtime tests."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, cast

import attrs
import redis
import trio

import chronos_trio
from chronos_trio import App, JobContext, JobState, Worker
from chronos_trio.store import Store


@attrs.frozen
class Work:
    n: int
    sleep: float = 0.0
    fail_times: int = 0


class Recorder:
    """An app whose ``work`` task records every run (job id, attempt, time)."""

    def __init__(self, store: Store, **task_options: Any) -> None:
        self.app = App(store)
        self.store = store
        self.runs: list[tuple[str, int, float]] = []
        self.finished: collections.Counter[str] = collections.Counter()
        self.dead: list[chronos_trio.Job] = []
        self.running = 0
        self.peak = 0  # most handlers running at once

        @self.app.task("work", **task_options)
        async def work(args: Work, job: JobContext) -> None:
            self.runs.append((job.id, job.attempt, trio.current_time()))
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                if args.sleep:
                    await trio.sleep(args.sleep)
                if job.attempt <= args.fail_times:
                    raise ValueError(f"planned failure {job.attempt}")
            finally:
                self.running -= 1
            self.finished[job.id] += 1

        @self.app.on_dead_letter
        async def on_dead(job: chronos_trio.Job) -> None:
            self.dead.append(job)

        self.work = work

    async def states(self) -> collections.Counter[JobState]:
        [stats] = await self.store.stats(["default"])
        return collections.Counter({k: v for k, v in stats.counts.items() if v})


async def wait_for(predicate: Any, *, poll: float = 0.01, timeout: float = 60.0) -> None:
    """Until ``predicate()`` is true; fails after ``timeout`` seconds."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(poll)


def lose_lease(worker: Worker, job_id: str) -> None:
    """Mark the lease of ``job_id``, the one job ``worker`` runs, lost, as the
    heartbeater does when the store refuses a renewal.

    The one place the tests reach into the runtime (no public call loses a
    lease on demand): keep it that way, so the tests outlive a rewrite of the
    in-flight table."""
    from chronos_trio.runtime import Stage

    [entry] = worker.runtime.table.in_stage(Stage.RUNNING)
    assert entry.leased.job.id == job_id, entry.leased.job.id
    assert worker.runtime.table.mark_lost(entry)


def ready_ids(url: str) -> set[bytes]:
    """The IDs of the jobs ready in every queue of the Redis at ``url``."""
    client = redis.Redis.from_url(url)
    try:
        ids: set[bytes] = set()
        for key in client.keys("*:ready"):
            ids.update(cast("list[bytes]", client.zrange(key, 0, -1)))
        return ids
    finally:
        client.close()


@attrs.frozen
class Line:
    """One line a handler of the process tests wrote: ``what pid attempt t
    [lease_lost]`` (tests/lease_app.py, tests/isolated_app.py)."""

    what: str
    pid: int
    attempt: int
    at: float
    lease_lost: bool = False


def lines(path: Path) -> list[Line]:
    if not path.exists():
        return []
    out = []
    for text in path.read_text().splitlines():
        fields = text.split()
        if len(fields) < 4:
            continue  # being written
        what, pid, attempt, at = fields[:4]
        lost = len(fields) > 4 and fields[4] == "True"
        out.append(Line(what, int(pid), int(attempt), float(at), lost))
    return out
