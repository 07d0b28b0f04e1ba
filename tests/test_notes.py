"""Progress and job log lines in a running worker (issue 28 items 1-2): on
the MemoryStore under Trio's virtual clock and on a real Redis (see
tests/_backends.py). A handler's reports are kept in the worker, written at
most every ``notes_interval`` in one batch, read while it runs, and its last
ones written before its settle. The store's side is in the conformance
suite (chronos_trio/testing/_conformance_notes.py); reads from another
process in tests/test_notes_process.py."""

from __future__ import annotations

import logging
import math
import threading

import attrs
import pytest
import trio

from chronos_trio import App, JobContext, JobState, RetryPolicy
from chronos_trio.integrations.prometheus import PrometheusMetrics
from chronos_trio.records import MAX_LINE_CHARS, MAX_NOTE_LINES, MAX_PROGRESS_MESSAGE
from chronos_trio.store import Capability, capabilities_of
from chronos_trio.testing import FaultyStore, MinimalStore
from tests._backends import Backend
from tests._support import lose_lease, wait_for


@attrs.frozen
class Steps:
    n: int


class Gate:
    """A ``work`` task that reports ``n`` progress steps in a tight loop, logs
    a line per hundred, then waits for :attr:`go` before its last report."""

    def __init__(self, backend: Backend, **app: object) -> None:
        store = backend.store()
        if Capability.NOTES not in capabilities_of(store):
            pytest.skip(f"{type(store).__name__} keeps no notes")
        self.store = FaultyStore(store)  # counts the store calls
        self.app = App(self.store, **app)  # type: ignore[arg-type]
        self.reported = trio.Event()
        self.go = trio.Event()

        @self.app.task("work")
        async def work(args: Steps, job: JobContext) -> None:
            for i in range(1, args.n + 1):
                await job.progress(i / args.n / 2, f"step {i} of {args.n}")
                if i % 100 == 0:
                    job.log(f"passed {i}")
            self.reported.set()
            await self.go.wait()
            await job.progress(1, "done")
            job.log("the end")

        self.work = work


async def test_progress_is_rate_limited_read_while_running_and_flushed_before_settle(
    backend: Backend, clock: object
) -> None:
    gate = Gate(backend)
    options = backend.timing(notes_interval=0.5, retain_succeeded=60.0)
    async with gate.app.open_worker(**options) as worker:
        handle = await gate.work.enqueue(Steps(1000))
        with trio.fail_after(30):
            await gate.reported.wait()
            # the reports reach the store within one interval, while it runs
            await wait_for(lambda: gate.store.calls["write_notes"] >= 1, timeout=5)
            progress = await handle.progress()
            while progress is None or progress.fraction < 0.5:
                await trio.sleep(0.05)
                progress = await handle.progress()
        assert (await handle.status()).state is JobState.LEASED, "still running"
        assert progress.message == "step 1000 of 1000" and progress.attempt == 1
        notes = await handle.notes()
        assert [line.text for line in notes.lines] == [f"passed {i}" for i in range(100, 1001, 100)]
        assert all(line.attempt == 1 for line in notes.lines)
        # 1000 reports, a few writes (one per interval at most)
        assert gate.store.calls["write_notes"] <= 3
        before = gate.store.calls["write_notes"]
        gate.go.set()
        with trio.fail_after(30):
            await handle.result()
        # the final flush came before the settle: the success's record shows it
        done = await handle.notes()
        assert done.progress is not None and (done.progress.fraction, done.progress.message) == (
            1.0,
            "done",
        )
        assert done.lines[-1].text == "the end"
        assert gate.store.calls["write_notes"] == before + 1
        stats = worker.runtime.notes.statistics()
        assert stats.refused == 0 and stats.lines == 11 and stats.progress == before + 1


async def test_a_final_flush_does_not_wait_for_the_interval(
    backend: Backend, clock: object
) -> None:
    """A job that reports and returns at once is settled well within the
    interval, its report in the store first."""
    gate = Gate(backend)
    gate.go.set()
    async with gate.app.open_worker(**backend.timing(notes_interval=30.0, retain_succeeded=60.0)):
        handle = await gate.work.enqueue(Steps(10))
        start = trio.current_time()
        with trio.fail_after(10):
            await handle.result()
        assert trio.current_time() - start < 2.0, "the settle waited for the interval"
        notes = await handle.notes()
        assert notes.progress is not None and notes.progress.message == "done"
        assert [line.text for line in notes.lines] == ["the end"]


