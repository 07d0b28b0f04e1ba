"""Shared by every benchmark process, ours and the peers' (standard library only).

A *recorder* lives in each worker process. Handlers call :func:`record` (one
``time.time()`` and a few list appends); a daemon thread publishes a tiny
progress file every 20 ms, and, once the orchestrator drops a ``dump`` file,
writes every sample once. So measuring costs the hot path almost nothing and
works the same for asyncio, Trio and any number of processes.

Payloads carry ``(sent_at, due_at, hold, pad)``: ``sent_at`` is the wall time
just before the producer's enqueue call, ``due_at`` the intended run time (0
for immediate jobs), ``hold`` makes a handler sleep (to hold a lease), and
``pad`` brings the encoded payload to about 100 bytes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

#: Padding that brings each job's encoded payload to about 100 bytes: our JSON
#: object of four fields, or a peer's pickled 4-tuple.
PAD = "x" * 24
PAD_PEER = "x" * 48
#: Environment variables the orchestrator passes to worker processes.
ENV_DIR = "BENCH_DIR"
ENV_URL = "BENCH_REDIS_URL"
ENV_CONCURRENCY = "BENCH_CONCURRENCY"
ENV_OPTIONS = "BENCH_OPTIONS"  # JSON object of extra worker settings
#: The key every system's one-round-trip handler increments (``INCR``).
INCR_KEY = "bench:incr"
#: The I/O-bound handler's wait, seconds (each system's own sleep).
IO_WAIT = 0.001
#: The memory workload's job: one argument, this 100-character str, in each
#: system's own payload form; due this many seconds ahead (nothing runs).
MEMORY_DATA = "x" * 100
MEMORY_DELAY = 3600.0


def env_options() -> dict[str, Any]:
    raw = os.environ.get(ENV_OPTIONS, "")
    return json.loads(raw) if raw else {}


def env_concurrency(default: int = 16) -> int:
    return int(os.environ.get(ENV_CONCURRENCY, default))


# -- the recorder ---------------------------------------------------------------------


class Recorder:
    """Counts runs and keeps latency samples in one worker process."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = Path(out_dir) if out_dir else None
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.pickup: list[float] = []  # start - sent_at, seconds (immediate jobs)
        self.late: list[float] = []  # start - due_at, seconds (delayed jobs)
        self.starts: list[float] = []  # wall time of each start (kept for recovery)
        self.marks: list[int] = []  # a tag per start, for handlers that call mark()
        #: (tag, start wall time, start - sent_at or NaN), for handlers that
        #: call record_tagged (the PostgreSQL phases: a stage per tag)
        self.tagged: list[tuple[int, float, float]] = []
        self._thread: threading.Thread | None = None
        # Thread peers (Dramatiq, huey, Celery) record from many threads at
        # once: the lock keeps count, first and last consistent (uncontended,
        # it costs well under a microsecond on the event-loop systems).
        self._lock = threading.Lock()

    def record(self, sent_at: float, due_at: float) -> float:
        with self._lock:
            now = time.time()
            if not self.count:
                self.first = now
            self.count += 1
            self.last = now
            if due_at:
                self.late.append(now - due_at)
            elif sent_at:
                self.pickup.append(now - sent_at)
            self.starts.append(now)
            return now

    def record_tagged(self, sent_at: float, due_at: float, tag: int) -> float:
        """:meth:`record`, and the start kept with ``tag`` (and its pickup
        latency when ``sent_at`` is set and ``due_at`` is not)."""
        now = self.record(sent_at, due_at)
        pickup = now - sent_at if sent_at and not due_at else math.nan
        with self._lock:
            self.tagged.append((tag, now, pickup))
        return now

    def mark(self, tag: int) -> None:
        """Tag the start just recorded (call right after :meth:`record`, with
        no checkpoint between, so ``marks[i]`` belongs to ``starts[i]``)."""
        self.marks.append(tag)

    def snapshot(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "count": self.count,
            "first": self.first,
            "last": self.last,
        }

    def full(self) -> dict[str, Any]:
        return {
            **self.snapshot(),
            "pickup": self.pickup,
            "late": self.late,
            "starts": self.starts,
            "marks": self.marks,
            "tagged": self.tagged,
        }

    def start_thread(self) -> None:
        if self.out_dir is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._publish, name="bench-recorder", daemon=True)
        self._thread.start()

    def _publish(self) -> None:
        assert self.out_dir is not None
        pid = os.getpid()
        progress = self.out_dir / f"progress-{pid}.json"
        dump = self.out_dir / "dump"
        seen = -1
        while True:
            if dump.exists():
                _write_atomic(self.out_dir / f"final-{pid}.json", self.full())
                return
            if self.count != seen:
                seen = self.count
                _write_atomic(progress, self.snapshot())
            time.sleep(0.02)


