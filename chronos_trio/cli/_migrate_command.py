"""``python -m chronos_trio migrate [URL] [--check] [--json]``: bring a
PostgreSQL store's schema to this code's version, or (``--check``) say
whether it is there.

The URL is the store's (``postgresql://...?schema=...``; default
``$CHRONOS_URL``). Migrations are applied as the store applies them at
first use with ``migrate=auto`` (``store.postgres._migrate``: each once, in
order, in one transaction under an advisory lock), so running this while
workers start is safe. ``--check`` changes nothing and exits
``EXIT_PENDING`` (10) while migrations are pending, printing them.
Runs no event loop: one blocking connection.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..records._errors import StoreError
from ..store._schemes import redact, scheme_of
from ._loading import url_from
from ._options import (
    EXIT_BAD_URL,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    one_line,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        nargs="?",
        metavar="URL",
        help="the store's postgresql:// URL, with its ?schema= (default: $CHRONOS_URL)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 10 when migrations are pending (and list them)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the command for the parsed ``args``; its exit code."""
    out = out or sys.stdout
    url = url_from(args.url)
    if url is None:
        raise CliError("migrate needs the store's URL (URL, or $CHRONOS_URL)", EXIT_USAGE)
    try:
        scheme = scheme_of(url)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_BAD_URL) from None
    if scheme.name not in ("postgresql", "postgres"):
        raise CliError(
            f"{redact(url)!r}: migrate is for PostgreSQL stores (postgresql://); "
            f"the {scheme.name} store has no schema to migrate",
            EXIT_BAD_URL,
        )
    try:
        import psycopg

        from ..store.postgres import _migrate
        from ..store.postgres._url import parse_url
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise CliError(
            f"{exc}: install the PostgreSQL extra (pip install 'chronos_trio[postgres]')",
            EXIT_BAD_URL,
        ) from None
    try:
        options = parse_url(url)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_BAD_URL) from None
    schema = options.schema
    conninfo = options.conninfo
    if "connect_timeout" not in conninfo:
        conninfo += ("&" if "?" in conninfo else "?") + "connect_timeout=10"
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            before = _migrate.applied_version(conn, schema)
            if before > _migrate.latest_version() or not args.check:
                applied = _migrate.migrate(conn, schema)  # refuses a newer schema
            else:
                applied = []
            after = _migrate.applied_version(conn, schema)
    except psycopg.OperationalError as exc:
        raise CliError(
            f"cannot reach PostgreSQL at {redact(url)}: {one_line(str(exc))}", EXIT_UNAVAILABLE
        ) from None
    except psycopg.Error as exc:
        raise CliError(f"PostgreSQL at {redact(url)}: {one_line(str(exc))}", EXIT_REFUSED) from None
    except StoreError as exc:  # a schema newer than this code
        raise CliError(one_line(str(exc)), EXIT_REFUSED) from None
    pending = [m for m in _migrate.migrations() if m.version > after]
    report: dict[str, Any] = {
        "schema": schema,
        "version": after,
        "latest": _migrate.latest_version(),
        "applied": [{"version": m.version, "name": m.name} for m in applied],
        "pending": [{"version": m.version, "name": m.name} for m in pending],
    }
    if args.json:
        print(json.dumps(report), file=out)
    else:
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}", file=out)
        for m in pending:
            print(f"pending {m.version:04d}_{m.name}", file=out)
        state = "current" if not pending else f"{len(pending)} migration(s) pending"
        print(
            f"schema {schema!r} at version {after} of {_migrate.latest_version()}: {state}",
            file=out,
        )
    return EXIT_PENDING if pending else EXIT_OK


__all__ = ["add_arguments", "run"]
