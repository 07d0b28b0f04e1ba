"""Live updates: ``GET /events``, a server-sent event stream.

Every ``refresh`` seconds it sends one ``counts`` event: the counts per
state of every queue, whether it is paused, and the store's time. The
page's script (``static/dashboard.js``) writes them into the cells marked
``data-queue``/``data-state`` with ``textContent`` (text, never markup).
A job's page asks for its job too (``/events?job=ID&queue=Q``): each tick
then also sends a ``notes`` event, the job's state, progress and log lines
(its live progress bar).
An unreachable store is an ``error`` event, not the end of the stream.

A stream ends after ``lifetime`` seconds; the browser's EventSource
reconnects by itself after the ``retry`` delay the stream announces, so
no connection lives forever behind a proxy.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..app._inspector import Inspector
from ..records._errors import StoreError, UnknownJob
from ._render import iso

#: How long one stream lasts before the browser reconnects.
LIFETIME = 300.0
#: The reconnect delay announced to the browser.
RETRY = 3.0


async def counts(inspector: Inspector) -> dict[str, Any]:
    """The ``counts`` event's data."""
    infos = await inspector.queues()
    return {
        "at": iso(await inspector.now()),
        "queues": {
            i.name: {
                "paused": i.paused,
                "total": i.total,
                "counts": {s.value: i.counts.get(s, 0) for s in i.counts},
            }
            for i in infos
        },
    }


async def job_notes(inspector: Inspector, job_id: str, queue: str | None) -> dict[str, Any]:
    """The ``notes`` event's data: the job's state, progress and log lines
    (``gone``: the job no longer exists; ``progress`` and ``lines`` None when
    the store keeps no notes)."""
    try:
        job = await inspector.job(job_id, queue=queue)
    except UnknownJob:
        return {"gone": True}
    notes = await inspector.notes(job)
    p = None if notes is None else notes.progress
    return {
        "gone": False,
        "state": job.state.value,
        "progress": None
        if p is None
        else {"fraction": p.fraction, "message": p.message, "attempt": p.attempt, "at": iso(p.at)},
        "lines": None
        if notes is None
        else [f"#{line.attempt} {iso(line.at)}  {line.text}" for line in notes.lines],
        "dropped": 0 if notes is None else notes.dropped,
    }


def event(name: str, data: Any) -> str:
    # json.dumps never emits a newline here, so data is one "data:" line
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream(
    inspector: Inspector,
    refresh: float,
    *,
    lifetime: float = LIFETIME,
    job: tuple[str, str | None] | None = None,
) -> AsyncIterator[str]:
    """The event stream's text, one event at a time (with ``job``, an ID and
    a queue or None, a ``notes`` event of that job after each ``counts``)."""
    yield f"retry: {int(RETRY * 1000)}\n\n"
    end = trio.current_time() + lifetime
    while True:
        try:
            yield event("counts", await counts(inspector))
            if job is not None:
                yield event("notes", await job_notes(inspector, *job))
        except StoreError as exc:
            yield event("error", {"error": " ".join(str(exc).split())})
        if trio.current_time() + refresh > end:
            return
        await trio.sleep(refresh)


def events_endpoint(inspector: Inspector, refresh: float) -> Any:
    async def events(request: Request) -> Response:
        params = request.query_params
        job_id = params.get("job", "").strip()
        job = (job_id, params.get("queue") or None) if job_id else None
        return StreamingResponse(
            stream(inspector, refresh, job=job),
            media_type="text/event-stream",
            # no proxy buffering: the point is to arrive now
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    return events


__all__ = ["counts", "events_endpoint", "job_notes", "stream"]
