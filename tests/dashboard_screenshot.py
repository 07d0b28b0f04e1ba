"""Make ``docs/dashboard.png``: the queues page over a demo store, in headless
Chromium (the browser tests' set-up), and the console pages beside it;
``search`` makes ``docs/dashboard-search.png`` alone: the search page (dead
jobs whose error says 422, two rows ticked for a bulk action); ``--history``
makes ``docs/dashboard-history.png`` alone: a queue page's history charts
over three hours of demo aggregates.

    PYTHONPATH=. .venv/bin/python -m tests.dashboard_screenshot [docs/dashboard.png]
    PYTHONPATH=. .venv/bin/python -m tests.dashboard_screenshot search [docs/dashboard-search.png]
    PYTHONPATH=. .venv/bin/python -m tests.dashboard_screenshot --history [OUT.png]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from chronos_trio import App, JobContext, MemoryStore, NewJob, QueueWeight, WorkerInfo
from chronos_trio.dashboard import ExtensionRequest, Extensions
from chronos_trio.records import KindCounts, NoteWrite, Progress
from chronos_trio.records._aggregates import BUCKETS
from chronos_trio.store import SettleKind, Settlement
from tests._dashboard import ServedDashboard, open_browser

OUT = Path(__file__).resolve().parent.parent / "docs" / "dashboard.png"
SEARCH_OUT = OUT.with_name("dashboard-search.png")
OUT_HISTORY = OUT.with_name("dashboard-history.png")


@attrs.frozen
class Email:
    to: str


@attrs.frozen
class Charge:
    order: int
    cents: int


@attrs.frozen
class Report:
    name: str


class ShiftedClock:
    """The wall clock moved back by :attr:`shift` seconds: the demo's store
    clock, so its aggregates can be added in the minutes of the last hours."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() - self.shift


def demo_app(clock: ShiftedClock | None = None) -> App:
    app = App(MemoryStore(clock=clock))

    @app.task("email.send", queue="email")
    async def send(args: Email, job: JobContext) -> None: ...

    @app.task("billing.charge", queue="billing")
    async def charge(args: Charge, job: JobContext) -> None: ...

    @app.task("reports.build", queue="reports")
    async def build(args: Report, job: JobContext) -> None: ...

    app.cron("*/5 * * * *", Report("digest"))
    return app


async def populate_demo(app: App) -> None:
    """A few queues with jobs in most states, a promoted queue (one version
    draining) and a paused one."""
    store = app.store
    send, charge, build = (app.tasks[k] for k in ("email.send", "billing.charge", "reports.build"))
    await send.enqueue_many([Email(f"user{i}@example.com") for i in range(46)])
    await charge.enqueue_many([Charge(1000 + i, 100 * i) for i in range(14)])
    await build.enqueue_many([Report(f"weekly-{i}") for i in range(3)])
    await app.inspector().promote("billing", partitions=4)
    await charge.enqueue_many([Charge(2000 + i, 250) for i in range(9)])
    for i in range(12):
        await send.enqueue(Email(f"later{i}@example.com"), delay=600 + 60 * i)
    plan = {"email": (6, 9, 3, 2), "billing": (3, 4, 1, 2), "reports": (1, 0, 0, 1)}
    for queue, (keep, ok, retry, dead) in plan.items():
        leased = (
            await store.lease(
                [QueueWeight(queue)],
                keep + ok + retry + dead,
                worker_id=f"web-{queue}:4{len(queue)}1:0",
                lease_duration=120,
            )
        ).jobs
        settle = []
        for n, lj in enumerate(leased[keep:]):
            if n < ok:
                settle.append(Settlement(lj.ref, SettleKind.SUCCEEDED, retain_for=3600))
            elif n < ok + retry:
                settle.append(Settlement(lj.ref, SettleKind.RETRY, "TimeoutError", retry_delay=90))
            else:
                settle.append(Settlement(lj.ref, SettleKind.DEAD, "ValueError: upstream said 422"))
        await store.settle(settle)
    await app.inspector().pause("reports")


