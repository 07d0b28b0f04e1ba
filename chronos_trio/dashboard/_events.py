"""Live updates: ``GET /events``, a server-sent event stream.

Every ``refresh`` seconds it sends one ``counts`` event: the counts per
state of every queue, whether it is paused, and the store's time. The
page's script (``static/dashboard.js``) writes them into the cells marked
``data-queue``/``data-state`` with ``textContent`` (text, never markup).
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
from ..records._errors import StoreError
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


def event(name: str, data: Any) -> str:
    # json.dumps never emits a newline here, so data is one "data:" line
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream(
    inspector: Inspector, refresh: float, *, lifetime: float = LIFETIME
) -> AsyncIterator[str]:
    """The event stream's text, one event at a time."""
    yield f"retry: {int(RETRY * 1000)}\n\n"
    end = trio.current_time() + lifetime
    while True:
        try:
            yield event("counts", await counts(inspector))
        except StoreError as exc:
            yield event("error", {"error": " ".join(str(exc).split())})
        if trio.current_time() + refresh > end:
            return
        await trio.sleep(refresh)


def events_endpoint(inspector: Inspector, refresh: float) -> Any:
    async def events(request: Request) -> Response:
        return StreamingResponse(
            stream(inspector, refresh),
            media_type="text/event-stream",
            # no proxy buffering: the point is to arrive now
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    return events


__all__ = ["counts", "events_endpoint", "stream"]
