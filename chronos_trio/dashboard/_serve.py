"""Serving the dashboard Trio-natively: Hypercorn's Trio worker."""

from __future__ import annotations

import logging

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from ..records._options import check_bool, check_text
from ._app import ASGIApp

#: How long open connections (the event streams) get to finish at shutdown.
GRACEFUL_TIMEOUT = 1.0


async def serve_dashboard(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    access_log: bool = False,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (from :func:`dashboard_app`) on ``host:port`` until
    cancelled (or Ctrl-C). With ``nursery.start`` it reports the addresses
    it listens on (``["http://127.0.0.1:8080"]``; port 0 picks a free one).
    Raises ``ValueError`` before anything is bound for an empty ``host``, a
    ``port`` that is not an int from 0 to 65535 or an ``access_log`` that is
    not a bool; ``OSError`` when the port cannot be bound."""
    check_text("host", host, strip=True)
    if type(port) is not int or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int from 0 to 65535, got {port!r}")
    check_bool("access_log", access_log)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT
    config.accesslog = logging.getLogger("chronos_trio.dashboard.access") if access_log else None
    config.errorlog = logging.getLogger("chronos_trio.dashboard")
    await serve(app, config, task_status=task_status)  # type: ignore[arg-type]


__all__ = ["serve_dashboard"]
