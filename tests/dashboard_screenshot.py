"""Make ``docs/dashboard.png``: the queues page over a demo store, in headless
Chromium (the browser tests' set-up).

    PYTHONPATH=. .venv/bin/python -m tests.dashboard_screenshot [docs/dashboard.png]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import trio

from chronos_trio import App, JobContext, MemoryStore, QueueWeight
from chronos_trio.store import SettleKind, Settlement
from tests._dashboard import ServedDashboard, open_browser

OUT = Path(__file__).resolve().parent.parent / "docs" / "dashboard.png"


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


def demo_app() -> App:
    app = App(MemoryStore())

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

    app = demo_app()
    trio.run(populate_demo, app)
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


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    screenshot(target)
    print(f"wrote {target}")
