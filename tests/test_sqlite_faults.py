"""SQLite faults (issue 26, "Crash safety"): kill -9 of a worker process
mid-batch and of a producer process mid-transaction, the disk full (the
file capped with ``PRAGMA max_page_count``, and a real full filesystem, a
small tmpfs), and the file read-only (opened by user ``nobody``, and
through a read-only bind mount). Each shows that nothing acknowledged is
lost, that the file stays consistent (``PRAGMA integrity_check``, and the
store's ``check`` finds nothing), and that where a user must act the error
says what is wrong. The mounts and the change of user need root: those
variants skip without it (and fail under CI=true, where the machine is
root). Every wait is bounded.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from chronos_trio import App, Job, JobContext, JobState, NewJob
from chronos_trio.cli import EXIT_OK
from chronos_trio.records import StoreError
from chronos_trio.store import QueueWeight
from chronos_trio.store.sqlite import SqliteStore
from chronos_trio.testing.redis_server import in_ci
from tests import soak_app
from tests._sqlite_procs import (
    Child,
    check_cli,
    child_env,
    count_ids,
    finished_ok,
    integrity,
    leased_by,
    overlapping,
    pending,
    runs_of,
    sqlite_file_url,
    trouble,
    wait_drained,
    wait_until,
    worker_process,
)

pytestmark = pytest.mark.sqlite

LEASE = 2.0
RECOVER_INTERVAL = 0.25


def needs_root(what: str) -> None:
    if os.geteuid() != 0:
        reason = f"{what} needs root"
        if in_ci():
            pytest.fail(f"{reason} (required under CI=true)")
        pytest.skip(reason)


async def check_finds_nothing(url: str, db: Path) -> None:
    """The file passes ``PRAGMA integrity_check`` and ``python -m chronos_trio
    check`` finds nothing in it."""
    assert integrity(db) == "ok"
    code, report, text = await check_cli(url)
    assert code == EXIT_OK, text
    assert not report.get("findings"), text


# -- kill -9 of a worker process ------------------------------------------------------------


async def test_kill_9_of_a_worker_process_mid_batch_loses_nothing(tmp_path: Path) -> None:
    """``worker --processes 2`` drains 600 jobs; one child is killed with
    SIGKILL while it holds leases (some handlers cut short). Its leases are
    recovered within a lease and a recovery round; every job then runs to
    success, the jobs it cut short elsewhere; no two runs of a job overlap
    (nothing ran on a lease already taken back); a job runs twice only when
    the victim held it at the kill; the manager restarts the child; the
    file is consistent and ``check`` finds nothing."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    runs_dir = tmp_path / "runs"
    manager = worker_process(
        url, runs_dir, tmp_path / "manager.log",
        "--concurrency", "16", "--recover-interval", str(RECOVER_INTERVAL),
        "--poll-interval", "1",
        processes=2, lease=LEASE,
    )  # fmt: skip
    producer = soak_app.make_app(url, schedules=False)
    store = producer.store
    try:
        with trio.fail_after(120):
            manager.start()
            await manager.wait_ready(2)
            victim = manager.children()[0]
            results = await producer.tasks["soak.work"].enqueue_many(
                [soak_app.Spec(sleep=0.05) for _ in range(600)]
            )
            ids = {r.job_id for r in results}
            while True:  # mid-flight: some work done, leases held by the victim
                if len(finished_ok(runs_of(runs_dir))) >= 100 and await leased_by(store, victim):
                    break
                await trio.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.time()
            held = await leased_by(store, victim)  # as the store has them after the kill
            while await leased_by(store, victim):
                await trio.sleep(0.05)
            recovered_after = time.time() - killed_at
            await wait_until(lambda: ids <= finished_ok(runs_of(runs_dir)), 60, poll=0.1)
            await wait_until(lambda: manager.children()[0] != victim, 20)
            await manager.wait_ready(2)
            await wait_drained(store, 15)
            code = await manager.terminate(30)
    finally:
        manager.close()
        await producer.aclose()
    runs = runs_of(runs_dir)
    cut_short = {job for job, rs in runs.items() for r in rs if r.pid == victim and r.end is None}
    again = {
        job
        for job in cut_short
        if any(r.pid != victim and r.start > killed_at and r.outcome == "ok" for r in runs[job])
    }
    ok_runs = collections.Counter(job for job, rs in runs.items() for r in rs if r.outcome == "ok")
    duplicates = {job for job, n in ok_runs.items() if n > 1}
    print(
        f"\n600 jobs; kill -9 of pid {victim} holding {len(held)} lease(s), "
        f"{len(cut_short)} handler(s) cut short; leases recovered after "
        f"{recovered_after:.2f}s; jobs run to success twice: {len(duplicates)}"
    )
    assert set(runs) == ids
    assert cut_short, "the victim was killed while running handlers"
    assert again == cut_short, "every handler cut short ran again elsewhere, after the kill"
    assert not overlapping(runs, {victim: killed_at})
    assert duplicates <= set(held), "a job ran twice only if the victim held it"
    assert recovered_after <= LEASE + RECOVER_INTERVAL + 1.5
    assert code == EXIT_OK
    log = manager.log_path.read_text(errors="replace")
    assert "restarting worker process" in log
    assert not trouble([("manager", log)]), trouble([("manager", log)])[:10]
    await check_finds_nothing(url, db)


