"""An app's own pages and panels in the dashboard (as Sidekiq's
``Web.register``)::

    extensions = Extensions(templates="myapp/dashboard_templates")

    @extensions.page("/billing", "Billing", template="billing.html")
    async def billing(request: ExtensionRequest) -> dict[str, object]:
        return {"invoices": await load_invoices()}

    @extensions.panel("queues", "Backlog by customer")
    async def backlog(request: ExtensionRequest) -> str:
        return "acme: 12 jobs"

    asgi = dashboard_app(app, extensions=extensions)

A page gets a link in the header and its own URL; a panel is a section at
the end of the queues page (``"queues"``) or of every queue's page
(``"queue"``, the queue's name in ``request.params["name"]``). Both live
behind the dashboard's guard like every built-in page: the same
authentication, Host check, security headers and CSP (no inline script or
style: a template links the dashboard's own CSS classes).

A handler returns text (shown as text), a mapping (a two-column table of
names and values, or, with ``template``, the context of that template,
which extends nothing: it is the page's body, rendered with autoescaping in
the dashboard's own template environment, from ``templates``). Nothing a
handler returns is trusted as markup unless it comes from a template.

A page registered with ``post=...`` also takes form POSTs: they pass the
same checks as the dashboard's actions (refused with 403 when the
dashboard is read-only, from another origin, or without the session's
CSRF token, which a template gets as ``csrf``), then the POST handler's
text is shown once on the page it redirects to (303). A template knows
``read_only`` to hide its forms.

A panel whose handler raises shows the error in its place (and logs it):
an app's panel never takes a built-in page down.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from ..app._inspector import Inspector
from ..records._log import log_event

log = logging.getLogger("chronos_trio.dashboard")

#: Where a panel can go.
PanelPlace = Literal["queues", "queue"]
PANEL_PLACES: tuple[str, ...] = ("queues", "queue")

#: The first path segments the dashboard keeps for itself (its pages now,
#: and the names its next pages are likely to take).
RESERVED = frozenset(
    {
        "",
        "queue",
        "queues",
        "jobs",
        "job",
        "lookup",
        "schedules",
        "limits",
        "workers",
        "confirm",
        "actions",
        "logout",
        "events",
        "static",
        "workflows",
        "workflow",
        "batches",
        "batch",
        "search",
        "bulk",
        "history",
        "charts",
        "api",
    }
)
_PATH = re.compile(r"^(/[a-z0-9][a-z0-9_-]{0,63}){1,4}$")
_TEMPLATE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,200}$")
#: The prefix under which an app's templates are found (so they never
#: shadow the dashboard's own).
TEMPLATE_PREFIX = "app/"


@attrs.frozen
class ExtensionRequest:
    """What a page's or a panel's handler gets: the dashboard's
    :class:`~chronos_trio.Inspector` (read the store through it), the
    request's query parameters (and, for a POST, its form, CSRF token
    removed), the path asked for, and whether the dashboard is read-only."""

    inspector: Inspector
    params: Mapping[str, str]
    path: str
    read_only: bool
    form: Mapping[str, str] = attrs.field(factory=dict)


#: What a handler returns: text, or a mapping (a table of names and values,
#: or a template's context).
Content = str | Mapping[str, Any]
Handler = Callable[[ExtensionRequest], Awaitable[Content]]
PostHandler = Callable[[ExtensionRequest], Awaitable[str]]


@attrs.frozen
class Page:
    """A registered page (see :meth:`Extensions.page`)."""

    path: str
    title: str
    handler: Handler
    template: str | None = None
    post: PostHandler | None = None


@attrs.frozen
class Panel:
    """A registered panel (see :meth:`Extensions.panel`)."""

    place: str
    title: str
    handler: Handler
    template: str | None = None


@attrs.frozen
class Shown:
    """A panel or page's content, ready for the template: ``text``,
    ``rows`` (name, value), or ``template`` with ``context``; ``error``
    when the handler failed (panels only)."""

    title: str
    text: str | None = None
    rows: tuple[tuple[str, str], ...] = ()
    template: str | None = None
    context: Mapping[str, Any] = attrs.field(factory=dict)
    error: str | None = None
    #: The template rendered (autoescaped), filled in by the view.
    html: str | None = None


class Extensions:
    """An app's own pages and panels for :func:`dashboard_app`
    (``extensions=``); see the module docstring. ``templates``: the folder
    of the templates pages and panels name (found as given, under the
    dashboard's ``app/`` prefix, so they never replace a built-in one).

    Registering checks its arguments at once (``ValueError`` saying what to
    do): a path must be one to four lowercase segments of letters, digits,
    ``-`` and ``_`` whose first segment the dashboard does not keep for
    itself (``/queue``, ``/jobs``, ... see :data:`RESERVED`) and that no
    other page has; a title non-empty text; a handler an ``async``
    function; a template a relative name, given only when ``templates``
    was; a panel's place ``"queues"`` or ``"queue"``."""

    def __init__(self, *, templates: str | Path | None = None) -> None:
        if templates is not None and not Path(templates).is_dir():
            raise ValueError(f"templates must be a folder of templates, got {str(templates)!r}")
        self.templates = None if templates is None else Path(templates)
        self.pages: list[Page] = []
        self.panels: list[Panel] = []

    def register_page(
        self,
        path: str,
        title: str,
        handler: Handler,
        *,
        template: str | None = None,
        post: PostHandler | None = None,
    ) -> Page:
        """Add page ``path`` (linked as ``title`` in the header) whose
        content ``handler`` returns; ``post``: an async handler of its form
        POSTs, returning the message to show. Returns the page."""
        if not isinstance(path, str) or not _PATH.match(path):
            raise ValueError(
                f"a page path must be like '/billing' (lowercase letters, digits, '-', '_'; "
                f"up to 4 segments), got {path!r}"
            )
        if path.split("/")[1] in RESERVED:
            raise ValueError(
                f"page path {path!r} is the dashboard's own ({path.split('/')[1]!r} is kept): "
                "choose another name"
            )
        if any(p.path == path for p in self.pages):
            raise ValueError(f"page {path!r} is registered already")
        _check_title(title)
        _check_handler("handler", handler)
        if post is not None:
            _check_handler("post", post)
        page = Page(path, title.strip(), handler, self._template(template), post)
        self.pages.append(page)
        return page

    def register_panel(
        self, place: PanelPlace, title: str, handler: Handler, *, template: str | None = None
    ) -> Panel:
        """Add a panel titled ``title`` at the end of the ``place`` page
        (``"queues"``, or ``"queue"``: every queue's page) whose content
        ``handler`` returns. Returns the panel."""
        if place not in PANEL_PLACES:
            raise ValueError(f"a panel goes on 'queues' or 'queue', got {place!r}")
        _check_title(title)
        _check_handler("handler", handler)
        panel = Panel(place, title.strip(), handler, self._template(template))
        self.panels.append(panel)
        return panel

    def page(
        self,
        path: str,
        title: str,
        *,
        template: str | None = None,
        post: PostHandler | None = None,
    ) -> Callable[[Handler], Handler]:
        """:meth:`register_page` as a decorator of the handler."""

        def register(handler: Handler) -> Handler:
            self.register_page(path, title, handler, template=template, post=post)
            return handler

        return register

    def panel(
        self, place: PanelPlace, title: str, *, template: str | None = None
    ) -> Callable[[Handler], Handler]:
        """:meth:`register_panel` as a decorator of the handler."""

        def register(handler: Handler) -> Handler:
            self.register_panel(place, title, handler, template=template)
            return handler

        return register

    def _template(self, name: str | None) -> str | None:
        if name is None:
            return None
        if self.templates is None:
            raise ValueError(
                f"template {name!r} needs Extensions(templates=FOLDER), the folder it is in"
            )
        if not isinstance(name, str) or not _TEMPLATE.match(name) or ".." in name:
            raise ValueError(f"a template is a relative file name, got {name!r}")
        if not (self.templates / name).is_file():
            raise ValueError(f"no template {name!r} in {str(self.templates)!r}")
        return TEMPLATE_PREFIX + name


def _check_title(title: object) -> None:
    if not isinstance(title, str) or not title.strip() or len(title) > 60:
        raise ValueError(f"a title must be non-empty text of at most 60 characters, got {title!r}")


def _check_handler(what: str, handler: object) -> None:
    # an async function, or an object whose __call__ is one
    call = None if inspect.isroutine(handler) else vars(type(handler)).get("__call__")
    if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)):
        raise ValueError(f"{what} must be an async function, got {handler!r}")