async def test_earlier_attempts_lines_are_kept(backend: Backend, clock: object) -> None:
    store = backend.store()
    if Capability.NOTES not in capabilities_of(store):
        pytest.skip("no notes")
    app = App(store)

    @app.task("flaky", max_retries=2)
    async def flaky(args: Steps, job: JobContext) -> None:
        job.log(f"try {job.attempt}")
        await job.progress(job.attempt / 3)
        if job.attempt < 3:
            raise RuntimeError("not yet")

    timing = backend.timing(notes_interval=0.5, retain_succeeded=60.0)
    async with app.open_worker(**timing, retry=_quick_retry()):
        handle = await flaky.enqueue(Steps(1))
        with trio.fail_after(30):
            await handle.result()
    notes = await handle.notes()
    assert [(line.attempt, line.text) for line in notes.lines] == [
        (1, "try 1"),
        (2, "try 2"),
        (3, "try 3"),
    ]
    assert notes.progress is not None and notes.progress.attempt == 3
    assert notes.progress.fraction == 1.0


def _quick_retry() -> RetryPolicy:
    return RetryPolicy(base=0.01, max_delay=0.01)


async def test_bad_reports_raise_and_report_nothing(autojump_clock: object) -> None:
    app = App()
    errors: list[BaseException] = []

    @app.task("bad")
    async def bad(args: Steps, job: JobContext) -> None:
        for fraction, message in [
            (1.5, ""),
            (-0.1, ""),
            (math.nan, ""),
            (True, ""),
            ("0.5", ""),
            (0.5, "m" * (MAX_PROGRESS_MESSAGE + 1)),
            (0.5, 7),
        ]:
            try:
                await job.progress(fraction, message)  # type: ignore[arg-type]
            except (ValueError, TypeError) as exc:
                errors.append(exc)
        try:
            job.log(b"bytes")  # type: ignore[arg-type]
        except TypeError as exc:
            errors.append(exc)
        job.log("x" * (MAX_LINE_CHARS * 2))
        for n in range(MAX_NOTE_LINES + 5):
            job.log(f"line {n}")

    async with app.open_worker(notes_interval=0.5, retain_succeeded=60.0) as worker:
        handle = await bad.enqueue(Steps(1))
        with trio.fail_after(10):
            await handle.result()
        assert worker.runtime.notes.statistics().lines_cut == 6
    assert len(errors) == 8, errors
    assert "from 0 to 1" in str(errors[0]) and "at most 200 characters" in str(errors[5])
    notes = await handle.notes()
    assert notes.progress is None, "no bad report was kept"
    texts = [line.text for line in notes.lines]
    # the worker kept the newest lines of the interval
    assert texts == [f"line {n}" for n in range(5, MAX_NOTE_LINES + 5)]


async def test_the_cut_line_ends_with_its_mark(autojump_clock: object) -> None:
    app = App()

    @app.task("long")
    async def long_line(args: Steps, job: JobContext) -> None:
        job.log("é" * (MAX_LINE_CHARS + 1))

    async with app.open_worker(retain_succeeded=60.0):
        handle = await long_line.enqueue(Steps(1))
        with trio.fail_after(10):
            await handle.result()
    [line] = (await handle.notes()).lines
    assert len(line.text) == MAX_LINE_CHARS and line.text.endswith(" [cut]")
    assert line.text.startswith("é" * (MAX_LINE_CHARS - 6))


