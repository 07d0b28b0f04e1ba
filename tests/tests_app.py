"""The app the process and CLI tests run: ``tests.tests_app:app``.

Its store comes from ``$CHRONOS_URL`` (the in-memory store when unset). The
``tests.record`` handler records every run so a test can count runs and
duplicates across processes: with a Redis store it RPUSHes
``"<job id> <pid> <start> <end>"`` to ``<key>:start`` when it starts and to
``<key>:done`` when it finishes (a plain redis client, so the record does
not depend on the code under test), and ``"<job id> <pid> <when>"`` to
``<key>:aborted`` when an abort cancels it; otherwise it appends to
:data:`RUNS`.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import attrs
import redis
import trio

from chronos_trio import App, ConcurrencyLimit, JobContext, RateLimit, SkipRetry, StepFailure


@attrs.frozen
class Record:
    key: str  # where runs are recorded
    sleep: float = 0.0  # trio.sleep in the handler
    fail: bool = False  # raise SkipRetry: dead at once
    block_first: float = 0.0  # time.sleep (blocks the event loop) on attempt 1


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Add:
    a: int
    b: int


#: Runs recorded when the store is not Redis: (key, job id, attempt).
RUNS: list[tuple[str, str, int]] = []

_clients: dict[str, redis.Redis] = {}

#: What ``tests.hog`` allocated: kept until the process exits.
_KEPT: list[bytes] = []


def _client(url: str) -> redis.Redis:
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def make_app(url: str | None) -> App:
    """A fresh App with the test tasks on ``url`` (producers in tests use one)."""
    app = App(url)

    @app.task("tests.record", max_retries=3, timeout=30)
    async def record(args: Record, job: JobContext) -> None:
        started = time.time()
        redis_url = url if url and url.startswith("redis") else None
        if redis_url:
            line = f"{job.id} {os.getpid()} {started:.3f}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, f"{args.key}:start", line)
        if args.block_first and job.attempt == 1:
            time.sleep(args.block_first)  # noqa: ASYNC251 - blocks the event loop on purpose
        if args.sleep:
            try:
                await trio.sleep(args.sleep)
            except trio.Cancelled:
                if redis_url and job.abort_requested:
                    line = f"{job.id} {os.getpid()} {time.time():.3f}"
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(
                            _client(redis_url).rpush, f"{args.key}:aborted", line
                        )
                raise
        if args.fail:
            raise SkipRetry("asked to fail")
        if redis_url:
            line = f"{job.id} {os.getpid()} {started:.3f} {time.time():.3f}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, f"{args.key}:done", line)
        else:
            RUNS.append((args.key, job.id, job.attempt))

    @app.task("tests.wf_member", max_retries=5, timeout=30)
    async def wf_member(n: int, job: JobContext) -> int:
        """A workflow member: records its runs like tests.record (key ``wf``)."""
        started = time.time()
        redis_url = url if url and url.startswith("redis") else None
        if redis_url:
            line = f"{job.id} {os.getpid()} {started:.3f}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, "wf:start", line)
        await trio.sleep(0.05)
        if redis_url:
            line = f"{job.id} {os.getpid()} {started:.3f} {time.time():.3f}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, "wf:done", line)
        if job.id == os.environ.get("WF_KILL_AFTER") and job.attempt == 1:
            # the handler's work is done, its settle never happens
            os.kill(os.getpid(), signal.SIGKILL)
        return n

    @app.task("tests.wf_callback", max_retries=5, timeout=30)
    async def wf_callback(values: list[int], job: JobContext) -> int:
        """A chord's callback: records ``<job id> <sum>`` in ``wf:callbacks``."""
        redis_url = url if url and url.startswith("redis") else None
        if redis_url:
            line = f"{job.id} {sum(values)}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, "wf:callbacks", line)
            ran = f"{job.id} {os.getpid()}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, "wf:callback_pids", ran)
        return sum(values)

    @app.task("tests.wf_fail", max_retries=0, timeout=30)
    async def wf_fail(n: int, job: JobContext) -> int:
        """A workflow step that fails for good for a negative ``n`` (its
        process killed with kill -9 on attempt 1 when its job ID is
        ``$WF_FAIL_KILL``: the lease expires on its last attempt)."""
        await trio.sleep(0.05)
        if job.id == os.environ.get("WF_FAIL_KILL") and job.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if n < 0:
            raise SkipRetry(f"{n} fails")
        return n

    @app.task("tests.wf_on_failure", max_retries=5, timeout=30)
    async def wf_on_failure(failure: StepFailure, job: JobContext) -> None:
        """A failure callback: records ``<job id> <failed job id> <attempt>``
        in ``wf:failures``."""
        redis_url = url if url and url.startswith("redis") else None
        if redis_url:
            line = f"{job.id} {failure.job_id} {job.attempt}"
            await trio.to_thread.run_sync(_client(redis_url).rpush, "wf:failures", line)

    async def record_run(args: Record, job: JobContext) -> None:
        """Record the run as ``tests.record`` does (a Redis store only)."""
        started = time.time()
        assert url and url.startswith("redis"), "the flow-control tasks record in Redis"
        line = f"{job.id} {os.getpid()} {started:.3f}"
        await trio.to_thread.run_sync(_client(url).rpush, f"{args.key}:start", line)
        if args.sleep:
            await trio.sleep(args.sleep)
        line = f"{job.id} {os.getpid()} {started:.3f} {time.time():.3f}"
        await trio.to_thread.run_sync(_client(url).rpush, f"{args.key}:done", line)

    # fleet-wide flow control (tests/test_flow_control_e2e.py)
    app.task("tests.rated", queue="flow", rate_limit=RateLimit(50, per=1.0, burst=5))(record_run)
    app.task("tests.capped", queue="flow", concurrency_limit=ConcurrencyLimit(4))(record_run)

    @app.task("tests.add", max_retries=0)
    async def add(args: Add, job: JobContext) -> dict[str, int]:
        """A result to print (``enqueue --wait``, tests/test_cli_enqueue.py);
        a negative ``a`` fails it for good."""
        if args.a < 0:
            raise SkipRetry(f"negative a: {args.a}")
        return {"sum": args.a + args.b}

    @app.task("tests.hog", max_retries=0)
    async def hog(megabytes: int, job: JobContext) -> None:
        """Allocate ``megabytes`` MB and keep them for the process's life
        (worker recycling by memory, tests/test_recycle_process.py)."""
        _KEPT.append(b"\x01" * (megabytes * 2**20))

    @app.task("tests.note", queue="critical", max_retries=0)
    async def note(args: Note, job: JobContext) -> None:
        if args.text == "fail":
            raise ValueError("note failed on purpose")

    return app


