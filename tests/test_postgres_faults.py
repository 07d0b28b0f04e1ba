"""PostgreSQL faults: the server killed with SIGKILL mid-drain and started
again, backends terminated under a worker and a producer, a statement
timeout, the database read-only, the disk full, and a stale settle after
recovery. Each shows that nothing acknowledged is lost, that no job runs
twice at once (fencing holds), and that where a user must act the error
says what to do.

Tests that kill or restart the server, or change its settings, use a
cluster of their own (``own_postgres``); every wait is bounded.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import pwd
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import psycopg
import pytest
import trio

from chronos_trio import App, JobContext, JobState, NewJob, RetryPolicy
from chronos_trio.records import StoreError
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from chronos_trio.store.postgres import PostgresStore
from chronos_trio.testing.postgres_server import PostgresServer
from chronos_trio.testing.redis_server import in_ci

pytestmark = pytest.mark.postgres

_schemas = itertools.count()


@attrs.frozen
class Item:
    n: int
    sleep: float = 0.0


class Ledger:
    """Every handler run of the ``work`` task: how many ran each job, which
    started while another run of the same job was still going (fencing
    broken), and when each job first started."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.runs: collections.Counter[str] = collections.Counter()
        self.done: collections.Counter[str] = collections.Counter()
        self.overlaps: list[str] = []
        self.first_start: dict[str, float] = {}

    @contextlib.contextmanager
    def run(self, job_id: str) -> Iterator[None]:
        if job_id in self.running:
            self.overlaps.append(job_id)
        self.running.add(job_id)
        self.runs[job_id] += 1
        self.first_start.setdefault(job_id, trio.current_time())
        try:
            yield
        finally:
            self.running.discard(job_id)
        self.done[job_id] += 1


FAST_RETRY = RetryPolicy(base=0.1, factor=2.0, max_delay=1.0)


def make_app(url: str, ledger: Ledger | None = None) -> tuple[App, Any]:
    """An app on ``url`` with the ``work`` task (recorded in ``ledger``)."""
    app = App(url)

    @app.task("work", max_retries=30, retry=FAST_RETRY)
    async def work(item: Item, job: JobContext) -> None:
        assert ledger is not None, "a producer's app runs no handler"
        with ledger.run(job.id):
            if item.sleep:
                await trio.sleep(item.sleep)

    return app, work


async def enqueue_acknowledged(
    app: App, jobs: Sequence[NewJob], errors: list[str] | None = None
) -> set[str]:
    """Send ``jobs`` until the store acknowledges them (the same IDs each
    time, so a try that failed after storing them creates nothing twice);
    the IDs acknowledged. Each StoreError met is added to ``errors``."""
    while True:
        try:
            results = await app.enqueue_jobs(jobs)
        except StoreError as exc:
            if errors is not None:
                errors.append(str(exc))
            await trio.sleep(0.1)
            continue
        return {r.job_id for r in results}