_recorder: Recorder | None = None


def recorder() -> Recorder:
    """The process-wide recorder (its thread starts on first use)."""
    global _recorder
    if _recorder is None:
        _recorder = Recorder(os.environ.get(ENV_DIR))
        _recorder.start_thread()
    return _recorder


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# -- reading the recorders from the orchestrating side ---------------------------------


def read_progress(out_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for path in out_dir.glob("progress-*.json"):
        with contextlib.suppress(OSError, ValueError):
            rows.append(json.loads(path.read_text()))
    return rows


def total_count(out_dir: Path) -> int:
    return sum(r["count"] for r in read_progress(out_dir))


def wait_total(out_dir: Path, n: int, timeout: float, *, poll: float = 0.02) -> bool:
    """Until the workers under ``out_dir`` have started ``n`` jobs (True), or
    ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while total_count(out_dir) < n:
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def collect(out_dir: Path, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Ask every recorder that made progress for its samples and read them
    (a process that is gone, killed by the recovery workload, has none to
    give: waiting for it would only use up ``timeout``)."""
    pids = {r["pid"] for r in read_progress(out_dir) if _alive(r["pid"])}
    (out_dir / "dump").touch()
    deadline = time.monotonic() + timeout
    finals: dict[int, dict[str, Any]] = {}
    while len(finals) < len(pids) and time.monotonic() < deadline:
        for pid in pids - finals.keys():
            path = out_dir / f"final-{pid}.json"
            if path.exists():
                with contextlib.suppress(OSError, ValueError):
                    finals[pid] = json.loads(path.read_text())
        time.sleep(0.02)
    return list(finals.values())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now: not ours, gone
        return False
    return True


def merge(finals: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One view of several processes' recorders."""
    active = [f for f in finals if f["count"]]
    return {
        "count": sum(f["count"] for f in finals),
        "first": min((f["first"] for f in active), default=0.0),
        "last": max((f["last"] for f in active), default=0.0),
        "pickup": [x for f in finals for x in f.get("pickup", ())],
        "late": [x for f in finals for x in f.get("late", ())],
        "starts": sorted(x for f in finals for x in f.get("starts", ())),
        "tagged": [tuple(x) for f in finals for x in f.get("tagged", ())],
    }


# -- statistics -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between closest ranks."""
    if not values:
        return math.nan
    data = sorted(values)
    k = (len(data) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max in milliseconds."""
    return {
        "p50_ms": percentile(values, 50) * 1e3,
        "p95_ms": percentile(values, 95) * 1e3,
        "p99_ms": percentile(values, 99) * 1e3,
        "max_ms": (max(values) if values else math.nan) * 1e3,
        "samples": len(values),
    }


def median_of(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median of numeric fields over runs (other fields from the first)."""
    runs = list(runs)
    if not runs:
        return {}
    out: dict[str, Any] = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            vals = [r[key] for r in runs if isinstance(r.get(key), int | float)]
            vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v))]
            out[key] = statistics.median(vals) if vals else math.nan
    out["runs"] = len(runs)
    return out


def reset_recorder() -> Recorder:
    """A fresh process-wide recorder (in-process runs, one per run)."""
    global _recorder
    _recorder = Recorder(os.environ.get(ENV_DIR))
    _recorder.start_thread()
    return _recorder


# -- timing enqueue calls (benchmarks.enqueue_callers) -----------------------------------

#: Jobs per batch in the caller benchmark's bulk enqueue.
CALLER_BATCH = 1000
#: The caller classes of that benchmark: who calls the enqueue.
CALLER_CLASSES = ("sync", "trio", "asyncio")


