"""From the command line to an App and a store: ``module:attr`` import, the
store URL (``--url`` > ``$CHRONOS_URL`` > the app's own), and a quick
reachability check. Every failure is a :class:`CliError` with one line."""

from __future__ import annotations

import importlib
import os
import sys

import trio

from ..app import App
from ..store import Store, StoreError, open_store, redact, scheme_of
from ._options import (
    EXIT_BAD_URL,
    EXIT_NO_APP,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    one_line,
)

URL_ENV = "CHRONOS_URL"
#: How long the start-up reachability check waits for the store.
CHECK_TIMEOUT = 5.0


def load_app(spec: str) -> App:
    """Import ``module:attr`` (``module`` alone means ``module:app``; ``attr``
    may be dotted). The current directory is importable, as with ``python -m``."""
    module_name, _, attr = spec.partition(":")
    module_name, attr = module_name.strip(), (attr.strip() or "app")
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise CliError(
            f"bad APP {spec!r}: expected module:attribute, e.g. myproject.jobs:app", EXIT_NO_APP
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CliError(
                f"cannot import app module {module_name!r}: no module named {exc.name!r} "
                "(run from the project directory or set PYTHONPATH)",
                EXIT_NO_APP,
            ) from None
        raise CliError(
            f"importing {module_name!r} failed: ModuleNotFoundError: {exc}", EXIT_NO_APP
        ) from None
    except SyntaxError as exc:
        raise CliError(
            f"importing {module_name!r} failed: SyntaxError: {exc.msg} "
            f"({exc.filename}, line {exc.lineno})",
            EXIT_NO_APP,
        ) from None
    except Exception as exc:
        raise CliError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {one_line(str(exc))}",
            EXIT_NO_APP,
        ) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CliError(
                f"module {module_name!r} has no attribute {attr!r}", EXIT_NO_APP
            ) from None
    if not isinstance(obj, App):
        raise CliError(
            f"{module_name}:{attr} is not a chronos_trio.App (it is a {type(obj).__name__!r})",
            EXIT_NO_APP,
        )
    return obj


def url_from(flag: str | None) -> str | None:
    """``--url`` if given, else ``$CHRONOS_URL`` if set, else None (use the app's)."""
    return flag or os.environ.get(URL_ENV) or None


def resolve_store(app: App | None, url: str | None) -> Store:
    """The store commands act on: ``url`` (replacing the app's store) or the
    app's own. ``CliError`` for a bad URL or when there is neither."""
    try:
        if url is not None:
            if app is not None:
                app.use_store(url)
                return app.store
            return open_store(url)
        if app is not None:
            return app.store
    except ValueError as exc:
        bad = url if url is not None else (app.store_url if app is not None else "")
        message = str(exc) if bad in str(exc) else f"bad store URL {redact(bad)!r}: {exc}"
        raise CliError(message, EXIT_BAD_URL) from None
    except ImportError as exc:  # e.g. a Redis URL without the Redis backend installed
        raise CliError(f"cannot open store {redact(url or '')}: {exc}", EXIT_BAD_URL) from None
    except StoreError as exc:
        raise CliError(f"cannot open store: {exc}", EXIT_UNAVAILABLE) from None
    raise CliError(
        f"no store given: pass APP (module:attr) or --url, or set ${URL_ENV}", EXIT_USAGE
    )


def resolve_shared_store(app: App | None, url: str | None) -> Store:
    """:func:`resolve_store` for a command that looks at a store other
    processes use (the admin commands, the dashboard): ``CliError`` for a
    ``memory://`` URL, which lives inside one process."""
    if url is not None and not _shared(url):
        raise CliError(
            "memory:// lives inside one process and cannot be inspected from another: "
            "use the Redis URL your workers use",
            EXIT_BAD_URL,
        )
    return resolve_store(app, url)


def _shared(url: str) -> bool:
    """Whether ``url``'s store can be seen from another process (a malformed
    URL is left to :func:`resolve_store` to report)."""
    try:
        return scheme_of(url).shared
    except ValueError:
        return True


def describe_store(app: App | None, url: str | None, store: Store) -> str:
    if url is not None:
        return redact(url)
    memory = _is_memory(store)
    if app is not None and not memory:
        return redact(app.store_url)
    return "memory://" if memory else type(store).__name__


def _is_memory(store: Store) -> bool:
    """Whether ``store`` is a MemoryStore (without importing the memory store
    for a worker on Redis: while it is not imported, there is none)."""
    memory = sys.modules.get("chronos_trio.store.memory")
    return memory is not None and isinstance(store, memory.MemoryStore)


async def check_store(store: Store, where: str, *, timeout: float = CHECK_TIMEOUT) -> None:
    """One cheap store call, so an unreachable store is one clear error at
    start-up rather than a stream of retries."""
    try:
        with trio.move_on_after(timeout) as scope:
            await store.now()
    except StoreError as exc:
        raise CliError(f"cannot reach the store: {one_line(str(exc))}", EXIT_UNAVAILABLE) from None
    except ValueError as exc:  # a store that parses its URL on first use
        raise CliError(f"bad store URL {where!r}: {one_line(str(exc))}", EXIT_BAD_URL) from None
    if scope.cancelled_caught:
        raise CliError(f"the store at {where} did not answer within {timeout:g}s", EXIT_UNAVAILABLE)


__all__ = ["check_store", "load_app", "resolve_shared_store", "resolve_store", "url_from"]
