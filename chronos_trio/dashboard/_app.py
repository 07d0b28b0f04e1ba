"""The dashboard's ASGI app: routes, error pages, and the guard around them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..app._app import App
from ..app._inspector import Inspector
from ..records._errors import (
    ActionRefused,
    InspectorError,
    StoreError,
    TopologyError,
    UnknownJob,
    UnknownQueue,
)
from ..records._log import log_event
from ..records._options import (
    check_bool,
    check_positive_int,
    check_seconds,
    check_text,
    checked_names,
)
from ._actions import Actions
from ._chart_views import charts_endpoint
from ._events import events_endpoint
from ._extension_views import extension_routes
from ._extensions import Extensions
from ._hosts import HostPolicy
from ._render import shorten, static_files
from ._search import SearchPages
from ._security import (
    DEFAULT_SESSION_MAX_AGE,
    Credentials,
    Guard,
    Signer,
    parse_basic_auth,
    signing_key,
)
from ._views import Options, Views

log = logging.getLogger("chronos_trio.dashboard")

#: An error page shows at most this much of its message (it may echo input).
MAX_MESSAGE = 500

#: An ASGI application (scope, receive, send).
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


@checked_names("dashboard")
def dashboard_app(
    target: App | Inspector,
    *,
    token: str | None = None,
    basic_auth: tuple[str, str] | str | None = None,
    read_only: bool = False,
    page_size: int = 50,
    refresh: float = 2.0,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    forwarded_allow_ips: Sequence[str] = (),
    secure_cookies: bool = False,
    session_max_age: float = DEFAULT_SESSION_MAX_AGE,
    secret: bytes | str | None = None,
    title: str = "chronos_trio",
    extensions: Extensions | None = None,
) -> ASGIApp:
    """The web dashboard over ``target`` (an App: its store and schedules; or
    an Inspector) as an ASGI app, to serve with
    :func:`~chronos_trio.dashboard.serve_dashboard` or to mount in your own
    ASGI server (it must run on Trio, like the store: Hypercorn's Trio worker).

    ``token``: every request needs ``Authorization: Bearer TOKEN`` or a
    session signed in with ``?token=TOKEN``. ``basic_auth``: HTTP Basic with
    ``(user, password)`` or ``"user:password"``. Neither: no authentication
    (keep it on loopback, or behind your own). ``read_only``: no action is
    offered, and every action endpoint answers 403. ``page_size``: jobs per
    page. ``refresh``: seconds between live updates. ``allowed_origins``:
    origins besides the request's own host that may post actions (a proxy
    that rewrites Host).

    ``allowed_hosts``: the names besides ``localhost``, ``127.0.0.1`` and
    ``[::1]`` a request's ``Host`` may give (``jobs.example.com``,
    ``name:port``, ``*.example.com``; ``*``: any): another Host is a 400
    before anything runs (DNS rebinding). An IP address the connection
    arrived on is allowed too. ``forwarded_allow_ips``: proxies (addresses
    or networks, ``*``: any peer) whose ``X-Forwarded-Proto`` and
    ``X-Forwarded-Host`` are believed. ``secure_cookies``: mark cookies
    ``Secure`` always (else only on HTTPS requests, forwarded ones
    included). ``session_max_age``: seconds a session lasts (default 12 h;
    its expiry is signed inside the cookie). ``secret``: the key that signs
    sessions and CSRF tokens, at least 32 bytes (default: random, so a
    restart signs everyone out; give every replica behind a load balancer
    the same one). ``extensions``: an app's own pages and panels
    (:class:`~chronos_trio.dashboard.Extensions`), behind the same guard.

    Logs a warning (``chronos_trio.dashboard``) when it has no token and no
    basic auth. The dashboard does not close the store: its owner does.
    Every option is checked here, before anything is served (see
    docs/bad-input.md): ``TypeError`` for a ``target`` that is neither an
    App nor an Inspector (or an unknown option name); ``ValueError`` for
    both a token and basic auth, a token or credential that is not a
    non-empty string, ``read_only`` or ``secure_cookies`` not a bool, a
    host, origin or proxy list given as one string or holding an empty or
    non-string entry, a bad allowed host or proxy address, a secret that is
    not bytes or text or is short, ``page_size`` not an int >= 1,
    ``refresh`` or ``session_max_age`` not a finite number > 0, or an empty
    ``title``; ``TypeError`` for ``extensions`` that is not an Extensions.
    """
    if not isinstance(target, App | Inspector):
        raise TypeError(f"dashboard_app takes an App or an Inspector, got {target!r}")
    if token is not None and not isinstance(token, str):
        raise ValueError(f"token must be a non-empty string (or None), got {token!r}")
    if isinstance(basic_auth, str):
        basic_auth = parse_basic_auth(basic_auth)
    elif basic_auth is not None and not (
        isinstance(basic_auth, tuple)
        and len(basic_auth) == 2
        and all(isinstance(part, str) for part in basic_auth)
    ):
        raise ValueError(  # the value may hold a password: not shown
            f"basic_auth must be (user, password) or 'user:password', "
            f"got a {type(basic_auth).__name__}"
        )
    credentials = Credentials(token=token, basic=basic_auth)
    check_bool("read_only", read_only)
    check_bool("secure_cookies", secure_cookies)
    check_positive_int("page_size", page_size)
    check_seconds("refresh", refresh)
    check_seconds("session_max_age", session_max_age)
    if secret is not None and not isinstance(secret, bytes | str):
        raise ValueError(f"secret must be bytes or a string (or None), got {type(secret).__name__}")
    check_text("title", title, strip=True)
    if extensions is not None and not isinstance(extensions, Extensions):
        raise TypeError(
            f"extensions must be a chronos_trio.dashboard.Extensions, got {extensions!r}"
        )
    allowed_origins = _names("allowed_origins", allowed_origins)
    hosts = HostPolicy.make(
        _names("allowed_hosts", allowed_hosts), _names("forwarded_allow_ips", forwarded_allow_ips)
    )
    signer = Signer(signing_key(secret, credentials))
    inspector = target.inspector() if isinstance(target, App) else target
    options = Options(read_only, page_size, refresh, allowed_origins, title)
    views = Views(inspector, options, signer, extensions)
    actions = Actions(views)
    search = SearchPages(views, actions)
    files = static_files()

    async def static(request: Request) -> Response:
        found = files.get(request.path_params["name"])
        if found is None:
            raise HTTPException(404, "no such file")
        body, media_type = found
        return Response(body, media_type=media_type, headers={"cache-control": "max-age=300"})

    def error_page(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def handle(request: Request, exc: Exception) -> Response:
            code = exc.status_code if isinstance(exc, HTTPException) else status
            message = exc.detail if isinstance(exc, HTTPException) else str(exc)
            message = shorten(" ".join(str(message).split()), MAX_MESSAGE)
            return await views.render(
                request, "error.html", status=code, code=code, message=message, nav_at=""
            )

        return handle

    routes = [
        Route("/", views.queues, methods=["GET"]),
        Route("/queue", views.queue, methods=["GET"]),
        Route("/jobs", views.jobs, methods=["GET"]),
        Route("/job", views.job, methods=["GET"]),
        Route("/batch", views.batch, methods=["GET"]),
        Route("/lookup", views.lookup, methods=["GET"]),
        Route("/workflows/{wid:path}", views.workflow, methods=["GET"]),
        Route("/schedules", views.schedules, methods=["GET"]),
        Route("/limits", views.limits, methods=["GET"]),
        Route("/workers", views.workers, methods=["GET"]),
        Route("/search", search.search, methods=["GET"]),
        Route("/search/confirm", search.confirm, methods=["GET"]),
        Route("/search/bulk", search.bulk, methods=["POST"]),
        Route("/confirm/{name}", actions.confirm, methods=["GET"]),
        Route("/actions/{name}", actions.perform, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/events", events_endpoint(inspector, refresh), methods=["GET"]),
        Route("/charts", charts_endpoint(views), methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        *extension_routes(views, actions, extensions),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: error_page(500),
        UnknownQueue: error_page(404),
        UnknownJob: error_page(404),
        ActionRefused: error_page(409),
        TopologyError: error_page(409),
        InspectorError: error_page(400),
        StoreError: error_page(503),
        ValueError: error_page(400),
    }
    app = Starlette(routes=routes, exception_handlers=handlers)
    guard = Guard(
        app,
        credentials=credentials,
        signer=signer,
        hosts=hosts,
        max_age=session_max_age,
        secure_cookies=secure_cookies,
    )
    if credentials.token is None and credentials.basic is None:
        log_event(
            log,
            logging.WARNING,
            "dashboard without authentication: whoever reaches it can see every job"
            + ("" if read_only else " and act on it")
            + "; give a token or basic auth unless a proxy in front authenticates",
            read_only=read_only,
        )
    return guard


def _names(option: str, given: object) -> tuple[str, ...]:
    """``given`` as a tuple of non-empty strings: ``ValueError`` naming
    ``option`` for one string (it would be read letter by letter), an
    entry that is not a non-empty string, or something not iterable."""
    if isinstance(given, str | bytes):
        raise ValueError(f"{option} must be a list of strings, not one string (give [{given!r}])")
    if not isinstance(given, Iterable):
        raise ValueError(f"{option} must be a list of non-empty strings, got {given!r}")
    entries = tuple(given)
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"{option} must be a list of non-empty strings, got {entry!r} in it")
    return entries


__all__ = ["ASGIApp", "dashboard_app"]
