"""The charts' part of the queues and queue pages, and ``GET /charts``: the
charts' fragment the page's script reloads with the live updates (see
``_charts``). Read-only: it shows what the pages show, to whoever may see them."""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..app._inspector import Inspector
from ._charts import WINDOWS, histories, hours_of
from ._render import link
from ._security import mount_path


class Views(Protocol):
    """What this module needs of the pages (``_views.Views``)."""

    inspector: Inspector

    async def render(
        self, request: Request, template: str, *, status: int = 200, **context: Any
    ) -> HTMLResponse: ...


async def chart_context(request: Request, views: Views, queue: str | None) -> dict[str, Any]:
    """What ``_charts.html``'s section needs: every queue's history (``queue``
    None: the queues page) or one queue's and its kinds'."""
    hours = hours_of(request.query_params.get("hours"))
    base = mount_path(request.scope)
    if queue is None:
        names = await views.inspector.queue_names()
        page = "/"
    else:
        names = [queue]
        page = "/queue"
    charts = await histories(views.inspector, names, hours, by_kind=queue is not None)

    def at(path: str, **params: object) -> str:
        return link(base, path, name=queue, **params)

    return {
        "charts": charts,
        "hours": hours,
        "window_links": [(w, at(page, hours=w)) for w in WINDOWS],
        "charts_url": at("/charts", hours=hours),
    }


def charts_endpoint(views: Views) -> Any:
    async def charts(request: Request) -> Response:
        queue = request.query_params.get("name") or None
        if queue is not None:
            await views.inspector.check_queue(queue)
        context = await chart_context(request, views, queue)
        response = await views.render(request, "charts_fragment.html", nav_at="queues", **context)
        response.headers["cache-control"] = "no-store"
        return response

    return charts


__all__ = ["chart_context", "charts_endpoint"]