async def show(
    title: str, handler: Handler, template: str | None, request: ExtensionRequest
) -> Shown:
    """Run ``handler`` and shape its content for the page (see :class:`Shown`).
    Raises what the handler raises, or ``TypeError`` for content that is
    neither text nor a mapping."""
    content = await handler(request)
    if template is not None:
        if not isinstance(content, Mapping):
            raise TypeError(f"{title}: a handler with a template returns a mapping (its context)")
        return Shown(title, template=template, context=dict(content))
    if isinstance(content, str):
        return Shown(title, text=content)
    if isinstance(content, Mapping):
        return Shown(title, rows=tuple((str(k), str(v)) for k, v in content.items()))
    raise TypeError(f"{title}: a handler returns text or a mapping, got {type(content).__name__}")


async def panels(
    extensions: Extensions | None, place: str, request: ExtensionRequest
) -> list[Shown]:
    """The panels of ``place``, each run; one that fails shows its error
    (logged, with its traceback) instead of failing the page."""
    out = []
    for panel in () if extensions is None else extensions.panels:
        if panel.place != place:
            continue
        try:
            out.append(await show(panel.title, panel.handler, panel.template, request))
        except Exception as exc:
            log_event(
                log, logging.ERROR, "dashboard panel failed", panel=panel.title, exc_info=True
            )
            out.append(Shown(panel.title, error=f"{type(exc).__name__}: {exc}"[:500]))
    return out


__all__ = [
    "PANEL_PLACES",
    "RESERVED",
    "ExtensionRequest",
    "Extensions",
    "Page",
    "Panel",
    "Shown",
    "panels",
    "show",
]