def schema_url(base: str, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": f"f{next(_schemas)}", **options}.items())
    return f"{base}?{query}"


async def admin_sql(url: str, query: str, params: Any = None) -> list[Any]:
    """Run one statement on a connection of its own (autocommit), in a thread."""

    def work() -> list[Any]:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(work)


async def terminate_others(url: str, schema: str | None = None) -> int:
    """pg_terminate_backend of every other backend of the database; how many."""
    rows = await admin_sql(
        url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'",
    )
    return int(rows[0][0])


async def listen_backends(url: str) -> set[int]:
    """PIDs of the backends whose last statement was a LISTEN."""
    rows = await admin_sql(
        url,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN %%'",
    )
    return {int(r[0]) for r in rows}


async def wait_until(predicate: Any, timeout: float, poll: float = 0.02) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(poll)


async def pending(store: Any, queue: str = "default") -> int:
    [stats] = await store.stats([queue])
    return sum(
        stats.counts.get(s, 0)
        for s in (JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT)
    )


# -- kill -9 of the server ---------------------------------------------------------------


async def test_kill_9_of_the_server_mid_drain(own_postgres: PostgresServer) -> None:
    """The server dies (SIGKILL of the postmaster and every backend) while a
    worker drains; enqueues fail with a StoreError while it is down and are
    retried; it comes back on the same data. Every job acknowledged before,
    during and after the outage runs to success, none twice at once, and
    the queue ends empty."""
    url = schema_url(own_postgres.url, statement_timeout=3)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    errors: list[str] = []
    with trio.fail_after(60):
        before = work.new_jobs([Item(i, sleep=0.1) for i in range(300)])
        acknowledged = await enqueue_acknowledged(producer, before)
        async with worker_app.open_worker(
            concurrency=16, lease_duration=3.0, recover_interval=0.5, poll_interval=1.0
        ):
            await wait_until(lambda: sum(ledger.done.values()) >= 40, 20)
            own_postgres.kill()
            at_kill = sum(ledger.done.values())
            down = work.new_jobs([Item(1000 + i) for i in range(20)])
            t0 = trio.current_time()
            with trio.fail_after(15):
                with pytest.raises(StoreError, match="PostgreSQL") as raised:
                    await producer.enqueue_jobs(down)
            refused_after = trio.current_time() - t0
            await trio.sleep(1.0)
            await trio.to_thread.run_sync(own_postgres.restart)
            acknowledged |= await enqueue_acknowledged(producer, down, errors)
            after = work.new_jobs([Item(2000 + i) for i in range(50)])
            acknowledged |= await enqueue_acknowledged(producer, after, errors)
            t1 = trio.current_time()
            await wait_until(lambda: acknowledged <= set(ledger.done), 40, poll=0.05)
            drained_after = trio.current_time() - t1
            await wait_until_drained(producer.store, 10)
    print(
        f"\n{at_kill} jobs done at the kill; an enqueue while down failed after"
        f" {refused_after:.1f}s: {raised.value}; retried enqueues {len(errors)};"
        f" the rest done {drained_after:.1f}s after the restart"
    )
    assert at_kill < 250, "the outage came mid-drain"
    assert len(acknowledged) == 370
    assert not ledger.overlaps, ledger.overlaps
    assert set(ledger.runs) == acknowledged  # nothing unknown ran
    await worker_app.aclose()
    await producer.aclose()


async def wait_until_drained(store: Any, timeout: float) -> None:
    with trio.fail_after(timeout):
        while await pending(store):
            await trio.sleep(0.1)


# -- pg_terminate_backend ------------------------------------------------------------------


async def pickup(app: App, work: Any, ledger: Ledger, n: int, timeout: float) -> float:
    """Seconds from one job's enqueue (the call) to its handler's start."""
    [job] = work.new_jobs([Item(n)])
    enqueued = trio.current_time()
    await enqueue_acknowledged(app, [job])
    await wait_until(lambda: job.id in ledger.first_start, timeout, poll=0.002)
    return ledger.first_start[job.id] - enqueued


async def test_terminated_backends_under_a_worker_and_a_producer(
    postgres_url: str,
) -> None:
    """pg_terminate_backend of every connection of a draining worker (its
    pool and its LISTEN connection) and of a producer, three times: the
    worker reconnects and finishes every job, none twice at once; the
    producer's enqueues are retried and none is lost. Then, idle, its LISTEN
    connection is terminated again: a job enqueued at once is still picked
    up (by the fallback poll at the latest), a new LISTEN connection is
    opened, and once the worker waits on it wake-ups arrive promptly again
    (well under the 5 s poll)."""
    url = schema_url(postgres_url)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    errors: list[str] = []
    terminated = 0
    with trio.fail_after(60):
        acknowledged = await enqueue_acknowledged(
            producer, work.new_jobs([Item(i, sleep=0.05) for i in range(200)])
        )
        async with worker_app.open_worker(concurrency=8, lease_duration=3.0, recover_interval=0.5):
            await wait_until(lambda: sum(ledger.done.values()) >= 20, 20)
            for round_ in range(3):
                terminated += await terminate_others(postgres_url)
                batch = work.new_jobs([Item(1000 * (round_ + 1) + i) for i in range(30)])
                acknowledged |= await enqueue_acknowledged(producer, batch, errors)
                await trio.sleep(0.3)
            await wait_until(lambda: acknowledged <= set(ledger.done), 30, poll=0.05)
            await wait_until_drained(producer.store, 10)
            drained = sum(ledger.done.values())
            assert ledger.overlaps == []
            # idle now; the LISTEN connection is up again (or comes up at
            # the next wait): wake-ups are prompt
            await wait_until_async(lambda: listen_backends(postgres_url), 10)
            listening = await listen_backends(postgres_url)
            # a wait begun while the connection was gone is a plain sleep of
            # up to the fallback poll: the first pickup may wait for its end
            await pickup(producer, work, ledger, 8999, 12)
            prompt_before = [await pickup(producer, work, ledger, 9000 + i, 5) for i in range(3)]
            # the LISTEN connection (and every other) terminated while idle
            killed = trio.current_time()
            terminated += await terminate_others(postgres_url)
            after_kill = await pickup(producer, work, ledger, 9100, 12)
            await wait_until_async(lambda: _new_listener(postgres_url, listening), 15)
            relistened = trio.current_time() - killed
            first_after = await pickup(producer, work, ledger, 9150, 12)
            prompt_after = [await pickup(producer, work, ledger, 9200 + i, 5) for i in range(3)]
    print(
        f"\nterminated {terminated} backends; enqueue errors {len(errors)};"
        f" pickup before {fmt(prompt_before)}, right after the kill {after_kill:.3f}s;"
        f" LISTEN again {relistened:.1f}s after the kill; pickup then {first_after:.3f}s,"
        f" and after that {fmt(prompt_after)}"
    )
    assert terminated >= 6  # the worker's pool + LISTEN and the producer's, each time
    assert drained >= len(acknowledged)
    assert set(ledger.runs) >= acknowledged
    assert not ledger.overlaps, ledger.overlaps
    assert max(prompt_before) < 1.0 and max(prompt_after) < 1.0
    # the fallback poll (5 s) while the connection is gone
    assert after_kill < 10.0 and first_after < 10.0
    await worker_app.aclose()
    await producer.aclose()


def fmt(seconds: Sequence[float]) -> str:
    return "/".join(f"{s * 1000:.0f}" for s in seconds) + " ms"


async def _new_listener(url: str, old: set[int]) -> bool:
    now = await listen_backends(url)
    return bool(now - old)


async def wait_until_async(predicate: Any, timeout: float, poll: float = 0.05) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(poll)


# -- statement timeout --------------------------------------------------------------------


class RowLock:
    """A transaction of the test's own holding ``FOR UPDATE`` on one job row
    (what a long report query or a stuck session does to the store)."""

    def __init__(self, url: str, schema: str, job_id: str) -> None:
        self._url = url
        self._query = f'SELECT id FROM "{schema}".jobs WHERE id = %s FOR UPDATE'
        self._job_id = job_id
        self._conn: psycopg.Connection[Any] | None = None

    async def __aenter__(self) -> RowLock:
        def take() -> psycopg.Connection[Any]:
            conn = psycopg.connect(self._url, connect_timeout=5)
            rows = conn.execute(self._query, (self._job_id,)).fetchall()
            assert rows == [(self._job_id,)], rows
            return conn

        self._conn = await trio.to_thread.run_sync(take)
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await trio.to_thread.run_sync(conn.close)  # rolls back: the lock is gone


async def test_a_statement_timeout_is_a_store_error_and_changes_nothing(
    postgres_url: str,
) -> None:
    """A job row locked by another transaction for longer than the store's
    ``statement_timeout`` (1 s here): the settle and the renew of its lease
    fail with a StoreError that names the timeout, after about the timeout,
    and change nothing (the lease still held, its token the same). Once the
    lock is gone the same settle is applied, and a repeat of it is refused
    (fenced)."""
    url = schema_url(postgres_url, statement_timeout=1)
    store = PostgresStore.from_url(url)
    with trio.fail_after(20):
        await store.enqueue_many([NewJob(id="x", queue="q", kind="k", payload=b"{}")])
        [leased] = (await store.lease([QueueWeight("q")], 1, worker_id="a", lease_duration=10)).jobs
        done = Settlement(leased.ref, SettleKind.SUCCEEDED)
        async with RowLock(postgres_url, store.schema, "x"):
            for call in (store.settle([done]), store.renew([leased.ref], 10)):
                started = trio.current_time()
                with pytest.raises(StoreError, match="statement_timeout") as raised:
                    await call
                assert "canceling statement due to statement timeout" in str(raised.value)
                assert 0.9 < trio.current_time() - started < 5
            held = await store.get_job("x")
            assert held is not None and held.state is JobState.LEASED
            assert held.lease_owner == "a" and held.lease_token == leased.token
        assert (await store.settle([done])).settled == (True,)
        assert (await store.settle([done])).settled == (False,)  # applied once
        assert await store.get_job("x") is None  # succeeded, nothing keeps it
    await store.aclose()


async def test_a_worker_rides_out_statement_timeouts(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker (statement_timeout=1) whose job row stays locked by another
    transaction for 3 s while its handler finishes: its settle times out,
    is logged naming the timeout and retried, and is applied once the lock
    is gone; the job ran once. Jobs enqueued meanwhile run too (their
    settles may wait behind the blocked one: the completer retries one
    batch at a time) and each succeeds once; nothing is lost."""
    caplog.set_level(logging.WARNING, logger="chronos_trio")
    url = schema_url(postgres_url, statement_timeout=1)
    ledger = Ledger()
    worker_app, work = make_app(url, ledger)
    release = trio.Event()
    blocked_started = trio.Event()

    @worker_app.task("blocked", max_retries=5, retry=FAST_RETRY)
    async def blocked(item: Item, job: JobContext) -> None:
        with ledger.run(job.id):
            blocked_started.set()
            await release.wait()

    schema = PostgresStore.from_url(url).schema
    with trio.fail_after(30):
        handle = await blocked.enqueue(Item(0))
        async with worker_app.open_worker(
            concurrency=8, lease_duration=10.0, recover_interval=0.5
        ) as worker:
            await blocked_started.wait()
            async with RowLock(postgres_url, schema, handle.job_id):
                release.set()  # the handler ends; its settle waits for the row
                others = await enqueue_acknowledged(
                    worker_app, work.new_jobs([Item(i) for i in range(50)])
                )
                await wait_until(lambda: others <= set(ledger.done), 10)
                await trio.sleep(3.0)
                # not settled while the row is locked: still leased to this worker
                held = await worker_app.store.get_job(handle.job_id)
                assert held is not None and held.state is JobState.LEASED
                assert held.lease_owner == worker.id
                assert worker.statistics().succeeded < 51
            await wait_until(lambda: worker.statistics().succeeded == 51, 10)
            await wait_until_drained(worker_app.store, 10)
    timeouts = [r for r in caplog.records if "statement_timeout" in r.getMessage()]
    assert timeouts, [r.getMessage() for r in caplog.records]
    assert "completer failed; retrying" in timeouts[0].getMessage()
    assert ledger.runs[handle.job_id] == 1 and ledger.done[handle.job_id] == 1
    assert not ledger.overlaps
    await worker_app.aclose()


# -- read-only ----------------------------------------------------------------------------


async def set_read_only(server: PostgresServer, on: bool) -> None:
    """``default_transaction_read_only`` for the whole cluster (ALTER SYSTEM
    and a reload: sessions already open take it at their next statement)."""

    def work() -> None:
        with psycopg.connect(server.url_for("postgres"), autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            if on:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")

    await trio.to_thread.run_sync(work)
    await trio.sleep(0.5)  # the backends take the reload's signal


async def first_refusal(app: App, work: Any, stored: set[str], due: float) -> str:
    """Enqueue one job at a time, due at ``due``, until the store refuses
    one; the refusal. A session that was idle when the reload came takes
    the new setting after its next statement, so an enqueue may still be
    stored: it joins ``stored`` (and must be kept and run like the others)."""
    for n in range(5):
        delay = max(0.01, due - trio.current_time())
        try:
            results = await app.enqueue_jobs(work.new_jobs([Item(200 + n)], delay=delay))
        except StoreError as exc:
            return str(exc)
        stored.update(r.job_id for r in results)
    pytest.fail("no enqueue was refused")


async def test_a_read_only_database_refuses_enqueue_clearly_and_keeps_its_jobs(
    own_postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The cluster turns read-only (as a demoted primary or an operator's
    ``default_transaction_read_only`` would) under a running worker: an
    enqueue raises a StoreError that says the database is read-only; the
    worker's claims fail and are retried; the jobs already stored stay, due
    ones unrun. Turned back, the same connections work again: every job
    runs once and nothing is lost."""
    caplog.set_level(logging.WARNING, logger="chronos_trio")
    url = schema_url(own_postgres.url)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    with trio.fail_after(40):
        first = await enqueue_acknowledged(producer, work.new_jobs([Item(i) for i in range(20)]))
        async with worker_app.open_worker(concurrency=8, lease_duration=3.0, poll_interval=0.5):
            await wait_until(lambda: first <= set(ledger.done), 10)
            stored = await enqueue_acknowledged(
                producer, work.new_jobs([Item(100 + i) for i in range(30)], delay=2.5)
            )
            due = trio.current_time() + 2.5
            await set_read_only(own_postgres, True)
            try:
                refusal = await first_refusal(producer, work, stored, due)
                assert "the database is read-only" in refusal, refusal
                assert trio.current_time() < due, "too slow: the delayed jobs came due first"
                await trio.sleep(due + 1.0 - trio.current_time())  # they come due meanwhile
                [stats] = await producer.store.stats(["default"])
                waiting = stats.counts.get(JobState.SCHEDULED, 0) + stats.counts.get(
                    JobState.READY, 0
                )
                assert waiting == len(stored), stats.counts
                assert not (stored & set(ledger.runs)), "nothing could be claimed"
            finally:
                await set_read_only(own_postgres, False)
            later = await enqueue_acknowledged(
                producer, work.new_jobs([Item(300 + i) for i in range(10)])
            )
            await wait_until(lambda: (stored | later) <= set(ledger.done), 15)
            await wait_until_drained(producer.store, 10)
    assert all(n == 1 for n in ledger.runs.values()), ledger.runs
    assert set(ledger.runs) == first | stored | later
    refused = {
        r.getMessage().split(";")[0] for r in caplog.records if "read-only" in r.getMessage()
    }
    print(f"\nworker operations refused while read-only: {sorted(refused)}")
    assert "leaser failed" in refused
    await worker_app.aclose()
    await producer.aclose()


# -- disk full ----------------------------------------------------------------------------

#: The small disk's size: the store's tables and a filler table share it.
SMALL_DISK_MB = 24


@pytest.fixture
def small_disk(own_postgres: PostgresServer) -> Iterator[str]:
    """A tmpfs of :data:`SMALL_DISK_MB` MB mounted in the cluster's
    directory, made the database's default tablespace (the WAL stays on the
    main disk, as a full data volume with a separate WAL volume would have
    it). Needs root to mount: skipped otherwise, except under CI=true, where
    it fails (the CI machine is root)."""
    mount_point = own_postgres.directory / "small"
    mount_point.mkdir()
    owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    reason = None
    if owner is None:
        reason = "mounting a tmpfs for the full disk needs root"
    else:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_MB}m,mode=0700,uid={owner.pw_uid}",
             "tmpfs", str(mount_point)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if done.returncode != 0:
            reason = f"mount -t tmpfs failed: {done.stderr.strip()}"
    if reason is not None:
        if in_ci():
            pytest.fail(f"{reason} (required under CI=true)")
        pytest.skip(reason)
    try:
        url = own_postgres.url_for("postgres")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE small LOCATION '{mount_point}'")
            conn.execute(f'ALTER DATABASE "{own_postgres.database}" SET default_tablespace = small')
        yield str(mount_point)
    finally:
        own_postgres.kill()  # nothing holds a file open on it any more
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def fill(url: str) -> int:
    """Rows of ~1 kB into a filler table until the disk is full; how many MB."""
    rows = 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (b text)")
        for chunk in (1000, 100, 1):  # down to the last page that fits
            while True:
                try:
                    conn.execute(
                        "INSERT INTO filler SELECT repeat(md5(g::text), 30)"
                        " FROM generate_series(1, %s) AS g",
                        (chunk,),
                    )
                except psycopg.errors.DiskFull:
                    break
                rows += chunk
    return rows // 1000


async def test_a_full_disk_refuses_enqueue_clearly_and_loses_nothing(
    own_postgres: PostgresServer, small_disk: str
) -> None:
    """The store's tablespace fills up: an enqueue that needs new pages
    raises a StoreError that says the disk is full and stores none of its
    jobs; the jobs already stored are all kept; a worker started meanwhile
    rides it out. Once space is freed, the same enqueue is accepted and
    every job runs once."""
    url = schema_url(own_postgres.url)
    ledger = Ledger()
    worker_app, _ = make_app(url, ledger)
    producer, work = make_app(url)
    with trio.fail_after(40):
        stored = await enqueue_acknowledged(producer, work.new_jobs([Item(i) for i in range(100)]))
        filled_mb = await trio.to_thread.run_sync(fill, own_postgres.url)
        refused = work.new_jobs([Item(1000 + i) for i in range(300)])
        with pytest.raises(StoreError, match="disk is full") as raised:
            await producer.enqueue_jobs(refused)
        message = str(raised.value)
        assert "No space left on device" in message and "free space" in message
        for job in refused:
            assert await producer.store.get_job(job.id) is None, "none of the batch stored"
        async with worker_app.open_worker(concurrency=8, lease_duration=3.0, poll_interval=0.5):
            await trio.sleep(1.0)  # while the disk is full
            await admin_sql(own_postgres.url, "DROP TABLE filler")
            accepted = await enqueue_acknowledged(producer, refused)
            await wait_until(lambda: (stored | accepted) <= set(ledger.done), 20)
            await wait_until_drained(producer.store, 10)
    print(f"\nfilled {filled_mb} MB; the refused enqueue said: {message}")
    assert all(n == 1 for n in ledger.runs.values()), ledger.runs
    assert set(ledger.runs) == stored | accepted and len(accepted) == 300
    await worker_app.aclose()
    await producer.aclose()


# -- a stale settle after recovery --------------------------------------------------------


async def test_a_stale_settle_after_recovery_is_refused(postgres_url: str) -> None:
    """Worker A's lease expires (A paused, or cut off) and is recovered; B
    leases the job again. A's late settles of every kind and its renewal are
    refused and leave the record as B holds it, token and all; B's settle is
    applied."""
    url = schema_url(postgres_url)
    a, b = PostgresStore.from_url(url), PostgresStore.from_url(url)
    with trio.fail_after(15):
        await a.enqueue_many([NewJob(id="x", queue="q", kind="k", payload=b"{}", max_retries=5)])
        [old] = (await a.lease([QueueWeight("q")], 1, worker_id="a", lease_duration=0.2)).jobs
        while not (await b.recover_expired(["q"], 10)).requeued:
            await trio.sleep(0.05)
        [new] = (await b.lease([QueueWeight("q")], 1, worker_id="b", lease_duration=10)).jobs
        assert new.job.id == "x" and new.token != old.token and new.job.attempts == 2
        before = await b.get_job("x")
        for kind in SettleKind:
            stale = Settlement(old.ref, kind, error="late")
            assert (await a.settle([stale])).settled == (False,), kind
        assert (await a.renew([old.ref], 10)).renewed == (False,)
        after = await b.get_job("x")
        assert after == before
        assert after is not None and after.state is JobState.LEASED
        assert after.lease_owner == "b" and after.lease_token == new.token
        assert (await b.settle([Settlement(new.ref, SettleKind.SUCCEEDED)])).settled == (True,)
        assert await b.get_job("x") is None
    await a.aclose()
    await b.aclose()
