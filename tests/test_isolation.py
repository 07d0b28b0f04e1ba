"""Isolated handlers (issue 28, item 4): ``@app.task(isolate=True)`` runs in
a warm child process of the worker's pool.

These tests run real child processes, so they run on Trio's real clock
(a virtual clock would jump past leases while a child works), each bounded
by ``trio.fail_after``. The handlers (tests/isolated_app.py) note their
starts and ends, with their pid and attempt, in a file; the tests read it
back. Every test ends by checking that no child it saw is left (reaped:
no zombie either).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from chronos_trio import App, IsolationError, JobAborted, JobContext, JobFailed, RetryPolicy
from chronos_trio.runtime._isolated_child import ChildJobContext, run_job
from chronos_trio.runtime._isolation_wire import WireError, parse_reply
from tests import isolated_app
from tests._support import lines
from tests.isolated_app import Answer, Work, work, work_async

ROOT = Path(__file__).resolve().parent.parent
#: Short, so a retry comes at once.
FAST_RETRY = RetryPolicy(base=0.05, factor=1.0, max_delay=0.05)
WORKER = {"retry": FAST_RETRY, "poll_interval": 0.2, "shutdown_grace": 1.0}


def gone(pid: int) -> bool:
    """The process ended and was reaped (a zombie still answers signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def app() -> Iterator[App]:
    """The isolated app on a fresh memory store (its children never touch it)."""
    isolated_app.app.use_store("memory://")
    yield isolated_app.app


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return tmp_path / "notes"


def isolation_children() -> list[int]:
    """This process's child processes that are isolation children (alive
    or zombies): those that ran a job, and those that never did (a
    replacement started as the worker stopped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"_isolated_child" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def no_child_left(notes: Path) -> Iterator[None]:
    yield
    pids = {line.pid for line in lines(notes)} - {os.getpid()}
    assert all(gone(pid) for pid in pids), f"children left: {pids}"
    assert isolation_children() == []


async def test_a_result_comes_back_through_the_codec(app: App, notes: Path) -> None:
    with trio.fail_after(60):
        async with app.open_worker(concurrency=2, isolate_processes=2, **WORKER):
            handle = await work.enqueue(Work(str(notes), value=21), headers={"tenant": "t1"})
            answer = await handle.result(timeout=30)
            slow = await (await work_async.enqueue(Work(str(notes), value=4))).result(timeout=30)
    assert isinstance(answer, Answer)
    assert answer.doubled == 42 and answer.attempt == 1
    assert answer.pid != os.getpid()
    assert (answer.headers, answer.queue, answer.kind) == ({"tenant": "t1"}, "default", "iso.work")
    # an async def handler runs under trio.run in its child
    assert slow.doubled == 8 and slow.pid != os.getpid() and slow.kind == "iso.async"


async def test_an_isolated_handler_reports_progress_and_log_lines(app: App, notes: Path) -> None:
    """job.progress / job.log in a child reach the store as the run's own:
    readable while it runs, the last value written before the outcome."""
    with trio.fail_after(60):
        async with app.open_worker(
            concurrency=1, isolate_processes=1, notes_interval=0.05, **WORKER
        ):
            handle = await work.enqueue(Work(str(notes), seconds=2.0, how="report"))
            while (seen := await handle.progress()) is None or seen.fraction < 0.5:
                await trio.sleep(0.02)  # (a first note may be written alone: 1 of 2000)
            answer = await handle.result(timeout=30)
            final = await handle.notes()
    # the child's tight loop: its latest report, sent before the line
    assert (seen.fraction, seen.message, seen.attempt) == (0.5, "1000 of 2000", 1)
    assert final.progress is not None
    assert (final.progress.fraction, final.progress.message) == (1.0, "done")
    assert [(line.attempt, line.text) for line in final.lines] == [(1, f"halfway in {answer.pid}")]


async def test_a_child_past_its_hard_limit_is_killed_and_the_next_attempt_runs(
    app: App, notes: Path
) -> None:
    with trio.fail_after(60):
        async with app.open_worker(
            concurrency=2, isolate_processes=1, hard_limit_grace=1.0, **WORKER
        ) as worker:
            handle = await work.enqueue(Work(str(notes), how="hang"), timeout=0.5)
            answer = await handle.result(timeout=30)
            stats = worker.statistics()
            # with no retry left, the job is dead and says why
            last = await work.enqueue(
                Work(str(notes) + ".last", how="hang"), timeout=0.3, max_retries=0
            )
            with pytest.raises(
                JobFailed, match="its 1s hard_limit_grace: its child process was killed"
            ):
                await last.result(timeout=30)
    first, *rest = lines(notes)
    assert (first.what, first.attempt) == ("start", 1)
    # the soft limit reached the handler (which ignored it) before the kill
    assert [(x.what, x.attempt) for x in rest] == [("soft-ignored", 1), ("start", 2), ("end", 2)]
    assert answer.attempt == 2 and answer.pid != first.pid  # a fresh child
    assert gone(first.pid)
    assert stats.retried == 1 and stats.succeeded == 1 and stats.lost == 0
    assert stats.isolated_replaced == 1


async def test_the_soft_limit_can_be_caught_in_the_handler(app: App, notes: Path) -> None:
    with trio.fail_after(60):
        async with app.open_worker(isolate_processes=1, hard_limit_grace=5.0, **WORKER):
            handle = await work.enqueue(Work(str(notes), how="catch"), timeout=0.3)
            answer = await handle.result(timeout=30)
            # an async def handler is cancelled at its soft limit, and fails with it
            slow = await work_async.enqueue(
                Work(str(notes), seconds=30), timeout=0.3, max_retries=0
            )
            with pytest.raises(JobFailed, match="SoftTimeLimit"):
                await slow.result(timeout=30)
    # it caught SoftTimeLimit and returned: a success on the first attempt
    assert answer.doubled == -1 and answer.attempt == 1
    [start, soft] = lines(notes)
    assert soft.what == "soft" and 0.25 < soft.at - start.at < 3.0


async def test_an_abort_kills_the_child_of_a_running_isolated_job(app: App, notes: Path) -> None:
    with trio.fail_after(60):
        async with app.open_worker(isolate_processes=1, lease_duration=1.5, **WORKER) as worker:
            handle = await work.enqueue(Work(str(notes), how="hang"))
            while not lines(notes):
                await trio.sleep(0.05)
            await handle.abort("stop it")
            with pytest.raises(JobAborted):
                await handle.result(timeout=30)
            [start] = lines(notes)
            while not gone(start.pid):  # killed and reaped
                await trio.sleep(0.05)
            after = await (await work.enqueue(Work(str(notes), value=3))).result(timeout=30)
            stats = worker.statistics()
    assert after.doubled == 6 and after.pid != start.pid  # its replacement
    assert stats.aborted == 1


async def test_a_worker_without_isolated_tasks_starts_no_child() -> None:
    plain = App()

    @plain.task("plain")
    def handler(x: int) -> int:
        return os.getpid()

    with trio.fail_after(30):
        async with plain.open_worker() as worker:
            pid = await (await plain.enqueue("plain", 1)).result(timeout=10)
            assert worker._rt is not None and worker._rt.isolation is None
    assert pid == os.getpid()


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("segv", "killed by SIGSEGV"),
        ("sigsegv", "killed by SIGSEGV"),
        ("exit3", "failed with exit code 3"),
    ],
)
async def test_a_child_that_crashes_fails_that_attempt_not_the_worker(
    app: App, notes: Path, how: str, says: str
) -> None:
    with trio.fail_after(60):
        async with app.open_worker(isolate_processes=1, **WORKER) as worker:
            crash = await work.enqueue(Work(str(notes), how=how), max_retries=0)
            with pytest.raises(JobFailed) as failed:
                await crash.result(timeout=30)
            # the worker goes on: the next job runs, in a fresh child
            after = await (await work.enqueue(Work(str(notes), value=1))).result(timeout=30)
            retried = await (await work.enqueue(Work(str(notes), how=how))).result(timeout=30)
            stats = worker.statistics()
    assert "ChildDied: the isolated handler's process died: " + says in str(failed.value)
    assert after.doubled == 2 and retried.attempt == 2
    crashed = [x.pid for x in lines(notes) if x.attempt == 1 and x.what == "start"]
    assert after.pid not in crashed[:1] and all(gone(pid) for pid in crashed)
    assert stats.dead == 1 and stats.restarts == {} and stats.isolated_replaced == 2


async def test_a_child_that_died_while_idle_is_replaced_before_a_job_comes(
    app: App, notes: Path
) -> None:
    with trio.fail_after(60):
        async with app.open_worker(isolate_processes=1, **WORKER):
            first = await (await work.enqueue(Work(str(notes), value=1))).result(timeout=30)
            os.kill(first.pid, signal.SIGKILL)  # idle now: killed from outside
            while not collectable(first.pid):
                await trio.sleep(0.05)
            second = await (await work.enqueue(Work(str(notes), value=2))).result(timeout=30)
    # the job's first attempt ran, in a fresh child: none was spent on the dead one
    assert second.attempt == 1 and second.pid != first.pid and second.doubled == 4


async def test_the_lease_is_renewed_while_a_long_isolated_job_runs(app: App, notes: Path) -> None:
    with trio.fail_after(60):
        async with app.open_worker(
            isolate_processes=1, lease_duration=1.0, recover_interval=0.2, **WORKER
        ) as worker:
            # blocks its child for 3 leases; the worker's loop keeps renewing
            handle = await work.enqueue(Work(str(notes), seconds=3.0))
            answer = await handle.result(timeout=30)
            stats = worker.statistics()
    assert answer.attempt == 1
    assert [x.what for x in lines(notes)] == ["start", "end"]  # ran once
    assert stats.lost == 0 and stats.recovered == 0 and stats.succeeded == 1


async def test_the_pool_size_bounds_isolated_runs_and_no_child_outlives_the_worker(
    app: App, notes: Path
) -> None:
    with trio.fail_after(60):
        async with app.open_worker(concurrency=6, isolate_processes=2, **WORKER) as worker:
            handles = [await work.enqueue(Work(str(notes), seconds=0.4)) for _ in range(6)]
            for handle in handles:
                await handle.result(timeout=30)
            pool = worker._rt.isolation if worker._rt else None
            assert pool is not None and pool.statistics().size == 2
            # one left running at shutdown: killed past the shutdown grace
            await work.enqueue(Work(str(notes), how="hang"))
            while len(lines(notes)) < 13:
                await trio.sleep(0.05)
    runs = lines(notes)
    starts = sorted(x.at for x in runs if x.what == "start")
    ends = sorted(x.at for x in runs if x.what == "end")
    most = max(sum(1 for s in starts if s <= t) - sum(1 for e in ends if e <= t) for t in starts)
    assert most == 2  # two at once, never more
    assert len({x.pid for x in runs}) == 2  # warm children, reused
    # the autouse fixture checks every child is gone, the hung one included


async def test_a_task_of_the_app_runs_in_the_worker_process_unless_isolated(
    app: App, notes: Path
) -> None:
    with trio.fail_after(60):
        async with app.open_worker(isolate_processes=1, **WORKER):
            pid = await (await isolated_app.in_process.enqueue(Work(str(notes)))).result(timeout=30)
    assert pid == os.getpid()


async def _result_hard_limit_crash_and_lease(url: str, notes: Path) -> None:
    """On the store at ``url``: the result comes back through the codec, a
    hung child is killed at its hard limit and the retry succeeds, a
    segfault fails its attempt only, and a lease shorter than the job is
    renewed all along (one run)."""
    app = isolated_app.app
    app.use_store(url)
    try:
        with trio.fail_after(90):
            async with app.open_worker(
                concurrency=3,
                isolate_processes=2,
                hard_limit_grace=0.3,
                lease_duration=1.0,
                recover_interval=0.2,
                **WORKER,
            ) as worker:
                path = str(notes)
                handles = [
                    await work.enqueue(Work(path, value=5)),
                    await work.enqueue(Work(path, how="hang"), timeout=0.4),
                    await work.enqueue(Work(path, how="segv")),
                    await work.enqueue(Work(path, seconds=2.5, value=1)),
                ]
                ok, hung, crashed, long = [await h.result(timeout=60) for h in handles]
                stats = worker.statistics()
    finally:
        await app.aclose()
        app.use_store("memory://")
    assert ok.doubled == 10 and ok.attempt == 1 and ok.pid != os.getpid()
    assert hung.attempt == 2 and crashed.attempt == 2
    assert long.attempt == 1 and long.doubled == 2
    assert [x.attempt for x in lines(notes) if x.what == "end"].count(1) == 2  # ok, long: once
    assert stats.retried == 2 and stats.succeeded == 4 and stats.lost == 0


@pytest.mark.redis
async def test_on_redis_a_result_a_hard_limit_and_a_crash(redis_url: str, notes: Path) -> None:
    await _result_hard_limit_crash_and_lease(redis_url, notes)


async def test_on_sqlite_a_result_a_hard_limit_and_a_crash(sqlite_url: str, notes: Path) -> None:
    await _result_hard_limit_crash_and_lease(sqlite_url, notes)


async def test_middleware_runs_in_the_worker_around_an_isolated_run(app: App, notes: Path) -> None:
    seen: list[tuple[str, str]] = []

    @asynccontextmanager
    async def around(job: JobContext) -> AsyncIterator[None]:
        seen.append(("enter", job.kind))
        yield
        seen.append(("exit", job.kind))

    app.middleware(around)
    try:
        with trio.fail_after(60):
            async with app.open_worker(isolate_processes=1, **WORKER):
                answer = await (await work.enqueue(Work(str(notes), value=2))).result(timeout=30)
    finally:
        app.registry.middleware.remove(around)
    assert answer.doubled == 4 and answer.pid != os.getpid()
    assert seen == [("enter", "iso.work"), ("exit", "iso.work")]


def collectable(pid: int) -> bool:
    """Our child ``pid`` has ended, every thread of it, so its exit status
    can be collected; not collected here (the pool must find it dead by
    itself). A zombie leader whose other threads still exit is not yet."""
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    return os.waitid(os.P_PID, pid, flags) is not None


def ended(pid: int) -> bool:
    """Gone, or a zombie waiting for a parent that is not us to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


@pytest.mark.redis
async def test_a_child_dies_with_its_worker_killed_by_sigkill(redis_url: str, notes: Path) -> None:
    """A CLI worker killed with SIGKILL cannot stop its children: each
    ends by itself, even in the middle of a handler that never returns."""
    argv = [sys.executable, "-m", "chronos_trio", "worker", "tests.isolated_app:app"]
    argv += ["--url", redis_url, "--isolate-processes", "1", "--poll-interval", "0.2"]
    app = isolated_app.app
    app.use_store(redis_url)
    worker = await trio.lowlevel.open_process(argv, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(60):
            await work.enqueue(Work(str(notes), how="hang"))
            while not lines(notes):
                await trio.sleep(0.05)
            [start] = lines(notes)
            worker.kill()
            await worker.wait()
            while not ended(start.pid):
                await trio.sleep(0.05)
        os.remove(notes)  # not our child to reap: the autouse check passes it by
    finally:
        with trio.CancelScope(shield=True):
            worker.kill()
            await worker.wait()
        await app.aclose()
        app.use_store("memory://")


def test_isolated_tasks_need_an_importable_handler() -> None:
    local = App()

    def in_main(x: int) -> None: ...

    in_main.__module__ = "__main__"
    with pytest.raises(ValueError, match="isolate=True needs a handler a child process can"):
        local.task("t", isolate=True)(in_main)
    with pytest.raises(TypeError, match="isolate must be a bool, got 'yes'"):
        local.task("t", isolate="yes")  # type: ignore[arg-type]


async def test_a_worker_refuses_an_app_no_module_holds(notes: Path) -> None:
    local = App()  # a local: no module-level name a child could import

    @local.task("t", isolate=True)
    def t(x: int) -> None: ...

    with pytest.raises(IsolationError, match=r"no module-level name in tests\.test_isolation"):
        await local.worker().run()


late_app = App()


async def test_a_task_registered_after_import_fails_the_start(notes: Path) -> None:
    @late_app.task("late", isolate=True)
    def late(x: int) -> None: ...

    with trio.fail_after(60), pytest.raises(IsolationError) as refused:
        await late_app.worker(isolate_processes=1).run()
    assert "does not register task 'late'" in str(refused.value)


# -- the child's side, in this process (no child started) ------------------------------


def _request(kind: str, payload: bytes, **more: object) -> dict[str, object]:
    from chronos_trio.runtime._isolation_wire import b64

    base = {"id": "j1", "kind": kind, "queue": "q", "attempt": 2, "headers": [["h", "v"]]}
    return {**base, "worker_id": "w", "timeout": None, "payload": b64(payload), **more}


def test_the_child_tells_each_outcome_apart() -> None:
    from chronos_trio import RateLimited, Retry, SkipRetry

    local = App()
    seen: list[object] = []

    @local.task("out", never_retry=(KeyError,))
    def out(x: str, job: JobContext) -> int:
        seen.append(job)
        errors = {"retry": Retry(7), "skip": SkipRetry("no"), "rate": RateLimited(3)}
        if x in errors:
            raise errors[x]
        if x == "never":
            raise KeyError(x)
        if x == "boom":
            raise RuntimeError("boom")
        return len(x) * 1000 if x == "big" else len(x)

    tasks = {"out": local.registry.tasks["out"]}
    object.__setattr__(tasks["out"], "max_result_bytes", 3)

    def reply(x: str) -> tuple[object, ...]:
        r = parse_reply(run_job(tasks, _request("out", f'"{x}"'.encode())))
        return (r.ok, r.result, r.how, r.delay)

    assert reply("ok") == (True, b"2", "error", None)
    assert reply("retry")[1:] == (None, "retry", 7.0)
    assert reply("skip")[2] == "skip" and reply("rate")[2:] == ("rate_limited", 3.0)
    assert reply("never")[2] == "never_retry" and reply("boom")[2] == "error"
    assert reply("big")[2] == "dead"  # 4000 is 4 bytes encoded, over 3
    bad = parse_reply(run_job(tasks, _request("out", b"{")))
    assert (bad.ok, bad.how) == (False, "dead")  # a payload that does not decode
    ctx = seen[0]
    assert isinstance(ctx, ChildJobContext)
    assert (ctx.id, ctx.attempt, ctx.queue, ctx.headers) == ("j1", 2, "q", {"h": "v"})
    with pytest.raises(AttributeError, match=r"job\.redis is not available to an isolated"):
        ctx.redis  # noqa: B018


def test_a_reply_that_is_not_one_is_refused() -> None:
    for message in [{"op": "done"}, {"op": "failed", "how": "maybe", "error": "x", "delay": None}]:
        with pytest.raises(WireError):
            parse_reply(message)
    with pytest.raises(WireError):
        parse_reply({"op": "failed", "how": "retry", "error": "x", "delay": -1})


def test_an_isolated_task_says_where_a_worker_runs_it() -> None:
    # ``is_async`` stays the handler's own (in-process callers such as the
    # eager testing helpers await an async one); a worker reads ``on_loop``
    # and ``in_thread``, neither true for an isolated task.
    assert work_async.spec.is_async and not work.spec.is_async
    for spec in (work.spec, work_async.spec):
        assert spec.isolate and not spec.on_loop and not spec.in_thread
    plain = isolated_app.in_process.spec
    assert plain.on_loop and not plain.in_thread and not plain.isolate
