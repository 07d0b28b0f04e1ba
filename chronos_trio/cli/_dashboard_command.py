"""``python -m chronos_trio dashboard [APP] [--url URL] --port P``: the web
dashboard (``chronos_trio.dashboard``) served on Hypercorn's Trio worker.

The store comes from APP and/or ``--url`` as for the admin commands. The
token may come from ``$CHRONOS_DASHBOARD_TOKEN`` (a command line is visible
to every user of the machine in ``ps``); so may basic auth, from
``$CHRONOS_DASHBOARD_BASIC_AUTH``, and the signing secret replicas share,
from ``$CHRONOS_DASHBOARD_SECRET``.

Requests must name an allowed ``Host``: the loopback names, the ``--host``
it binds (unless a wildcard such as ``0.0.0.0``), the address a connection
arrived on, and each ``--allowed-host``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from ..records._log import log_event
from ._options import EXIT_OK, EXIT_USAGE, CliError, int_at_least, seconds

if TYPE_CHECKING:
    import trio

    from ..app import Inspector
    from ..dashboard import ASGIApp

TOKEN_ENV = "CHRONOS_DASHBOARD_TOKEN"
BASIC_ENV = "CHRONOS_DASHBOARD_BASIC_AUTH"
SECRET_ENV = "CHRONOS_DASHBOARD_SECRET"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: Binds that are every address of the machine, not a name a browser uses.
WILDCARDS = ("0.0.0.0", "::", "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "app", nargs="?", metavar="APP", help="module:attribute of the App (optional with --url)"
    )
    parser.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    parser.add_argument("--port", type=int_at_least(0), required=True, help="port (0: any free)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--token", help=f"require this token (default: ${TOKEN_ENV})")
    auth.add_argument(
        "--basic-auth", metavar="USER:PASS", help=f"require HTTP Basic auth (default: ${BASIC_ENV})"
    )
    parser.add_argument(
        "--read-only", action="store_true", help="offer no actions; action endpoints answer 403"
    )
    parser.add_argument(
        "--refresh", type=seconds(), default=2.0, help="seconds between live updates (default 2)"
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="another origin that may post actions, e.g. https://admin.example.com "
        "behind a proxy that rewrites Host (repeatable)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a Host requests may name besides localhost, 127.0.0.1, [::1] and --host: "
        "jobs.example.com, NAME:PORT, *.example.com, or * for any (repeatable)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        action="append",
        default=[],
        metavar="IPS",
        help="proxies (comma-separated addresses or networks, * for any) whose "
        "X-Forwarded-Proto and X-Forwarded-Host are believed (repeatable)",
    )
    parser.add_argument(
        "--secure-cookies",
        action="store_true",
        help="mark cookies Secure on every request (default: on HTTPS requests)",
    )
    parser.add_argument(
        "--session-max-age",
        type=seconds(),
        metavar="S",
        help="seconds a browser session lasts (default 43200: 12 h)",
    )
    parser.add_argument(
        "--secret",
        help="the key (at least 32 bytes) that signs sessions; give every replica behind "
        f"a load balancer the same (default: ${SECRET_ENV}, else random)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from ..app import Inspector
    from ..dashboard import dashboard_app
    from ..dashboard._security import DEFAULT_SESSION_MAX_AGE
    from ._loading import describe_store, load_app, resolve_shared_store, url_from

    token = args.token or (None if args.basic_auth else os.environ.get(TOKEN_ENV) or None)
    basic = args.basic_auth or (None if token else os.environ.get(BASIC_ENV) or None)
    secret = args.secret or os.environ.get(SECRET_ENV) or None
    allowed_hosts = list(args.allowed_host)
    if args.host not in WILDCARDS and args.host not in LOOPBACK:
        allowed_hosts.append(f"[{args.host}]" if ":" in args.host else args.host)
    app = load_app(args.app) if args.app else None
    url = url_from(args.url)
    store = resolve_shared_store(app, url)
    inspector = Inspector(store, app=app)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # Hypercorn's own "Running on" line would repeat ours; its errors still show
    logging.getLogger("chronos_trio.dashboard").setLevel(logging.WARNING)
    logging.getLogger("chronos_trio.dashboard.access").setLevel(logging.INFO)
    try:
        asgi = dashboard_app(
            inspector,
            token=token,
            basic_auth=basic,
            read_only=args.read_only,
            refresh=args.refresh,
            allowed_origins=args.allowed_origin,
            allowed_hosts=allowed_hosts,
            forwarded_allow_ips=args.forwarded_allow_ips,
            secure_cookies=args.secure_cookies,
            session_max_age=args.session_max_age or DEFAULT_SESSION_MAX_AGE,
            secret=secret,
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    where = describe_store(app, url, store)
    open_to_all = token is None and basic is None and args.host not in LOOPBACK
    trio.run(_serve, asgi, inspector, where, args, open_to_all)
    return EXIT_OK


async def _serve(
    asgi: ASGIApp, inspector: Inspector, where: str, args: argparse.Namespace, open_to_all: bool
) -> None:
    import trio

    from ..dashboard import serve_dashboard
    from ..records._errors import sole_exception
    from ._loading import check_store

    async def serve(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve_dashboard(
            asgi,
            host=args.host,
            port=args.port,
            access_log=args.access_log,
            task_status=task_status,
        )

    try:
        await check_store(inspector.store, where)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            binds = await nursery.start(serve)
            mode = " (read-only)" if args.read_only else ""
            print(f"dashboard for {where}{mode} on {', '.join(binds)}", file=sys.stderr)
            if open_to_all:
                log_event(
                    logging.getLogger("chronos_trio.dashboard"),
                    logging.WARNING,
                    "no --token or --basic-auth, and the address is not loopback: "
                    "anyone who reaches this port can see your jobs",
                    host=args.host,
                )
    except BaseException as exc:
        inner = sole_exception(exc)
        if isinstance(inner, OSError):
            raise CliError(
                f"cannot serve on {args.host}:{args.port}: {inner}", EXIT_USAGE
            ) from None
        if isinstance(inner, CliError | KeyboardInterrupt):
            raise inner from None
        raise
    finally:
        with trio.CancelScope(shield=True):
            await inspector.aclose()


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    """SIGTERM or SIGINT stops serving (open connections get
    ``GRACEFUL_TIMEOUT``), and the command exits 0."""
    import signal

    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


__all__ = ["add_arguments", "run"]
