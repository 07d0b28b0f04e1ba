"""What the dashboard tests share: a store with jobs in every state, one of
them carrying markup in its payload and its error."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from chronos_trio import App, QueueWeight
from chronos_trio.dashboard import dashboard_app, serve_dashboard
from chronos_trio.store import SettleKind, Settlement, Store
from tests.test_cli import populate
from tests.tests_app import Note, make_app

T = TypeVar("T")

#: Markup in a payload and an error: must show as text, never run.
XSS = "<script>window.__xss = 1; alert('xss')</script>"
XSS_ERROR = '<img src=x onerror="window.__xss = 2">'


async def populate_dashboard(store: Store) -> App:
    """``tests.test_cli.populate`` (every state of queue ``default``, and
    ``note-1`` in ``critical``) plus ``xss-1``: a dead job of ``critical``
    whose payload and last error hold markup. Returns the app on ``store``."""
    await populate(store)
    app = make_app(None)
    app.use_store(store)
    await app.tasks["tests.note"].enqueue(Note(XSS), job_id="xss-1")
    leased = (
        await store.lease([QueueWeight("critical")], 10, worker_id="w:1:0", lease_duration=600)
    ).jobs
    by_id = {lj.job.id: lj for lj in leased}
    await store.settle([Settlement(by_id["xss-1"].ref, SettleKind.DEAD, XSS_ERROR)])
    # note-1 was leased too: hand it back to ready
    await store.settle([Settlement(by_id["note-1"].ref, SettleKind.RETRY, "again")])
    return app


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


# -- a served dashboard and a real browser -------------------------------------------
#: A name of "another site" the test browser resolves to 127.0.0.1.
REBOUND_NAME = "rebind.evil.example"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # DNS rebinding without a DNS server: this name resolves to loopback
    f"--host-resolver-rules=MAP {REBOUND_NAME} 127.0.0.1",
)


class ServedDashboard:
    """``dashboard_app(app, **options)`` served by Hypercorn's Trio worker on
    a free loopback port, in a thread with its own Trio run. The store lives
    in that run: :meth:`call` runs a coroutine function there (the memory
    store is not thread-safe, and its waiters belong to that run)."""

    def __init__(self, app: App, **options: Any) -> None:
        self.app = app
        self.options = options
        self.url = ""
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dashboard", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    asgi = dashboard_app(self.app, **self.options)

                    async def serve(task_status: trio.TaskStatus[list[str]]) -> None:
                        await serve_dashboard(
                            asgi, host="127.0.0.1", port=0, task_status=task_status
                        )

                    [self.url] = await nursery.start(serve)
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by __enter__ / __exit__
            self._error = exc
        finally:
            self._ready.set()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def __enter__(self) -> ServedDashboard:
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None or not self.url:
            raise RuntimeError(f"the dashboard did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._scope is not None and self._token is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the dashboard thread did not stop"


def browser_missing() -> str | None:
    """Why a real browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (Debian: apt-get install chromium chromium-driver)"
    return None


def open_browser(profile: str, *, width: int = 1280, height: int = 900) -> Any:
    """Headless Chromium driven by Debian's chromedriver, on a fresh profile
    (``profile``: an empty directory)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