app = make_app(os.environ.get("CHRONOS_URL"))


def _kill_in_continuer(target: str, mark: str, *, continued: bool = False) -> None:
    """Fault injection for the process tests: the first process whose
    continuer is about to handle ``target``'s outbox entry (after that job's
    settle, before its continuation) dies with kill -9; the file ``mark``,
    created then, keeps the others alive. ``continued``: it dies after it
    enqueued what follows the entry (and recorded its arrivals), before it
    removes the entry."""
    from chronos_trio.actors import continuer

    handle = continuer._continue

    async def dying(store: Any, batch: Any) -> None:
        if continued:
            await handle(store, batch)
        if any(entry.job_id == target for entry in batch):
            try:
                os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass  # another process died for it already
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        if not continued:
            await handle(store, batch)

    continuer._continue = dying  # type: ignore[assignment]


if os.environ.get("WF_KILL_IN_CONTINUER"):
    _kill_in_continuer(
        os.environ["WF_KILL_IN_CONTINUER"],
        os.environ["WF_KILL_MARK"],
        continued=os.environ.get("WF_KILL_CONTINUED") == "1",
    )


def _kill_after_enqueue(target: str, mark: str) -> None:
    """Fault injection for the process tests: the first process whose
    continuer has just enqueued ``target`` (before its second cancel check,
    see ``runtime._flow_cancel``), or whose settle of a chain link has just
    stored ``target`` as its successor (``Settlement.successor``: before
    the worker hears of it), dies with kill -9; ``mark`` as above."""
    from chronos_trio.actors import continuer
    from chronos_trio.store.redis import RedisStore

    def die() -> None:
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)

    check = continuer.abort_made

    async def dying(store: Any, made: Any, jobs: Any) -> Any:
        if any(job.id == target for job in jobs):
            die()
        return await check(store, made, jobs)

    continuer.abort_made = dying  # type: ignore[assignment]
    settle = RedisStore.settle

    # $WF_KILL_HANDED: only when the settle handed ``target`` over leased to
    # this very process (Successor.lease_to), before it runs it
    handed_only = os.environ.get("WF_KILL_HANDED") == "1"

    async def dying_settle(store: Any, settlements: Any) -> Any:
        result = await settle(store, settlements)
        made = [i for i, _ in result.leased] if handed_only else result.continued
        for i in made:
            if settlements[i].successor.job.id == target:
                die()
        return result

    RedisStore.settle = dying_settle  # type: ignore[method-assign]


if os.environ.get("WF_KILL_AFTER_ENQUEUE"):
    _kill_after_enqueue(os.environ["WF_KILL_AFTER_ENQUEUE"], os.environ["WF_KILL_MARK"])

#: Not an App, for the CLI's "is not an App" error.
not_an_app: Any = object()