async def test_a_store_without_notes_runs_the_handler_and_logs_once(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(MinimalStore())
    ran: list[str] = []

    @app.task("plain")
    async def plain(args: Steps, job: JobContext) -> None:
        for i in range(3):
            await job.progress(i / 3, "going")
            job.log("a line")
        ran.append(job.id)

    caplog.set_level(logging.WARNING, "chronos_trio")
    async with app.open_worker() as worker:
        await plain.enqueue(Steps(1), job_id="a")
        await plain.enqueue(Steps(1), job_id="b")
        await wait_for(lambda: len(ran) == 2, timeout=10)
        assert worker.runtime.notes.statistics().ignored == 12
    warned = [r for r in caplog.records if "keeps no notes" in r.getMessage()]
    assert len(warned) == 1
    with pytest.raises(TypeError, match="notes"):
        await app.job("a").progress()


async def test_prometheus_counts_what_was_written(autojump_clock: object) -> None:
    """Per batch, no job label: 1000 reports of one job are at most a few
    updates written, every line counts."""
    metrics = PrometheusMetrics()
    app = App(metrics=metrics)

    @app.task("steps")
    async def steps(args: Steps, job: JobContext) -> None:
        for i in range(args.n):
            await job.progress(i / args.n)
        await trio.sleep(1.2)  # two more intervals: nothing new to write
        job.log("one")
        job.log("two")

    async with app.open_worker(notes_interval=0.5, retain_succeeded=60.0) as worker:
        handles = [await steps.enqueue(Steps(1000)) for _ in range(3)]
        with trio.fail_after(30):
            for handle in handles:
                await handle.result()
            await worker.runtime.events.wait_drained()
        stats = worker.runtime.notes.statistics()

    def value(name: str) -> float:
        return metrics.registry.get_sample_value(name) or 0.0

    written = value("chronos_progress_updates_written_total")
    assert written == stats.progress and 3 <= written <= 6, written
    assert value("chronos_job_log_lines_written_total") == 6 == stats.lines
    assert value("chronos_notes_refused_total") == 0
    samples = [s for f in metrics.registry.collect() for s in f.samples]
    assert not any("job_id" in s.labels for s in samples)


async def test_a_plain_function_handler_reports_from_its_thread() -> None:
    """From a worker thread: progress_nowait and log reach the store (the
    noter, asleep on an empty buffer, is woken through the Trio token). On
    the real clock: the handler's thread blocks for real."""
    app = App()
    started = threading.Event()
    release = threading.Event()

    @app.task("plain")
    def plain(args: Steps, job: JobContext) -> None:
        job.progress_nowait(0.5, "half, from a thread")
        job.log("thread line")
        started.set()
        release.wait(30)

    async with app.open_worker(notes_interval=0.05, retain_succeeded=60.0):
        handle = await plain.enqueue(Steps(1))
        with trio.fail_after(30):
            await trio.to_thread.run_sync(started.wait)
            progress = await handle.progress()
            while progress is None:
                await trio.sleep(0.01)
                progress = await handle.progress()
            assert progress.message == "half, from a thread"
            assert (await handle.status()).state is JobState.LEASED, "read while it runs"
            release.set()
            await handle.result()
    assert [line.text for line in (await handle.notes()).lines] == ["thread line"]


def test_the_cli_shows_dropped_lines_and_nothing_without_notes() -> None:
    from chronos_trio import JobNotes, JobProgress, NoteLine
    from chronos_trio.cli._output_notes import notes_json, notes_lines

    notes = JobNotes(
        "j", "q", JobProgress(0.25, "", 2, 1_700_000_000.0), (NoteLine(2, 1_700_000_001.5, "x"),), 7
    )
    text = notes_lines(notes, 1_700_000_010.0)
    assert "progress: 25% (attempt 2, written 10.0s ago)" in text
    assert "log (1 line, 7 older dropped):" in text
    assert "  #2 2023-11-14T22:13:21.500Z  x" in text
    assert notes_json(notes)["log"]["dropped"] == 7
    assert notes_lines(None, 0.0) == "" and notes_json(None) == {"progress": None, "log": None}
    empty = notes_lines(JobNotes("j", "q", None), 0.0)
    assert "progress: -" in empty and "log: -" in empty


async def test_a_lost_lease_s_last_notes_are_dropped_not_written(autojump_clock: object) -> None:
    """The run that lost its lease writes nothing more: its pending report
    is dropped by its executor (the store would refuse it anyway)."""
    app = App()
    reported = trio.Event()

    @app.task("lost", max_retries=0)
    async def lost(args: Steps, job: JobContext) -> None:
        await job.progress(0.1, "first")
        await trio.sleep(1.0)  # the first report is written
        await job.progress(0.9, "never written")
        job.log("never written either")
        reported.set()
        await trio.sleep(3600)

    options = {"notes_interval": 30.0, "lease_duration": 600.0, "retain_succeeded": 60.0}
    async with app.open_worker(**options) as worker:
        handle = await lost.enqueue(Steps(1), job_id="L")
        with trio.fail_after(30):
            await reported.wait()
            lose_lease(worker, "L")
            await wait_for(lambda: len(worker.runtime.table) == 0)
        assert not worker.runtime.notes.active, "nothing left pending"
        notes = await handle.notes()
    assert notes.progress is not None and notes.progress.message == "first"
    assert notes.lines == ()