#: Jobs enqueued before each round of the write-lock kill test (the last
#: worker's round needs fewer: it is not killed).
ROUND_JOBS = (130, 130, 130, 10)


async def test_kill_9_of_a_worker_process_inside_its_write_transaction(tmp_path: Path) -> None:
    """A single worker process (the file's only writer) is killed with
    SIGKILL while it holds the file's write lock (inside a claim, a renewal
    or a settle), three times, a new one started each time: the lock is let
    go with the process, nothing it half-wrote is seen, every job runs to
    success, no two runs of a job overlap, and ``check`` finds nothing."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    runs_dir = tmp_path / "runs"
    producer = soak_app.make_app(url, schedules=False)
    store = producer.store
    options = ("--concurrency", "16", "--recover-interval", str(RECOVER_INTERVAL))
    workers = []
    killed: dict[int, float] = {}
    inside = 0
    try:
        with trio.fail_after(120):
            ids: set[str] = set()
            for round_ in range(4):
                # Each round's worker finds fresh jobs: on a loaded machine the
                # one before may run every job it can see before the lock probe
                # catches it inside a write, and a round with nothing to run
                # could never see 30 more finish.
                results = await producer.tasks["soak.work"].enqueue_many(
                    [soak_app.Spec(sleep=0.01) for _ in range(ROUND_JOBS[round_])]
                )
                ids |= {r.job_id for r in results}
                log = tmp_path / f"worker{round_}.log"
                worker = worker_process(url, runs_dir, log, *options, lease=LEASE)
                workers.append(worker)
                worker.start()
                await worker.wait_ready()
                if round_ == 3:
                    break
                target = len(finished_ok(runs_of(runs_dir))) + 30
                await wait_until(lambda: len(finished_ok(runs_of(runs_dir))) >= target, 30)  # noqa: B023
                while not await trio.to_thread.run_sync(lock_held, db):
                    await trio.sleep(0.001)
                assert worker.proc is not None
                worker.proc.send_signal(signal.SIGKILL)
                killed[worker.proc.pid] = time.time()
                await trio.to_thread.run_sync(worker.proc.wait)
                inside += 1
            await wait_until(lambda: ids <= finished_ok(runs_of(runs_dir)), 60, poll=0.1)
            await wait_drained(store, 15)
            code = await workers[-1].terminate(30)
    finally:
        for worker in workers:
            worker.close()
        await producer.aclose()
    runs = runs_of(runs_dir)
    again = collections.Counter(job for job, rs in runs.items() for r in rs if r.outcome == "ok")
    print(
        f"\n{len(ids)} jobs; {inside} kill -9s of the worker process while it held the write lock; "
        f"jobs run to success twice: {sum(1 for n in again.values() if n > 1)}"
    )
    assert set(runs) == ids
    assert not overlapping(runs, killed)
    assert code == EXIT_OK
    assert not trouble([("last worker", workers[-1].log_path.read_text(errors="replace"))])
    await check_finds_nothing(url, db)


# -- kill -9 of a producer process ----------------------------------------------------------

#: Jobs in the producer's one big enqueue_many (one write transaction).
BIG = 10_000


def lock_held(path: Path) -> bool:
    """Whether another connection holds the file's write lock now: a
    ``BEGIN IMMEDIATE`` that may not wait fails (taken, it is let go at once)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return True
        raise
    else:
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