def screenshot(out: Path, *, driver: Any | None = None) -> None:
    """Serve the demo dashboard, load its queues page, save it as PNG to ``out``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    clock = ShiftedClock()
    app = demo_app(clock)
    trio.run(populate_demo, app)
    trio.run(populate_history, app, clock)
    with tempfile.TemporaryDirectory() as profile:
        own = driver is None
        browser = open_browser(profile, width=1280, height=720) if own else driver
        try:
            with ServedDashboard(app, title="chronos_trio", refresh=0.5) as dash:
                browser.get(f"{dash.url}/")
                WebDriverWait(browser, 10).until(
                    lambda d: d.find_element(By.ID, "live").text.startswith("live")
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                browser.save_screenshot(str(out))
        finally:
            if own:
                browser.quit()


# -- the operator's console pages (issue 30: job story, purge, extensions, phones) --------
#: page file name -> (path, window width, element scrolled to the top or
#: ""): written beside ``docs/dashboard.png``.
CONSOLE_PAGES = {
    "dashboard-job-story.png": ("/job?id=weekly-report-7", 1280, "story-title"),
    "dashboard-purge.png": ("/confirm/purge?queue=email", 1280, ""),
    "dashboard-extension.png": ("/", 1280, "unserved"),
    "dashboard-phone.png": ("/queue?name=email", 400, ""),
}


async def populate_story(app: App) -> None:
    """``weekly-report-7``: a job with a story: it failed twice (on two
    workers, an error each), logged lines, and is running its third attempt."""
    store = app.store
    # a live worker of email and billing, and a job of a kind it cannot run
    await store.beat_worker(
        WorkerInfo(
            "web-1:411:0", "web-1", 411, ("email", "billing"), 16, 0.0, 0.0, 0, (),
            ("billing.charge", "email.send"),
        ),
        3600,
    )  # fmt: skip
    await store.enqueue_many(
        [
            NewJob("resize-1", "email", "images.resize", b'{"w": 64}'),
            NewJob("resize-2", "email", "images.resize", b'{"w": 128}'),
        ]
    )
    build = app.tasks["reports.build"]
    await build.enqueue(Report("weekly"), job_id="weekly-report-7", queue="reports-hot")
    errors = ["TimeoutError: warehouse query took over 30 s", "ConnectionResetError: db-2"]
    for attempt, error in enumerate([*errors, None], start=1):
        await store.promote_due(["reports-hot"], 10)  # the retry is due at once
        [lj] = (
            await store.lease(
                [QueueWeight("reports-hot")], 1, worker_id=f"web-{attempt}:41{attempt}:0",
                lease_duration=120,
            )
        ).jobs  # fmt: skip
        lines = (f"attempt {attempt}: reading 12 shards", f"shard {3 * attempt} of 12 done")
        await store.write_notes([NoteWrite(lj.ref, Progress(0.25 * attempt, "shards"), lines)])
        if error is None:
            return
        await trio.sleep(0.3)
        await store.settle(
            [Settlement(lj.ref, SettleKind.RETRY, error, retry_delay=0, started=lj.leased_at)]
        )


def console_extensions() -> Extensions:
    ext = Extensions()

    @ext.page("/billing", "Billing")
    async def billing(request: ExtensionRequest) -> dict[str, str]:
        return {"open invoices": "14", "charged today": "$1,240.00"}

    @ext.panel("queues", "Backlog by customer")
    async def backlog(request: ExtensionRequest) -> dict[str, str]:
        return {"acme": "31 jobs", "globex": "9 jobs", "initech": "2 jobs"}

    return ext


def screenshot_console(out_dir: Path, *, driver: Any | None = None) -> list[Path]:
    """The console pages (:data:`CONSOLE_PAGES`) over the demo store, one PNG
    each in ``out_dir``; returns their paths."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    app = demo_app()
    trio.run(populate_demo, app)
    trio.run(populate_story, app)
    written = []
    with tempfile.TemporaryDirectory() as profile:
        own = driver is None
        browser = open_browser(profile, width=1280, height=900) if own else driver
        size = browser.get_window_size()
        try:
            with ServedDashboard(app, refresh=0.5, extensions=console_extensions()) as dash:
                for name, (path, width, top) in CONSOLE_PAGES.items():
                    browser.set_window_size(width, 900)
                    browser.get(dash.url + path)
                    WebDriverWait(browser, 10).until(
                        lambda d: d.find_element(By.ID, "live").text.startswith("live")
                    )
                    if top:
                        browser.execute_script(
                            "document.getElementById(arguments[0]).scrollIntoView()", top
                        )
                    out_dir.mkdir(parents=True, exist_ok=True)
                    browser.save_screenshot(str(out_dir / name))
                    written.append(out_dir / name)
        finally:
            browser.set_window_size(size["width"], size["height"])
            if own:
                browser.quit()
    return written


