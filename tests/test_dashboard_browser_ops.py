"""The operator's console in a real browser (headless Chromium, as
tests/test_dashboard_browser.py): a job's attempt history, a queue purge
(and none in read-only mode: no button, 403 on POST), a table that updates
live, keyboard navigation, and the pages at a phone's 400 px width."""

from __future__ import annotations

from typing import Any

from chronos_trio import JobState, WorkerInfo
from chronos_trio.store import Store
from tests.test_dashboard_browser import (  # the fixtures and helpers
    browser,
    browser_fresh,
    job_state,
    served,
    wait_for,
)

__all__ = ["browser", "browser_fresh"]


def test_a_job_s_attempt_history_reads_as_a_timeline(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served() as dash:
        driver.get(f"{dash.url}/job?id=dead-1")
        wait_for(driver, lambda d: d.title.startswith("Job dead-1"))
        story = driver.find_element(By.ID, "timeline").text
        assert "enqueued" in story
        assert "attempt 1 failed for good (dead) (on testhost:4242:0)" in story
        assert "PayloadError: bad" in story
        rows = driver.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
        assert len(rows) == 1 and "testhost:4242:0" in rows[0].text


def test_purge_a_queue_after_a_confirmation_that_counts(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(refresh=0.2) as dash:
        driver.get(f"{dash.url}/queue?name=default")
        wait_for(driver, lambda d: d.title.startswith("Queue default"))
        driver.find_element(By.ID, "action-purge").click()
        wait_for(driver, lambda d: d.title.startswith("Purge?"))
        counts = driver.find_element(By.ID, "purge-counts").text
        assert "dead 2" in counts and "total 6" in counts, counts
        assert "1 leased job(s) are left to finish" in driver.find_element(By.TAG_NAME, "main").text
        assert job_state(dash, "dead-1") is JobState.DEAD, "the confirmation changes nothing"
        driver.find_element(By.ID, "confirm").click()
        wait_for(driver, lambda d: d.find_elements(By.CLASS_NAME, "flash"))
        flash = driver.find_element(By.CLASS_NAME, "flash").text
        assert "purged queue default: deleted 6 job(s); 1 leased job(s) left to finish" in flash
        for job_id in ("dead-1", "ready-1", "scheduled-1", "retry-1", "done-1"):
            assert job_state(dash, job_id) is None, job_id
        assert job_state(dash, "leased-1") is JobState.LEASED
        cell = '[data-queue="default"][data-state="dead"]'
        assert driver.find_element(By.CSS_SELECTOR, cell).text == "0"


def test_read_only_offers_no_purge_and_refuses_its_post(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(read_only=True) as dash:
        driver.get(f"{dash.url}/queue?name=default")
        wait_for(driver, lambda d: d.title.startswith("Queue default"))
        assert driver.find_elements(By.ID, "action-purge") == []
        assert "Purge" not in driver.find_element(By.TAG_NAME, "main").text
        status = driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch("/actions/purge", {method: "POST", body: new URLSearchParams({queue: "default"}),
              headers: {"content-type": "application/x-www-form-urlencoded"}})
              .then(r => done(r.status), e => done(String(e)));
            """
        )
        assert status == 403
        assert job_state(dash, "dead-1") is JobState.DEAD


def test_the_workers_table_updates_live(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(refresh=0.2) as dash:
        driver.get(f"{dash.url}/workers")
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text.startswith("live"))
        assert "No live workers" in driver.find_element(By.ID, "live-workers").text
        store: Store = dash.app.store
        info = WorkerInfo("box:77:ab", "box", 77, ("default",), 8, 0.0, 0.0, 0, (), ("k",))
        dash.call(store.beat_worker, info, 60)
        wait_for(driver, lambda d: "box:77:ab" in d.find_element(By.ID, "live-workers").text)
        assert driver.title.startswith("Workers"), "no reload: the table was swapped in place"


def test_keyboard_reaches_the_skip_link_then_every_action(browser_fresh: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver = browser_fresh
    with served() as dash:
        driver.get(f"{dash.url}/queue?name=default")
        wait_for(driver, lambda d: d.title.startswith("Queue default"))
        keys = ActionChains(driver)
        keys.send_keys(Keys.TAB).perform()
        active = driver.switch_to.active_element
        assert active.text == "Skip to content" and active.is_displayed()
        outline = driver.execute_script(
            "return getComputedStyle(document.activeElement).outlineStyle"
        )
        assert outline not in ("", "none"), "a visible focus ring"
        keys.send_keys(Keys.ENTER).perform()
        wait_for(driver, lambda d: d.switch_to.active_element.tag_name == "main")
        reached = []
        for _ in range(60):
            keys.send_keys(Keys.TAB).perform()
            el = driver.switch_to.active_element
            reached.append(el.get_attribute("id") or el.text)
            if el.get_attribute("id") == "action-purge":
                break
        assert reached[-1] == "action-purge", reached
        assert reached[0] != "Skip to content", "the skip link skipped the header"
        keys.send_keys(Keys.ENTER).perform()
        wait_for(driver, lambda d: d.title.startswith("Purge?"))
        for _ in range(10):  # to the confirm button, by keyboard too
            keys.send_keys(Keys.TAB).perform()
            if driver.switch_to.active_element.get_attribute("id") == "confirm":
                break
        assert driver.switch_to.active_element.get_attribute("id") == "confirm"


def test_pages_are_readable_at_400_px(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    size = driver.get_window_size()
    driver.set_window_size(400, 800)
    try:
        with served() as dash:
            for path, title in [
                ("/", "Queues"),
                ("/queue?name=default", "Queue default"),
                ("/jobs?queue=default&state=dead", "dead jobs"),
                ("/job?id=dead-1", "Job dead-1"),
                ("/workers", "Workers"),
            ]:
                driver.get(dash.url + path)
                wait_for(driver, lambda d, t=title: d.title.startswith(t))
                width = driver.execute_script("return window.innerWidth")
                assert width <= 420, width
                page = driver.execute_script("return document.documentElement.scrollWidth")
                assert page <= width, f"{path}: the page scrolls sideways ({page} > {width})"
                for table in driver.find_elements(By.TAG_NAME, "table"):
                    box = table.rect
                    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1, path
                search = driver.find_element(By.CSS_SELECTOR, "header .lookup input")
                assert search.rect["width"] > 150, "the lookup field stays usable"
    finally:
        driver.set_window_size(size["width"], size["height"])
