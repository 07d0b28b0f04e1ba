"""The app of the isolation tests (tests/test_isolation.py):
``tests.isolated_app:app``. Its isolated handlers run in child processes,
which import this module to find them, so it must stay importable and
register every task at import time.

The handlers note what they do in the file their payload names (``event
pid attempt t``, ``t`` on ``time.monotonic()``, one clock for every process
on the host), never in the store: a child has no store.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import attrs
import trio

from chronos_trio import App, JobContext, SoftTimeLimit

app = App()


@attrs.frozen
class Work:
    path: str
    #: Seconds it blocks (time.sleep: the worker's loop must not be blocked).
    seconds: float = 0.0
    #: What it does on which attempts: "ok", "hang", "segv", "exit3", "catch",
    #: "report" (progress and a log line: tests/test_isolation.py).
    how: str = "ok"
    #: Attempts that do ``how``; later ones just succeed.
    until_attempt: int = 1
    value: int = 0


@attrs.frozen
class Answer:
    pid: int
    attempt: int
    doubled: int
    headers: dict[str, str]
    queue: str
    kind: str


def note(path: str, *fields: object) -> None:
    with open(path, "a") as f:
        f.write(" ".join(str(x) for x in fields) + "\n")


def _act(args: Work, job: JobContext) -> Answer:
    pid = os.getpid()
    note(args.path, "start", pid, job.attempt, f"{time.monotonic():.4f}")
    how = args.how if job.attempt <= args.until_attempt else "ok"
    if how == "hang":
        while True:  # ignores its soft limit: only a kill ends it
            try:
                time.sleep(60)
            except SoftTimeLimit:
                note(args.path, "soft-ignored", pid, job.attempt, f"{time.monotonic():.4f}")
    elif how == "catch":
        try:
            time.sleep(60)
        except SoftTimeLimit:
            note(args.path, "soft", pid, job.attempt, f"{time.monotonic():.4f}")
            return Answer(pid, job.attempt, -1, job.headers, job.queue, job.kind)
    elif how == "segv":
        ctypes.string_at(0)
    elif how == "sigsegv":
        os.kill(pid, signal.SIGSEGV)
    elif how == "exit3":
        os._exit(3)
    elif how == "report":  # notes from the child: a tight loop, a line, a wait, the last
        for i in range(1, 1001):
            job.progress_nowait(i / 2000, f"{i} of 2000")
        job.log(f"halfway in {pid}")
        time.sleep(args.seconds)  # the test reads the progress meanwhile
        job.progress_nowait(1.0, "done")
    elif args.seconds:
        time.sleep(args.seconds)
    note(args.path, "end", pid, job.attempt, f"{time.monotonic():.4f}")
    return Answer(pid, job.attempt, 2 * args.value, job.headers, job.queue, job.kind)


@app.task("iso.work", isolate=True, timeout=30, max_retries=3)
def work(args: Work, job: JobContext) -> Answer:
    return _act(args, job)


@app.task("iso.async", isolate=True, timeout=30, max_retries=3)
async def work_async(args: Work, job: JobContext) -> Answer:
    await trio.sleep(args.seconds)
    return Answer(os.getpid(), job.attempt, 2 * args.value, job.headers, job.queue, job.kind)


@app.task("iso.in_process", timeout=30)
async def in_process(args: Work, job: JobContext) -> int:
    return os.getpid()