def _call_figures(n: int, total_ns: int, each_ns: Sequence[int], unit: int) -> dict[str, float]:
    """Figures of ``n`` jobs sent by ``len(each_ns)`` calls of ``unit`` jobs
    each, in ``total_ns`` ns of wall time: jobs/s, mean us per job, and the
    p50/p99 of one call in us."""
    return {
        "n": n,
        "jobs_per_s": n / (total_ns / 1e9) if total_ns > 0 else math.nan,
        "us_per_job": total_ns / n / 1e3 if n else math.nan,
        "jobs_per_call": unit,
        "p50_call_us": percentile(each_ns, 50) / 1e3,
        "p99_call_us": percentile(each_ns, 99) / 1e3,
    }


def time_calls(one: Callable[[], object], n: int) -> dict[str, float]:
    """``one()`` ``n`` times, one after the other, each timed (one
    ``perf_counter_ns`` pair around it, well under a microsecond); its
    exceptions propagate."""
    clock = time.perf_counter_ns
    each = [0] * n
    start = clock()
    for i in range(n):
        t = clock()
        one()
        each[i] = clock() - t
    return _call_figures(n, clock() - start, each, 1)


async def atime_calls(one: Callable[[], Awaitable[object]], n: int) -> dict[str, float]:
    """:func:`time_calls` for an awaited call (asyncio or Trio alike)."""
    clock = time.perf_counter_ns
    each = [0] * n
    start = clock()
    for i in range(n):
        t = clock()
        await one()
        each[i] = clock() - t
    return _call_figures(n, clock() - start, each, 1)


def time_batches(many: Callable[[int], object], n: int, batch: int) -> dict[str, float]:
    """``n`` jobs as ``many(k)`` calls of ``batch`` jobs each (the last one
    smaller when ``batch`` does not divide ``n``), each call timed."""
    clock = time.perf_counter_ns
    sizes = [min(batch, n - i) for i in range(0, n, batch)]
    each = [0] * len(sizes)
    start = clock()
    for i, k in enumerate(sizes):
        t = clock()
        many(k)
        each[i] = clock() - t
    return _call_figures(n, clock() - start, each, batch)


async def atime_batches(
    many: Callable[[int], Awaitable[object]], n: int, batch: int
) -> dict[str, float]:
    """:func:`time_batches` for an awaited batch call."""
    clock = time.perf_counter_ns
    sizes = [min(batch, n - i) for i in range(0, n, batch)]
    each = [0] * len(sizes)
    start = clock()
    for i, k in enumerate(sizes):
        t = clock()
        await many(k)
        each[i] = clock() - t
    return _call_figures(n, clock() - start, each, batch)


def run_caller(
    caller: Any, kind: str, url: str, n_single: int, n_bulk: int, batch: int, warmup: int
) -> dict[str, Any]:
    """One round of the caller benchmark for one contestant, in this process.

    ``caller`` (a class) has ``one_label`` and ``many_label`` (None: no batch
    call), and ``open(url)``, ``close()``, ``one()`` (one job) and
    ``many(k)`` (``k`` jobs in one call): plain methods when ``kind`` is
    ``sync``, coroutines run by ``asyncio.run`` or ``trio.run`` when it is
    ``asyncio`` or ``trio``. First ``warmup`` single calls and one batch (not
    timed: connecting, loading scripts, warming caches); then ``n_single``
    single calls and ``n_bulk`` jobs in batches of ``batch``, the same for
    every contestant. Raises ValueError for an unknown ``kind``; the
    caller's own exceptions propagate."""
    if kind not in CALLER_CLASSES:
        raise ValueError(f"unknown caller class {kind!r}")
    c = caller()
    has_bulk = caller.many_label is not None
    out: dict[str, Any] = {"one_label": caller.one_label, "many_label": caller.many_label}
    if kind == "sync":
        c.open(url)
        try:
            for _ in range(warmup):
                c.one()
            if has_bulk:
                c.many(batch)
            out["single"] = time_calls(c.one, n_single)
            out["bulk"] = time_batches(c.many, n_bulk, batch) if has_bulk else None
        finally:
            c.close()
        return out

    async def body() -> None:
        await c.open(url)
        try:
            for _ in range(warmup):
                await c.one()
            if has_bulk:
                await c.many(batch)
            out["single"] = await atime_calls(c.one, n_single)
            out["bulk"] = await atime_batches(c.many, n_bulk, batch) if has_bulk else None
        finally:
            await c.close()

    if kind == "asyncio":
        import asyncio

        asyncio.run(body())
    else:
        import trio

        trio.run(body)
    return out