async def test_kill_9_of_a_producer_mid_transaction_stores_all_or_none(tmp_path: Path) -> None:
    """A producer process's ``enqueue_many`` of 10,000 jobs is one write
    transaction: killed with SIGKILL while it holds the file's write lock
    (at once, and 50 ms and 200 ms later), none of its jobs or all of them
    are stored, never a part; the jobs stored before are all there; the file
    passes ``PRAGMA integrity_check`` and ``check`` finds nothing; the store
    works on (a last producer's batch, not killed, is stored whole)."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    app = soak_app.make_app(url, schedules=False)
    work = app.tasks["soak.work"]
    before = await app.enqueue_jobs(
        [work.new_job(soak_app.Spec(), job_id=f"before-{i}", delay=3600) for i in range(200)]
    )
    assert all(r.created for r in before)
    outcomes: list[tuple[str, float | None, int, float]] = []
    env = child_env(url, tmp_path / "runs")
    try:
        with trio.fail_after(180):
            for round_, delay in enumerate((0.0, 0.05, 0.2, None)):
                prefix = f"big{round_}"
                child = Child("big", url, prefix, str(BIG), env=env, piped=True)
                try:
                    assert await child.readline() == "begin"
                    began = time.monotonic()
                    if delay is None:
                        assert await child.readline() == "done"
                        assert await child.wait() == 0
                    else:
                        while not await trio.to_thread.run_sync(lock_held, db):
                            assert child.proc.poll() is None, "finished before the lock was seen"
                            await trio.sleep(0.001)
                        await trio.sleep(delay)
                        child.proc.send_signal(signal.SIGKILL)
                        await child.wait()
                    held_for = time.monotonic() - began
                finally:
                    child.kill()
                stored = await trio.to_thread.run_sync(count_ids, db, f"{prefix}-%")
                outcomes.append((prefix, delay, stored, held_for))
    finally:
        await app.aclose()
    print(
        f"\nkill -9 of a producer in its enqueue of {BIG} jobs: "
        + "; ".join(
            f"{p}: {'not killed' if d is None else f'killed {d * 1000:.0f} ms into the lock'}"
            f" -> {n} stored ({s:.2f}s after 'begin')"
            for p, d, n, s in outcomes
        )
    )
    for prefix, _, stored, _ in outcomes:
        assert stored in (0, BIG), f"{prefix}: {stored} of {BIG} stored"
    assert outcomes[-1][2] == BIG
    assert any(n == 0 for _, d, n, _ in outcomes if d is not None), "a kill came mid-transaction"
    assert count_ids(db, "before-%") == 200
    await check_finds_nothing(url, db)


# -- the disk full --------------------------------------------------------------------------


def make_app(url: str) -> tuple[App, Any, collections.Counter[str]]:
    """An app on ``url`` whose ``work`` task counts its runs by job id."""
    ran: collections.Counter[str] = collections.Counter()
    app = App(url)

    @app.task("work", max_retries=3)
    async def work(n: int, job: JobContext) -> None:
        ran[job.id] += 1

    return app, work, ran


async def cap_pages(store: SqliteStore, extra: int | None) -> int:
    """``PRAGMA max_page_count`` on the store's writer connection (the only
    one that writes; the setting lives per connection): the file's current
    size in pages + ``extra``, or no cap (None). The cap set."""

    def work(conn: sqlite3.Connection) -> int:
        if extra is None:
            return int(conn.execute("PRAGMA max_page_count = 4294967294").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        return int(conn.execute(f"PRAGMA max_page_count = {pages + extra}").fetchone()[0])

    return await store._db.write(work, what="test: max_page_count", wake=False)


async def fill_until_refused(
    app: App, work: Any, stored: set[str], batch: int = 200, tries: int = 500
) -> tuple[list[NewJob], StoreError]:
    """Enqueue batches until the store refuses one; that batch and the
    error. Every acknowledged job joins ``stored``."""
    for i in range(tries):
        jobs = work.new_jobs([i * batch + k for k in range(batch)])
        try:
            results = await app.enqueue_jobs(jobs)
        except StoreError as exc:
            return jobs, exc
        stored.update(r.job_id for r in results)
    pytest.fail(f"no enqueue was refused after {tries} batches")


async def assert_stored(store: SqliteStore, ids: set[str], refused: list[NewJob]) -> None:
    """Every job of ``ids`` is stored and ready; none of ``refused`` is."""
    [stats] = await store.stats(["default"])
    assert stats.counts.get(JobState.READY, 0) == len(ids), stats.counts
    for job in refused:
        assert await store.get_job(job.id) is None, "a refused batch stored nothing"
    ready = await store.list_jobs("default", JobState.READY, limit=len(ids) + 10)
    assert {j.id for j in ready} == ids


async def drain(app: App, ran: collections.Counter[str], ids: set[str]) -> None:
    async with app.open_worker(concurrency=16, poll_interval=0.5):
        await wait_until(lambda: set(ran) >= ids, 30)
        while await pending(app.store):
            await trio.sleep(0.05)
    assert set(ran) == ids and set(ran.values()) == {1}, "each job ran once"


async def test_a_full_database_refuses_enqueue_clearly_and_loses_nothing(tmp_path: Path) -> None:
    """The file may not grow (``PRAGMA max_page_count`` on the store's
    writer, as a full disk or a quota would have it): an enqueue that needs
    new pages raises a StoreError that says the disk is full and that
    nothing of it was stored, and stores none of its jobs; every job
    acknowledged before is stored. Once it may grow again, the same batch is
    accepted, a worker runs every job once, and the file is consistent."""
    db = tmp_path / "jobs.db"
    url = sqlite_file_url(db)
    app, work, ran = make_app(url)
    store = app.store
    assert isinstance(store, SqliteStore)
    stored: set[str] = set()
    with trio.fail_after(60):
        stored |= {r.job_id for r in await app.enqueue_jobs(work.new_jobs(list(range(300))))}
        cap = await cap_pages(store, 8)
        refused, error = await fill_until_refused(app, work, stored)
        message = str(error)
        await assert_stored(store, stored, refused)
        assert integrity(db) == "ok"
        await cap_pages(store, None)
        accepted = await app.enqueue_jobs(refused)
        assert all(r.created for r in accepted)
        stored |= {r.job_id for r in accepted}
        await drain(app, ran, stored)
    await app.aclose()
    print(f"\ncapped at {cap} pages; {len(stored)} jobs stored; the refused enqueue: {message}")
    assert "disk is full" in message and "nothing of this was stored" in message, message
    assert "database or disk is full" in message, message
    await check_finds_nothing(url, db)


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MB tmpfs in a temporary directory, unmounted afterwards; skipped
    when it cannot be mounted (and failed under CI=true)."""
    needs_root("mounting a tmpfs")
    directory = Path(tempfile.mkdtemp(prefix="chronos-full-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(directory)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        directory.rmdir()
        reason = f"mount -t tmpfs failed: {done.stderr.strip()}"
        if in_ci():
            pytest.fail(f"{reason} (required under CI=true)")
        pytest.skip(reason)
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def fill_disk(directory: Path, leave: int) -> Path:
    """A filler file taking all of ``directory``'s filesystem but ``leave`` bytes."""
    filler = directory / "filler"
    free = shutil.disk_usage(directory).free
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


async def test_a_full_disk_refuses_enqueue_clearly_and_loses_nothing(small_disk: Path) -> None:
    """The file's filesystem (a 2 MB tmpfs) fills up: an enqueue raises a
    StoreError that says the disk is full, and stores none of its jobs;
    every job acknowledged before is stored, also when the file is opened
    anew. Once space is freed the same batch is accepted, a worker runs
    every job once, and the file is consistent."""
    db = small_disk / "jobs.db"
    url = sqlite_file_url(db)
    app, work, ran = make_app(url)
    store = app.store
    assert isinstance(store, SqliteStore)
    stored: set[str] = set()
    with trio.fail_after(60):
        stored |= {r.job_id for r in await app.enqueue_jobs(work.new_jobs(list(range(100))))}
        filler = fill_disk(small_disk, 256 * 1024)
        refused, error = await fill_until_refused(app, work, stored, batch=100)
        message = str(error)
        await assert_stored(store, stored, refused)
        await app.aclose()
        again = SqliteStore.from_url(url)  # opened anew, the disk still full
        try:
            await assert_stored(again, stored, refused)
        finally:
            await again.aclose()
        assert integrity(db) == "ok"
        filler.unlink()
        app, work, ran = make_app(url)
        accepted = await app.enqueue_jobs(refused)
        assert all(r.created for r in accepted)
        stored |= {r.job_id for r in accepted}
        await drain(app, ran, stored)
        await app.aclose()
    print(f"\n{len(stored)} jobs stored; the refused enqueue said: {message}")
    assert "disk is full" in message and "nothing of this was stored" in message, message
    await check_finds_nothing(url, db)


# -- the file read-only ---------------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory user ``nobody`` may read (pytest's are root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="chronos-ro-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def stored_jobs(url: str, count: int) -> dict[str, Job]:
    """Enqueue ``count`` ready jobs and 10 scheduled ones; every record as stored."""
    app = soak_app.make_app(url, schedules=False)
    work = app.tasks["soak.work"]
    try:
        ready = await work.enqueue_many([soak_app.Spec() for _ in range(count)])
        later = await work.enqueue_many([soak_app.Spec() for _ in range(10)], delay=3600)
        records: dict[str, Job] = {}
        for r in [*ready, *later]:
            job = await app.store.get_job(r.job_id)
            assert job is not None
            records[job.id] = job
        return records
    finally:
        await app.aclose()


async def records_now(url: str, ids: list[str]) -> dict[str, Job | None]:
    store = SqliteStore.from_url(url)
    try:
        return {i: await store.get_job(i) for i in ids}
    finally:
        await store.aclose()


@contextlib.contextmanager
def held_open(db: Path) -> Iterator[None]:
    """A connection of this (root) process reading the file, so its -wal and
    -shm files exist (as while any writer process runs), readable by all."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM jobs").fetchone()
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").chmod(0o644)
        yield
    finally:
        conn.close()


@pytest.mark.parametrize("open_elsewhere", [False, True], ids=["alone", "open-elsewhere"])
async def test_a_file_another_user_owns_refuses_writes_clearly_and_keeps_its_jobs(
    shared_dir: Path, tmp_path: Path, open_elsewhere: bool
) -> None:
    """The file (0644) and its directory (0755) belong to root; a process
    of user ``nobody`` opens it. Its enqueue and its claim raise a
    StoreError that says the file is read-only and that nothing was stored;
    its read works when the file is open in another process (its -wal and
    -shm files exist), else it too says read-only. The jobs stored before
    are all there, unchanged, the file consistent."""
    needs_root("opening the file as user nobody")
    db = shared_dir / "jobs.db"
    url = sqlite_file_url(db)
    before = await stored_jobs(url, 50)
    db.chmod(0o644)
    env = {**child_env(url, tmp_path / "runs"), "CHRONOS_SCRATCH": str(tmp_path)}
    with contextlib.ExitStack() as stack:
        if open_elsewhere:
            stack.enter_context(held_open(db))
        child = Child("readonly", url, env=env, out=tmp_path / "readonly.log")
        with trio.fail_after(60):
            code = await child.wait()
    output = child.output()
    assert code == 0, output
    said = json.loads(output.strip().splitlines()[-1])
    print(f"\nas user nobody ({'open elsewhere' if open_elsewhere else 'alone'}): {said}")
    assert said["uid"] == 65534
    for op in ("enqueue", "lease"):
        assert "read-only" in said[op] and "nothing of this was stored" in said[op], said[op]
    if open_elsewhere:
        assert said["read"] == "ok"
    else:
        assert "read-only" in said["read"], said["read"]
    assert await records_now(url, list(before)) == before
    await check_finds_nothing(url, db)


@pytest.fixture
def read_only_view(shared_dir: Path) -> Iterator[Path]:
    """``shared_dir`` bind-mounted read-only at another path; skipped when it
    cannot be mounted (failed under CI=true)."""
    needs_root("a read-only bind mount")
    view = Path(tempfile.mkdtemp(prefix="chronos-ro-view-"))
    steps = (
        ["mount", "--bind", str(shared_dir), str(view)],
        ["mount", "-o", "remount,bind,ro", str(view)],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            subprocess.run(["umount", str(view)], capture_output=True)
            view.rmdir()
            reason = f"{' '.join(step[:3])} failed: {done.stderr.strip()}"
            if in_ci():
                pytest.fail(f"{reason} (required under CI=true)")
            pytest.skip(reason)
    try:
        yield view
    finally:
        if subprocess.run(["umount", str(view)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(view)], capture_output=True)
        view.rmdir()


async def test_a_read_only_mount_refuses_writes_clearly_and_keeps_its_jobs(
    shared_dir: Path, read_only_view: Path
) -> None:
    """The file seen through a read-only bind mount while a writer has it
    open at its real path: an enqueue and a claim through the mount raise a
    StoreError that says read-only and that nothing was stored; reads
    through the mount work; the jobs stored before are all there, unchanged,
    and the writer's store works on."""
    db = shared_dir / "jobs.db"
    url = sqlite_file_url(db)
    before = await stored_jobs(url, 50)
    view_url = sqlite_file_url(read_only_view / "jobs.db")
    writer = SqliteStore.from_url(url)
    viewer = SqliteStore.from_url(view_url)
    app = soak_app.make_app(view_url, schedules=False)
    job = app.tasks["soak.work"].new_job(soak_app.Spec())
    try:
        with trio.fail_after(30):
            assert await writer.get_job(next(iter(before))) is not None  # open at its real path
            with pytest.raises(StoreError) as enqueue:
                await viewer.enqueue_many([job])
            with pytest.raises(StoreError) as claim:
                await viewer.lease(
                    [QueueWeight("default")], 10, worker_id="view:1:0", lease_duration=30
                )
            seen = {i: await viewer.get_job(i) for i in before}
            assert await writer.enqueue_many([job])  # the writer's store works on
    finally:
        await viewer.aclose()
        await writer.aclose()
        await app.aclose()
    print(f"\nthrough a read-only mount: enqueue: {enqueue.value}; claim: {claim.value}")
    for raised in (enqueue, claim):
        message = str(raised.value)
        assert "read-only" in message and "nothing of this was stored" in message, message
    assert seen == before
    now = await records_now(url, [*before, job.id])
    assert {i: now[i] for i in before} == before
    assert now[job.id] is not None
    await check_finds_nothing(url, db)


async def test_a_read_only_file_system_is_named_when_nobody_has_the_file_open(
    shared_dir: Path, read_only_view: Path
) -> None:
    """Through a read-only mount with no process holding the file open,
    SQLite cannot even open it ("unable to open database file"): the
    StoreError says the file system is read-only, and the jobs are intact."""
    db = shared_dir / "jobs.db"
    url = sqlite_file_url(db)
    before = await stored_jobs(url, 5)
    viewer = SqliteStore.from_url(sqlite_file_url(read_only_view / "jobs.db"))
    try:
        with trio.fail_after(30), pytest.raises(StoreError) as raised:
            await viewer.get_job(next(iter(before)))
    finally:
        await viewer.aclose()
    assert "read-only file system" in str(raised.value), raised.value
    now = await records_now(url, list(before))
    assert now == before
