"""The endpoints of an app's own pages (``_extensions``): GET renders the
page inside the dashboard's layout; POST (pages registered with ``post``)
passes the actions' checks (read-only, same origin, CSRF) first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ._actions import Actions
from ._extensions import ExtensionRequest, Extensions, Page, show
from ._render import link
from ._security import mount_path
from ._views import Views, optional

Endpoint = Callable[[Request], Awaitable[Response]]


def _request(
    views: Views, request: Request, form: dict[str, str] | None = None
) -> ExtensionRequest:
    params = {k: optional(request.query_params, k) for k in request.query_params}
    return ExtensionRequest(
        views.inspector, params, request.url.path, views.options.read_only, form or {}
    )


def page_endpoint(views: Views, actions: Actions, page: Page) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        if request.method == "POST":
            if views.options.read_only:
                raise HTTPException(403, "this dashboard is read-only")
            assert page.post is not None  # the route takes POST only then
            form = await actions.checked_form(request)
            form.pop("csrf", None)
            message = await page.post(_request(views, request, form))
            response = RedirectResponse(link(mount_path(request.scope), page.path), 303)
            views.flash_cookie(request, response, str(message))
            return response
        shown = await show(page.title, page.handler, page.template, _request(views, request))
        shown = views.fragment(request, shown)
        return await views.render(
            request, "extension.html", shown=shown, page=page, nav_at=page.path
        )

    return endpoint


def extension_routes(views: Views, actions: Actions, extensions: Extensions | None) -> list[Route]:
    """One route per page of ``extensions`` (GET, and POST with ``post``)."""
    return [
        Route(
            page.path,
            page_endpoint(views, actions, page),
            methods=["GET", "POST"] if page.post is not None else ["GET"],
        )
        for page in (() if extensions is None else extensions.pages)
    ]


__all__ = ["extension_routes", "page_endpoint"]