def screenshot_search(out: Path, *, driver: Any | None = None) -> None:
    """Serve the demo dashboard, search its dead jobs whose error says 422,
    tick two rows, save the page as PNG to ``out``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    app = demo_app()
    trio.run(populate_demo, app)
    with tempfile.TemporaryDirectory() as profile:
        own = driver is None
        browser = open_browser(profile, width=1280, height=1150) if own else driver
        try:
            with ServedDashboard(app, title="chronos_trio", refresh=0.5) as dash:
                browser.get(f"{dash.url}/search?state=dead&error=422")
                WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "results"))
                for box in browser.find_elements(By.CSS_SELECTOR, "input.pick")[:2]:
                    box.click()
                out.parent.mkdir(parents=True, exist_ok=True)
                browser.save_screenshot(str(out))
        finally:
            if own:
                browser.quit()


async def populate_history(app: App, clock: ShiftedClock) -> None:
    """Three hours of the email queue's minutes: a steady load of two kinds
    with a morning burst, retries and a short outage of failures."""
    rng = random.Random(30)
    store = app.store
    assert isinstance(store, MemoryStore)
    for ago in range(180, -1, -1):
        clock.shift = ago * 60.0
        burst = 3 if 40 <= ago <= 55 else 1
        outage = 95 <= ago <= 101
        counts = []
        for queue, kind, base, at in (
            ("email", "email.send", 60, 5),
            ("email", "email.digest", 8, 8),
            ("billing", "billing.charge", 12, 9),
        ):
            n = int(base * burst * (0.8 + 0.4 * rng.random()))
            hist = [0] * BUCKETS
            hist[at] = int(n * 0.7)
            hist[at + 1] = n - int(n * 0.7) - 1
            hist[at + 3 if ago % 17 else at + 5] = 1
            failed = min(n // 2, rng.randint(5, 15)) if outage else int(rng.random() < 0.05)
            retried = rng.randint(0, 3) + (10 if outage else 0)
            counts.append(KindCounts(queue, kind, n - failed, failed, retried, tuple(hist)))
        await store.add_aggregates(counts, keep=86400)
    clock.shift = 0.0


def history_screenshot(out: Path, *, driver: Any | None = None) -> None:
    """Serve a demo dashboard with three hours of aggregates, load the email
    queue's page (its history charts), save it as PNG to ``out``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    clock = ShiftedClock()
    app = App(MemoryStore(clock=clock))

    @app.task("email.send", queue="email")
    async def send(args: Email, job: JobContext) -> None: ...

    async def populate() -> None:
        await send.enqueue_many([Email(f"user{i}@example.com") for i in range(12)])
        await populate_history(app, clock)

    trio.run(populate)
    with tempfile.TemporaryDirectory() as profile:
        own = driver is None
        browser = open_browser(profile, width=1280, height=1100) if own else driver
        try:
            with ServedDashboard(app, title="chronos_trio", refresh=0.5) as dash:
                browser.get(f"{dash.url}/queue?name=email&hours=3")
                WebDriverWait(browser, 10).until(
                    lambda d: d.find_element(By.ID, "live").text.startswith("live")
                )
                browser.execute_script(
                    "document.getElementById('charts').scrollIntoView();"
                    "var d = document.querySelector('details.chart-data'); if (d) d.open = false;"
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                browser.save_screenshot(str(out))
        finally:
            if own:
                browser.quit()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["search"]:
        target = Path(args[1]) if len(args) > 1 else SEARCH_OUT
        screenshot_search(target)
        print(f"wrote {target}")
    elif args[:1] == ["--history"]:
        target = Path(args[1]) if len(args) > 1 else OUT_HISTORY
        history_screenshot(target)
        print(f"wrote {target}")
    else:
        target = Path(args[0]) if args else OUT
        screenshot(target)
        print(f"wrote {target}")
        for path in screenshot_console(target.parent):
            print(f"wrote {path}")
