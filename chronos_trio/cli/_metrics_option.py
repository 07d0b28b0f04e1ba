"""``worker --metrics-port P [--metrics-host H]``: serve Prometheus metrics.

* One process: the worker's :class:`~chronos_trio.integrations.prometheus.PrometheusMetrics`
  (the app's, or one installed when the app has no metrics object) is
  served from prometheus-client's HTTP thread.
* ``--processes N``: ONE endpoint per host, served by the manager.
  Before the app (and prometheus-client) is imported, the manager makes a
  temporary directory and exports it as ``PROMETHEUS_MULTIPROC_DIR`` (or
  uses the one already set, which it then keeps); its children inherit the
  variable, so each writes its figures to its own files there
  (prometheus-client's multiprocess mode), and the manager serves their sum
  plus its own ``chronos_process_restarts_total``. It removes the directory
  it made when it exits. Children get the same options and do not serve.

Nothing here imports prometheus-client until the option is used.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..app._app import App
from ..records._log import log_event
from ._options import EXIT_USAGE, CliError, int_at_least

if TYPE_CHECKING:
    from ..integrations.prometheus import PrometheusMetrics

log = logging.getLogger("chronos_trio.cli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics (the prometheus extra)")
    group.add_argument(
        "--metrics-port",
        metavar="P",
        type=int_at_least(0),
        help="serve Prometheus metrics on http://HOST:P/metrics (with --processes N: "
        "one endpoint for the host, summed over the processes)",
    )
    group.add_argument(
        "--metrics-host", metavar="H", default="0.0.0.0", help="address to listen on (0.0.0.0)"
    )


def multiprocess_dir() -> tuple[str, bool]:
    """``$PROMETHEUS_MULTIPROC_DIR`` (kept), or a fresh directory exported
    in it (made, to remove at exit): the directory and whether it was made."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        os.makedirs(given, exist_ok=True)
        return given, False
    import tempfile  # only a metrics manager makes one: not at a worker's start

    made = tempfile.mkdtemp(prefix="chronos-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made, True


def install(app: App) -> PrometheusMetrics:
    """The app's PrometheusMetrics, or a new one set as its metrics object.
    CliError when the app has metrics of another kind or prometheus-client
    is not installed."""
    try:
        from ..integrations.prometheus import PrometheusMetrics
    except ImportError as exc:
        raise CliError(
            "--metrics-port needs prometheus-client "
            f"(pip install 'chronos_trio[prometheus]'): {exc}",
            EXIT_USAGE,
        ) from None
    current = app.registry.metrics
    if current is None:
        installed = PrometheusMetrics()
        app.registry.metrics = installed
        return installed
    if not isinstance(current, PrometheusMetrics):
        raise CliError(
            f"--metrics-port serves PrometheusMetrics, but the app's metrics object is a "
            f"{type(current).__qualname__}; pass App(metrics=PrometheusMetrics(...)) or none",
            EXIT_USAGE,
        )
    return current


@contextlib.contextmanager
def endpoint(args: argparse.Namespace, app: App, *, managing: bool, child: bool) -> Iterator[None]:
    """Serve ``/metrics`` while the body runs, as the process's role says
    (a child never serves). CliError when the port cannot be bound."""
    if args.metrics_port is None:
        yield
        return
    metrics = install(app)
    if child:
        yield
        return
    from ..integrations.prometheus import multiprocess_registry, serve_metrics

    registry = multiprocess_registry() if managing else metrics.registry
    try:
        server = serve_metrics(registry, args.metrics_port, args.metrics_host)
    except OSError as exc:
        raise CliError(
            f"--metrics-port {args.metrics_port}: cannot listen on {args.metrics_host}: {exc}",
            EXIT_USAGE,
        ) from None
    log_event(
        log,
        logging.INFO,
        "metrics served",
        url=f"http://{args.metrics_host}:{server.port}/metrics",
    )
    try:
        yield
    finally:
        server.close()


@contextlib.contextmanager
def manager_dir(args: argparse.Namespace, managing: bool) -> Iterator[None]:
    """For a manager serving metrics: the multiprocess directory, made
    (before the app is imported) and removed at exit."""
    if args.metrics_port is None or not managing:
        yield
        return
    path, made = multiprocess_dir()
    try:
        yield
    finally:
        if made:
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
