"""Progress and log lines read from another process while the job runs
(issue 28): a worker in this process runs a handler that reports, then waits;
meanwhile child processes read the job with ``python -m chronos_trio job
ID`` (text and ``--json``) and with ``SyncProducer`` and ``AsyncioProducer``
handles, on Redis.
The CLI's text and JSON shapes are checked here too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
import trio

from chronos_trio import App, JobContext
from chronos_trio.store.redis import RedisStore

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Files:
    n: int


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


async def test_progress_and_log_read_from_another_process_while_the_job_runs(
    redis_url: str,
) -> None:
    url = f"{redis_url}?namespace=notes-process"
    store = RedisStore.from_url(url)
    app = App(store)
    reported = trio.Event()
    go = trio.Event()

    @app.task("resize")
    async def resize(args: Files, job: JobContext) -> None:
        for i in range(1, args.n + 1):
            await job.progress(i / args.n * 0.4, f"resized {i} of {args.n}")
            job.log(f"file {i} resized")
        reported.set()
        await go.wait()

    try:
        async with app.open_worker(notes_interval=0.1, retain_succeeded=60.0) as worker:
            handle = await resize.enqueue(Files(4), job_id="resize-1")
            with trio.fail_after(30):
                await reported.wait()
                # written within one interval; the child reads what is there
                while worker.runtime.notes.statistics().lines < 4:
                    await trio.sleep(0.02)

            text = await trio.to_thread.run_sync(
                _run, "-m", "chronos_trio", "job", "resize-1", "--url", url
            )
            assert text.returncode == 0, text.stderr
            assert "state       leased" in text.stdout
            assert "progress: 40% resized 4 of 4 (attempt 1, written " in text.stdout
            assert "log (4 lines):" in text.stdout
            assert "  #1 20" in text.stdout and "Z  file 4 resized" in text.stdout

            raw = await trio.to_thread.run_sync(
                _run, "-m", "chronos_trio", "job", "resize-1", "--url", url, "--json"
            )
            assert raw.returncode == 0, raw.stderr
            data = json.loads(raw.stdout)
            assert data["state"] == "leased"
            assert data["progress"]["fraction"] == pytest.approx(0.4)
            assert data["progress"]["message"] == "resized 4 of 4"
            assert data["progress"]["attempt"] == 1 and data["progress"]["at"].endswith("Z")
            assert [line["text"] for line in data["log"]["lines"]] == [
                f"file {i} resized" for i in range(1, 5)
            ]
            assert data["log"]["dropped"] == 0

            script = textwrap.dedent(
                f"""
                import json
                from chronos_trio.producers import SyncProducer
                with SyncProducer({url!r}) as producer:
                    handle = producer.job("resize-1")
                    p = handle.progress()
                    notes = handle.notes()
                    print(json.dumps([p.fraction, p.message, p.attempt, len(notes.lines)]))
                """
            )
            sync = await trio.to_thread.run_sync(_run, "-c", script)
            assert sync.returncode == 0, sync.stderr
            assert json.loads(sync.stdout) == [pytest.approx(0.4), "resized 4 of 4", 1, 4]

            script = textwrap.dedent(
                f"""
                import asyncio, json
                from chronos_trio.producers import AsyncioProducer
                async def main():
                    async with AsyncioProducer({url!r}) as producer:
                        handle = producer.job("resize-1", queue="default")
                        p = await handle.progress()
                        notes = await handle.notes()
                        print(json.dumps([p.fraction, p.message, [n.text for n in notes.lines]]))
                asyncio.run(main())
                """
            )
            aio = await trio.to_thread.run_sync(_run, "-c", script)
            assert aio.returncode == 0, aio.stderr
            lines = [f"file {i} resized" for i in range(1, 5)]
            assert json.loads(aio.stdout) == [pytest.approx(0.4), "resized 4 of 4", lines]
            go.set()
            with trio.fail_after(30):
                await handle.result()
    finally:
        await store.aclose()
