"""A job's progress and log lines on the dashboard (issue 28): its page
shows a progress bar and the log, and its live event stream (the page asks
for ``/events?job=ID``) sends them as they change, with the job's state."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from chronos_trio import App, MemoryStore, NewJob
from chronos_trio.dashboard import dashboard_app
from chronos_trio.dashboard._events import stream
from chronos_trio.records import NoteWrite, Progress
from chronos_trio.store import QueueWeight, SettleKind, Settlement


async def running_job(store: MemoryStore) -> Any:
    await store.enqueue_many([NewJob(id="resize-1", queue="default", kind="k", payload=b"{}")])
    [leased] = (
        await store.lease([QueueWeight("default")], 1, worker_id="w", lease_duration=60)
    ).jobs
    return leased


async def job_page(store: MemoryStore) -> str:
    """The dashboard's page of job ``resize-1``."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dashboard_app(App(store))), base_url="http://localhost"
    ) as web:
        return (await web.get("/job", params={"id": "resize-1"})).text


async def test_the_job_page_shows_a_progress_bar_and_the_log() -> None:
    store = MemoryStore()
    leased = await running_job(store)
    note = NoteWrite(leased.ref, Progress(0.4, "resized 4 of 10"), ("first <b>", "second"))
    await store.write_notes([note])
    html = await job_page(store)
    assert '<progress id="job-progress" max="1" value="0.4"></progress>' in html
    assert "40% resized 4 of 10 (attempt 1," in html
    assert "Z  first &lt;b&gt;\n" in html and "Z  second\n" in html, "escaped, one per line"
    assert 'data-events="/events?job=resize-1&amp;queue=default"' in html


async def test_a_job_page_without_notes_shows_no_bar() -> None:
    """A job that reported nothing: an empty bar; the section is there."""
    store = MemoryStore()
    await running_job(store)
    html = await job_page(store)
    assert '<progress id="job-progress" max="1"></progress>' in html
    assert "no progress reported" in html


async def test_the_live_stream_sends_the_job_s_progress_as_it_changes() -> None:
    store = MemoryStore()
    leased = await running_job(store)
    app = App(store)
    events = stream(app.inspector(), 0.01, job=("resize-1", None))
    seen: list[dict[str, Any]] = []

    async def next_notes() -> dict[str, Any]:
        async for text in events:
            if text.startswith("event: notes"):
                data: dict[str, Any] = json.loads(text.split("data: ", 1)[1])
                seen.append(data)
                return data
        raise AssertionError("the stream ended")

    with trio.fail_after(10):
        first = await next_notes()
        assert first == {
            "gone": False,
            "state": "leased",
            "progress": None,
            "lines": [],
            "dropped": 0,
        }
        await store.write_notes([NoteWrite(leased.ref, Progress(0.5, "half"), ("a line",))])
        later = await next_notes()
        assert later["progress"]["fraction"] == 0.5 and later["progress"]["message"] == "half"
        assert later["lines"][0].endswith("Z  a line") and later["lines"][0].startswith("#1 ")
        await store.settle([Settlement(leased.ref, SettleKind.SUCCEEDED)])
        done = await next_notes()
        assert done == {"gone": True}, "dropped after success: gone"
    await events.aclose()
