"""The dashboard in a real browser: Debian's Chromium, headless, driven by
Selenium through Debian's chromedriver, against the dashboard served by
Hypercorn's Trio worker on a loopback port.

Locally a missing chromium/chromedriver skips these tests; with ``CI=true``
it fails them (``.ci/run`` installs both)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chronos_trio import JobState, MemoryStore
from chronos_trio.store import Store
from tests._dashboard import (
    REBOUND_NAME,
    XSS,
    XSS_ERROR,
    ServedDashboard,
    browser_missing,
    open_browser,
    populate_dashboard,
)

#: Seconds any one wait in the browser may take.
WAIT = 10


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = browser_missing()
    if missing is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {missing}: the browser tests must run in CI")
        pytest.skip(missing)
    driver = open_browser(str(tmp_path_factory.mktemp("chromium-profile")))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser_fresh(browser: Any) -> Any:
    # every test's server listens on its own port of the same host, and
    # cookies do not tell ports apart: start each test without any
    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})
    return browser


def served(**options: Any) -> ServedDashboard:
    import trio

    store = MemoryStore()
    app = trio.run(populate_dashboard, store)
    return ServedDashboard(app, **options)


def wait_for(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(condition)


def job_state(dash: ServedDashboard, job_id: str) -> JobState | None:
    store: Store = dash.app.store
    job = dash.call(store.get_job, job_id)
    return None if job is None else job.state


def test_requeue_a_dead_job_from_the_queues_page(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(token="tok3n", refresh=0.2) as dash:
        driver.get(f"{dash.url}/?token=tok3n")  # signs in, then moves on to /
        wait_for(driver, lambda d: d.title.startswith("Queues"))
        dead = driver.find_element(By.CSS_SELECTOR, '[data-queue="default"][data-state="dead"]')
        assert dead.text == "2"
        # the script ran (the CSP allows ours) and the event stream is live
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text.startswith("live"))
        dead.click()
        wait_for(driver, lambda d: "dead jobs of" in d.title)
        driver.find_element(By.LINK_TEXT, "dead-1").click()
        wait_for(driver, lambda d: d.title.startswith("Job dead-1"))
        assert driver.find_element(By.ID, "job-state").text == "dead"
        assert "PayloadError: bad" in driver.find_element(By.ID, "last-error").text
        driver.find_element(By.ID, "action-requeue").click()
        wait_for(driver, lambda d: d.title.startswith("Requeue?"))
        assert job_state(dash, "dead-1") is JobState.DEAD, "the confirmation page changes nothing"
        driver.find_element(By.ID, "confirm").click()
        wait_for(driver, lambda d: d.find_elements(By.CLASS_NAME, "flash"))
        assert "dead job dead-1 requeued" in driver.find_element(By.CLASS_NAME, "flash").text
        assert driver.find_element(By.ID, "job-state").text == "ready"
        assert job_state(dash, "dead-1") is JobState.READY

        # the workers page, reached from the navigation bar
        driver.find_element(By.LINK_TEXT, "Workers").click()
        wait_for(driver, lambda d: d.title.startswith("Workers"))
        assert "No live workers" in driver.find_element(By.TAG_NAME, "main").text

        # live: a change in the store shows on the open page without a reload
        driver.get(f"{dash.url}/")
        cell = '[data-queue="default"][data-state="dead"]'
        assert driver.find_element(By.CSS_SELECTOR, cell).text == "1"
        dash.call(dash.app.inspector().requeue_dead, "default")
        wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, cell).text == "0")


def test_markup_in_a_payload_shows_as_text(browser_fresh: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served() as dash:
        driver.get(f"{dash.url}/job?id=xss-1")
        wait_for(driver, lambda d: d.title.startswith("Job xss-1"))
        assert XSS in driver.find_element(By.ID, "payload").text
        assert driver.find_element(By.ID, "last-error").text == XSS_ERROR
        assert driver.find_elements(By.CSS_SELECTOR, "main script, main img") == []
        assert driver.execute_script("return window.__xss === undefined")
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - raises when no alert is open


def test_read_only_mode_has_no_action_buttons(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(read_only=True) as dash:
        for path in ("/job?id=dead-1", "/queue?name=default"):
            driver.get(dash.url + path)
            wait_for(driver, lambda d: d.find_elements(By.TAG_NAME, "main"))
            assert driver.find_elements(By.CSS_SELECTOR, ".actions, a.button, [id^=action-]") == []
            assert driver.find_elements(By.CSS_SELECTOR, "form[method=post]") == []
            assert "Requeue" not in driver.find_element(By.TAG_NAME, "main").text
        driver.get(f"{dash.url}/confirm/requeue?id=dead-1&queue=default")
        assert "this dashboard is read-only" in driver.find_element(By.TAG_NAME, "main").text
        assert job_state(dash, "dead-1") is JobState.DEAD


def test_a_wrong_token_gets_401(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(token="right") as dash:
        driver.get(f"{dash.url}/?token=wrong")
        assert driver.title == "401 Unauthorized"
        assert "Wrong token" in driver.find_element(By.TAG_NAME, "body").text
        driver.get(f"{dash.url}/")
        assert driver.title == "401 Unauthorized", "a wrong token signed nobody in"
        # the status as the browser got it, from the same server
        assert httpx.get(f"{dash.url}/?token=wrong", timeout=5).status_code == 401
        # the sign-in form on the 401 page takes the right token
        field = driver.find_element(By.NAME, "token")
        field.send_keys("right")
        field.submit()
        wait_for(driver, lambda d: d.title.startswith("Queues"))


def test_sign_out_from_the_header(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(token="tok3n") as dash:
        driver.get(f"{dash.url}/?token=tok3n")
        wait_for(driver, lambda d: d.title.startswith("Queues"))
        driver.find_element(By.ID, "logout").click()
        wait_for(driver, lambda d: d.title == "401 Unauthorized")
        driver.get(f"{dash.url}/jobs?queue=default&state=dead")
        assert driver.title == "401 Unauthorized", "the session is gone"


def test_a_rebound_name_reaches_nothing(browser_fresh: Any) -> None:
    """DNS rebinding: a page of another site whose name now points at
    127.0.0.1 gets a 400 from an open dashboard, not its pages or actions."""
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served() as dash:
        port = dash.url.rsplit(":", 1)[1]
        driver.get(f"http://{REBOUND_NAME}:{port}/confirm/requeue?id=dead-1&queue=default")
        assert driver.title == "400 Bad Request"
        assert "is not allowed here" in driver.find_element(By.TAG_NAME, "body").text
        assert driver.find_elements(By.ID, "confirm") == []
        driver.get(f"{dash.url}/")  # the dashboard's own address still works
        wait_for(driver, lambda d: d.title.startswith("Queues"))
        assert job_state(dash, "dead-1") is JobState.DEAD


def test_screenshot_helper_writes_a_png(browser_fresh: Any, tmp_path: Path) -> None:
    from tests.dashboard_screenshot import screenshot

    out = tmp_path / "dashboard.png"
    screenshot(out, driver=browser_fresh)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_a_running_job_s_progress_bar_moves_live(browser_fresh: Any) -> None:
    """Issue 28: the job page's bar, message and log follow the job's notes
    without a reload."""
    from selenium.webdriver.common.by import By

    from chronos_trio import LeaseRef
    from chronos_trio.records import NoteWrite, Progress

    driver = browser_fresh
    with served(refresh=0.1) as dash:
        store: Store = dash.app.store
        job = dash.call(store.get_job, "leased-1")
        ref = LeaseRef(job.id, job.queue, job.lease_token, job.placement)
        driver.get(f"{dash.url}/job?id=leased-1")
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text.startswith("live"))
        bar = driver.find_element(By.ID, "job-progress")
        assert bar.get_attribute("value") in (None, "0")
        assert driver.find_element(By.ID, "job-progress-text").text == "no progress reported"
        dash.call(store.write_notes, [NoteWrite(ref, Progress(0.25, "a quarter"), ("one",))])
        wait_for(
            driver, lambda d: d.find_element(By.ID, "job-progress").get_attribute("value") == "0.25"
        )
        text = driver.find_element(By.ID, "job-progress-text").text
        assert text.startswith("25% a quarter (attempt 1, 20")
        dash.call(store.write_notes, [NoteWrite(ref, Progress(0.75, "most"), ("two",))])
        wait_for(
            driver, lambda d: d.find_element(By.ID, "job-progress").get_attribute("value") == "0.75"
        )
        log = driver.find_element(By.ID, "job-log").text.splitlines()
        assert [line.split("  ", 1)[1] for line in log] == ["one", "two"]


def test_a_chart_shows_the_jobs_workers_ran(browser_fresh: Any) -> None:
    """Issue 30 item 3: jobs run by a real worker (its aggregator's last
    write at shutdown) show as bars and run-time points on the queue page,
    with local times added by the page's script; and in read-only mode."""
    import trio
    from selenium.webdriver.common.by import By

    from tests.tests_app import Record, make_app

    app = make_app(None)
    app.use_store(MemoryStore())

    async def run_jobs() -> None:
        record = app.tasks["tests.record"]
        await record.enqueue_many([Record("chart", sleep=0.01) for _ in range(12)])
        await record.enqueue_many([Record("chart", fail=True) for _ in range(3)])
        with trio.fail_after(WAIT):
            async with app.open_worker(aggregate_interval=0.2) as worker:
                await worker.wait_idle()

    trio.run(run_jobs)
    driver = browser_fresh
    for options in ({}, {"read_only": True}):
        with served_app(app, **options) as dash:
            driver.get(f"{dash.url}/queue?name=default&hours=1")
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#charts svg"))
            ok = driver.find_elements(By.CSS_SELECTOR, '[data-history="default"] rect.bar.ok')
            failed = driver.find_elements(
                By.CSS_SELECTOR, '[data-history="default"] rect.bar.failed'
            )
            assert ok and failed, "the succeeded and failed jobs are drawn"
            assert ok[0].size["height"] > failed[0].size["height"] > 0, "12 ok over 3 failed"
            points = driver.find_elements(By.CSS_SELECTOR, '[data-history="default"] circle.point')
            assert points, "p50/p99 points"
            summary = driver.find_element(
                By.CSS_SELECTOR, '[data-history="default"] .chart.throughput title'
            ).get_attribute("textContent")
            assert "12 succeeded, 3 failed" in summary
            kinds = driver.find_elements(By.CSS_SELECTOR, '[data-history="default/tests.record"]')
            assert kinds, "a chart per kind"
            # the local time beside the UTC one, added by the script
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "time.ts + span.local"))
            if options:
                assert driver.find_elements(By.CSS_SELECTOR, ".actions, form[method=post]") == []
                posted = httpx.post(f"{dash.url}/actions/pause", data={"queue": "default"})
                assert posted.status_code == 403


def served_app(app: Any, **options: Any) -> ServedDashboard:
    return ServedDashboard(app, **options)
